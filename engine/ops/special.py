"""Special functions that a composition of the other ops would compute badly: `erf` (the exact GELU
needs it) and `erfinv`, `log1p`/`expm1`, accurate near zero where `log(1 + x)` and `exp(x) - 1` lose every
digit (softplus and the logistic losses of `engine.nn.functional` need them for large |x|), and `lgamma`,
`digamma` and `polygamma` (each the next one's derivative).

Each runs SciPy's (or CuPy's) kernel when present, else a NumPy fallback as accurate (SciPy is not a
dependency of gradserve): erf by the C library's `math.erf` per element, erfinv by Newton steps on it,
lgamma by `math.lgamma`, digamma and polygamma by their recurrence and asymptotic series.

Their vjps are written with differentiable ops, so second derivatives work as for every op.
"""

from __future__ import annotations

import importlib.util
import math

import numpy

from engine import costs, shapes
from engine.attrs import REQUIRED, Attr
from engine.registry import F, Sample, defop

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
UNARY = (Sample(((3, 4),)), Sample(((),)))
_math_erf = numpy.frompyfunc(math.erf, 1, 1)


def _kernel(name, xp):
    """scipy.special's (or, on a GPU, cupyx.scipy.special's) function `name`; None without SciPy."""
    if xp is not numpy:  # pragma: no cover - CuPy ships scipy.special's kernels
        import cupyx.scipy.special as special
    else:
        try:
            import scipy.special as special
        except ImportError:
            return None
    return getattr(special, name)


def _floating(x):
    return x.astype(shapes.floating([x.shape], [x.dtype], {})[1], copy=False)


def _in_dtype(kernel, x):
    """`kernel(x)` in x's floating dtype, as PyTorch's (SciPy computes float16 in float32 or float64)."""
    x = _floating(x)
    return kernel(x).astype(x.dtype, copy=False)


def _erf_forward(xp, x):
    erf = _kernel("erf", xp)
    return _erf_fallback(x) if erf is None else _in_dtype(erf, x)


def _erf_fallback(x):
    return numpy.asarray(_math_erf(x.astype(numpy.float64)), dtype=_floating(x).dtype)


def _erfinv_forward(xp, x):
    erfinv = _kernel("erfinv", xp)
    if erfinv is not None:
        return _in_dtype(erfinv, x)
    y = x.astype(numpy.float64)
    with numpy.errstate(all="ignore"):  # Winitzki's approximation (to 2e-3), then Newton's steps on erf
        log = numpy.log((1 - y) * (1 + y))
        a = 2 / (math.pi * 0.147) + log / 2
        out = numpy.copysign(numpy.sqrt(numpy.sqrt(a * a - log / 0.147) - a), y)
        for _ in range(3):
            out -= (_erf_fallback(out) - y) / (TWO_OVER_SQRT_PI * numpy.exp(-out * out))
        out[numpy.abs(y) == 1] = numpy.copysign(math.inf, y[numpy.abs(y) == 1])
    return out.astype(_floating(x).dtype)


def _lgamma_one(v):
    try:
        return math.lgamma(v)
    except ValueError:  # a pole (0, -1, -2...)
        return math.inf


_math_lgamma = numpy.frompyfunc(_lgamma_one, 1, 1)


def _lgamma_forward(xp, x):
    gammaln = _kernel("gammaln", xp)
    if gammaln is not None:
        return _in_dtype(gammaln, x)
    return numpy.asarray(_math_lgamma(x.astype(numpy.float64)), dtype=_floating(x).dtype)


BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)  # B2, B4, ... B14
MAX_ORDER = 32  # polygamma's largest n (the fallback's series and recurrence grow with it)


def _polygamma_rule(shapes_, dtypes, attrs):
    _check_order(attrs["n"])
    return shapes.floating(shapes_, dtypes, attrs)


def _check_order(n):
    if not 0 <= n <= MAX_ORDER:
        raise shapes.ShapeError(f"polygamma(n, x) takes n from 0 to {MAX_ORDER}, got {n}")


def _polygamma_forward(xp, x, n):
    _check_order(n)
    psi, zeta = _kernel("psi", xp), _kernel("zeta", xp)
    if psi is not None:  # psi^(n)(x) = (-1)^(n + 1) n! zeta(n + 1, x), as scipy.special.polygamma computes it
        out = psi(_floating(x)) if n == 0 else zeta(n + 1.0, _floating(x))
        if n:
            out *= (-1) ** (n + 1) * math.factorial(n)
        return out.astype(_floating(x).dtype, copy=False)
    dtype, x = _floating(x).dtype, x.astype(numpy.float64)
    with numpy.errstate(all="ignore"):
        # below 1/2 by the reflection psi^(n)(x) = (-1)^n psi^(n)(1 - x) - f^(n)(x), f(x) = pi cot(pi x),
        # f^(n) = pi^(n + 1) P_n(cot(pi x)) with P_0(c) = c and P_k+1(c) = -(1 + c^2) P_k'(c)
        reflect = x < 0.5
        out = _polygamma_series(numpy.where(reflect, 1 - x, x), n)
        p = numpy.polynomial.Polynomial([0, 1])
        for _ in range(n):
            p = -numpy.polynomial.Polynomial([1, 0, 1]) * p.deriv()
        reflected = (-1) ** n * out - math.pi ** (n + 1) * p(1 / numpy.tan(math.pi * x))
        return numpy.where(reflect, reflected, out).astype(dtype)


