"""Code with type errors that `mypy --strict` must reject (tests/test_static.py): the check can fail."""

from __future__ import annotations

import numpy as np

from engine import Variable

x = Variable(np.ones(3), requires_grad=True)
y = x.expp()  # no such method
name: str = x.sum()  # a Variable is not a str
x.backward(retain_graph="yes")  # not a bool
