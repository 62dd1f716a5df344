"""The value checks of PyTorch's losses, as ops so that a lazy client's server makes them where it computes:
`class_targets` (nll_loss and cross_entropy's class indices, "Target N is out of bounds.") and `probabilities`
(binary_cross_entropy's input, "all elements of input should be between 0 and 1")."""

from __future__ import annotations

import numpy

from engine import shapes
from engine.attrs import Attr
from engine.node import passes
from engine.registry import Sample, defop


def _class_targets(xp, target, classes, ignore_index):
    kept = target != ignore_index
    wrong = kept & ((target < 0) | (target >= classes))
    if wrong.any():
        raise IndexError(f"Target {int(target[wrong].reshape(-1)[0])} is out of bounds.")
    return xp.where(kept, target, 0)


def _probabilities(xp, x):
    if not ((x >= 0) & (x <= 1)).all():  # (a NaN too)
        raise RuntimeError("all elements of input should be between 0 and 1")
    return x.copy()


defop(
    "class_targets",
    _class_targets,
    attrs={"classes": Attr("int", doc="the number of classes"), "ignore_index": Attr("int", -100)},
    differentiable=False,
    methods=(),
    samples=(Sample(make=lambda rng: [rng.integers(0, 3, (4,))], attrs={"classes": 3}),),
    infer=lambda s, d, a: (tuple(s[0]), numpy.result_type(d[0])),  # (`same`'s, but not a fitting op's)
    doc="class-index targets checked to lie in [0, classes), those equal to ignore_index as 0 (nll_loss's)",
)
defop(
    "probabilities",
    _probabilities,
    passes,
    saves=False,
    methods=(),
    samples=(Sample(((3, 4),), low=0.1, high=0.9),),
    infer=shapes.same,
    doc="x, checked to lie in [0, 1] (binary_cross_entropy's input)",
)
