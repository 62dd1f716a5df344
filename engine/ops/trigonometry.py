"""The trigonometric and hyperbolic functions beside `sin`, `cos`, `tanh` and the inverse ones
(`engine.ops.elementwise`): `tan`, `sinh` and `cosh`, each one NumPy ufunc, with PyTorch's derivatives
written with differentiable ops."""

from __future__ import annotations

from engine import shapes
from engine.ops.elementwise import UNARY
from engine.registry import F, defop


def _unary(name, ufunc, vjp, doc, samples=UNARY, **options):
    return defop(
        name, lambda xp, x: getattr(xp, ufunc)(x), vjp, samples=samples, infer=shapes.floating, doc=doc, **options
    )


tan = _unary("tan", "tan", lambda g, ans, x: g * (ans * ans + 1), "tangent", uses_output=True, saves=False)
sinh = _unary("sinh", "sinh", lambda g, ans, x: g * F.cosh(x), "hyperbolic sine")
cosh = _unary("cosh", "cosh", lambda g, ans, x: g * F.sinh(x), "hyperbolic cosine")
