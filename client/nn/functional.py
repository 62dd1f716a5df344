"""`torch.nn.functional` on client Variables: the functions of `engine.nn.functional`, defined once
there (they take their ops from the namespace of the Variables they are given)."""

from engine.nn.functional import *  # noqa: F403
from engine.nn.functional import __all__  # noqa: F401
from engine.nn.missing import missing  # noqa: E402

__getattr__ = missing("torch.nn.functional")
