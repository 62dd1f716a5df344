"""Special functions that a composition of the other ops would compute badly: `erf` (the exact GELU
needs it), and `log1p`/`expm1`, accurate near zero where `log(1 + x)` and `exp(x) - 1` lose every
digit (softplus and the logistic losses of `engine.nn.functional` need them for large |x|).

Their vjps are written with differentiable ops, so second derivatives work as for every op.
"""

from __future__ import annotations

import importlib.util
import math

import numpy

from engine import costs, shapes
from engine.registry import F, Sample, defop

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
UNARY = (Sample(((3, 4),)), Sample(((),)))
_math_erf = numpy.frompyfunc(math.erf, 1, 1)


def _erf_forward(xp, x):
    """erf(x) by SciPy's (or CuPy's) vectorised kernel when present, else by the C library's `math.erf`
    per element (SciPy is not a dependency of gradserve; both are accurate to an ulp or two)."""
    dtype = shapes.floating([x.shape], [x.dtype], {})[1]
    if xp is not numpy:  # pragma: no cover - CuPy ships scipy.special's kernels
        from cupyx.scipy.special import erf

        return erf(x.astype(dtype, copy=False))
    try:
        from scipy.special import erf
    except ImportError:
        return numpy.asarray(_math_erf(x.astype(numpy.float64)), dtype=dtype)
    return erf(x.astype(dtype, copy=False))


def _erf_scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """SciPy computes float16 in float32 (a copy in, a result out); without SciPy each element is a
    Python float in an object array (~40 bytes); the vjp's exp(-(x * x)) chain holds a few values."""
    n = costs.numel(out_meta[0])
    wide = max(costs.float_itemsize(in_metas, out_meta), 4)
    forward = 2 * n * wide if wide > costs.float_itemsize(in_metas, out_meta) else 0
    if importlib.util.find_spec("scipy") is None:
        forward = 48 * n
    return costs.Scratch(forward=forward, backward=4 * n * wide + forward)


def _erf_work(in_shapes, out_shape, attrs) -> int:
    # without SciPy each element is a Python call: about 20 passes' worth
    return 20 * costs.one_pass(in_shapes, out_shape, attrs)


erf = defop(
    "erf",
    _erf_forward,
    lambda g, ans, x: g * (F.exp(-(x * x)) * TWO_OVER_SQRT_PI),
    samples=UNARY,
    infer=shapes.floating,
    work=_erf_work,
    scratch=_erf_scratch,
    doc="the error function, 2/sqrt(pi) * integral of exp(-t**2) from 0 to x",
)
log1p = defop(
    "log1p",
    lambda xp, x: xp.log1p(x),
    lambda g, ans, x: g / (x + 1),
    samples=(Sample(((3, 4),), low=-0.5, high=2.0), Sample(((),), low=-0.5, high=2.0)),
    infer=shapes.floating,
    doc="log(1 + x), accurate for small x",
)
expm1 = defop(
    "expm1",
    lambda xp, x: xp.expm1(x),
    lambda g, ans, x: g * (ans + 1),
    uses_output=True,
    samples=UNARY,
    infer=shapes.floating,
    doc="exp(x) - 1, accurate for small x",
)