def _polygamma_series(x, n):
    """psi^(n)(x) for x >= 1/2 by its recurrence up to x >= 10 + n, then its asymptotic series."""
    z, out, start = x.copy(), numpy.zeros_like(x), 10 + n
    low = z < start
    while low.any():  # psi^(n)(z) = psi^(n)(z + 1) - (-1)^n n! / z^(n + 1)
        out[low] -= (-1) ** n * math.factorial(n) / z[low] ** (n + 1)
        z[low] += 1
        low = z < start
    if n == 0:
        series = numpy.log(z) - 0.5 / z
        return out + series - sum(b / (2 * k) / z ** (2 * k) for k, b in enumerate(BERNOULLI, 1))
    series = math.factorial(n - 1) / z**n + math.factorial(n) / (2 * z ** (n + 1))
    for k, b in enumerate(BERNOULLI, 1):
        series = series + b * math.factorial(2 * k + n - 1) / math.factorial(2 * k) / z ** (2 * k + n)
    return out + (-1) ** (n + 1) * series


def _special_scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """SciPy computes float16 in float32 (a copy in, a result out); without SciPy each element is a
    Python float in an object array (~40 bytes); a vjp's chain (erf's exp(-(x * x))) holds a few values."""
    n = costs.numel(out_meta[0])
    wide = max(costs.float_itemsize(in_metas, out_meta), 4)
    forward = 2 * n * wide if wide > costs.float_itemsize(in_metas, out_meta) else 0
    if importlib.util.find_spec("scipy") is None:
        forward = 48 * n
    return costs.Scratch(forward=forward, backward=4 * n * wide + forward)


def _special_work(in_shapes, out_shape, attrs) -> int:
    # without SciPy each element is a Python call, or a series: about 20 passes' worth
    return 20 * costs.one_pass(in_shapes, out_shape, attrs)


def _special(name, forward, vjp, samples, doc, **options):
    """A function computed by SciPy's kernel or the fallback: its work and scratch rules."""
    options.setdefault("infer", shapes.floating)
    return defop(name, forward, vjp, samples=samples, work=_special_work, scratch=_special_scratch, doc=doc, **options)


erf = _special(
    "erf",
    _erf_forward,
    lambda g, ans, x: g * (F.exp(-(x * x)) * TWO_OVER_SQRT_PI),
    UNARY,
    "the error function, 2/sqrt(pi) * integral of exp(-t**2) from 0 to x",
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
erfinv = _special(
    "erfinv",
    _erfinv_forward,
    lambda g, ans, x: g * (F.exp(ans * ans) * (math.sqrt(math.pi) / 2)),
    (Sample(((3, 4),), low=-0.9, high=0.9), Sample(((),), low=-0.9, high=0.9)),
    "the inverse of erf on (-1, 1) (+-inf at +-1, nan outside)",
    uses_output=True,
    saves=False,
)
POSITIVE = (Sample(((3, 4),), low=0.5, high=3.0), Sample(((),), low=0.5, high=3.0))
lgamma = _special(
    "lgamma",
    _lgamma_forward,
    lambda g, ans, x: g * F.digamma(x),
    POSITIVE + (Sample(((5,),), low=-2.9, high=-2.1),),
    "log |gamma(x)|",
)
digamma = _special(
    "digamma",
    lambda xp, x: _polygamma_forward(xp, x, 0),
    lambda g, ans, x: g * F.polygamma(x, n=1),
    POSITIVE,
    "the derivative of lgamma",
)
polygamma = _special(
    "polygamma",
    _polygamma_forward,
    lambda g, ans, x, n: g * F.polygamma(x, n=n + 1),
    (Sample(((3, 4),), {"n": 1}, low=0.5, high=3.0), Sample(((5,),), {"n": 2}, low=-1.9, high=-1.1)),
    "the n-th derivative of digamma, polygamma(input, n=n) (PyTorch spells it polygamma(n, input))",
    attrs={"n": Attr("int", REQUIRED, "the order of the derivative of digamma (0: digamma)")},
    infer=_polygamma_rule,
)
