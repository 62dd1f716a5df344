"""The trigonometric and hyperbolic functions beside `sin`, `cos` and `tanh`: `tan`, `asin`, `acos`, `atan`,
`atan2`, `sinh` and `cosh`, each one NumPy ufunc, with PyTorch's derivatives written with differentiable ops."""

from __future__ import annotations

import numpy

from engine import costs, shapes
from engine.ops.elementwise import BINARY, UNARY
from engine.registry import F, Sample, defop

INSIDE = (Sample(((3, 4),), low=-0.9, high=0.9), Sample(((),), low=-0.9, high=0.9))  # asin, acos: |x| < 1


def _unary(name, ufunc, vjp, doc, samples=UNARY, **options):
    return defop(
        name, lambda xp, x: getattr(xp, ufunc)(x), vjp, samples=samples, infer=shapes.floating, doc=doc, **options
    )


def _broadcast_floating(shapes_, dtypes, attrs):
    shape, dtype = shapes.broadcast(shapes_, dtypes, attrs)
    return shape, dtype if dtype.kind == "f" else numpy.dtype(numpy.float64)


tan = _unary("tan", "tan", lambda g, ans, x: g * (ans * ans + 1), "tangent", uses_output=True, saves=False)
asin = _unary("asin", "arcsin", lambda g, ans, x: g / F.sqrt(1 - x * x), "arcsine (nan outside [-1, 1])", INSIDE)
acos = _unary("acos", "arccos", lambda g, ans, x: -g / F.sqrt(1 - x * x), "arccosine (nan outside [-1, 1])", INSIDE)
atan = _unary("atan", "arctan", lambda g, ans, x: g / (x * x + 1), "arctangent")
sinh = _unary("sinh", "sinh", lambda g, ans, x: g * F.cosh(x), "hyperbolic sine")
cosh = _unary("cosh", "cosh", lambda g, ans, x: g * F.sinh(x), "hyperbolic cosine")
atan2 = defop(
    "atan2",
    lambda xp, y, x: xp.arctan2(y, x),
    lambda g, ans, y, x: g * x / (x * x + y * y),
    lambda g, ans, y, x: -g * y / (x * x + y * y),
    samples=tuple(Sample(s.shapes, low=0.3, high=2.0) for s in BINARY),
    infer=_broadcast_floating,
    scratch=costs.temporaries(backward=2, per_broadcast=1),
    doc="the angle of the point (x, y): atan(y / x) in the right quadrant (atan2(input, other), input the y)",
)
