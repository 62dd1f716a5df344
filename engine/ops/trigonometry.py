"""The trigonometric and hyperbolic functions beside `sin`, `cos`, `tanh` and the inverse ones
(`engine.ops.elementwise`): `tan`, `sinh`, `cosh` and the inverse hyperbolic ones, each one NumPy ufunc
(exact where a composite of logs loses digits or overflows), with PyTorch's derivatives written with
differentiable ops."""

from __future__ import annotations

from engine import shapes
from engine.ops.elementwise import INSIDE_ONE, UNARY
from engine.registry import F, Sample, defop


def _unary(name, ufunc, vjp, doc, samples=UNARY, **options):
    return defop(
        name, lambda xp, x: getattr(xp, ufunc)(x), vjp, samples=samples, infer=shapes.floating, doc=doc, **options
    )


tan = _unary("tan", "tan", lambda g, ans, x: g * (ans * ans + 1), "tangent", uses_output=True, saves=False)
sinh = _unary("sinh", "sinh", lambda g, ans, x: g * F.cosh(x), "hyperbolic sine")
cosh = _unary("cosh", "cosh", lambda g, ans, x: g * F.sinh(x), "hyperbolic cosine")
asinh = _unary("asinh", "arcsinh", lambda g, ans, x: g / F.sqrt(x * x + 1), "inverse hyperbolic sine")
ABOVE_ONE = (Sample(((3, 4),), low=1.5, high=3.0), Sample(((),), low=1.5, high=3.0))
acosh = _unary(
    "acosh",
    "arccosh",
    lambda g, ans, x: g / F.sqrt(x * x - 1),
    "inverse hyperbolic cosine (NaN below 1)",
    samples=ABOVE_ONE,
)
atanh = _unary("atanh", "arctanh", lambda g, ans, x: g / (1 - x * x), "inverse hyperbolic tangent", samples=INSIDE_ONE)
