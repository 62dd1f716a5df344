"""Rounding and modular arithmetic (`floor`, `ceil`, `round`, `trunc`, `fmod`, `remainder`,
`floor_divide`, `div_rounded`), integer shifts (`bitwise_left_shift`, `bitwise_right_shift`) and the logarithms and powers of base 10 and 2 (`log10`, `log2`, `exp2`).

PyTorch's gradients: the rounding functions have a zero gradient; `fmod(x, y)` and
`remainder(x, y)` pass `g` to x and `-g * trunc(x / y)` (resp. `floor(x / y)`) to y;
`floor_divide` (`//`) has none; `div_rounded` (`torch.div(x, y, rounding_mode=...)`) has a zero one, as
PyTorch's rounded division. Integer inputs keep their dtype, as PyTorch's do
(`int_tensor // 2` and `int_tensor % 2` are int64, `floor(int_tensor)` is the tensor's values).
"""

from __future__ import annotations

import math

import numpy

from engine import shapes
from engine.attrs import Attr
from engine.backend import array_module as _xp
from engine.ops.conv import const
from engine.ops.elementwise import BINARY, POSITIVE, UNARY
from engine.promotion import type_name
from engine.recording import derived
from engine.registry import Sample, defop


def _zero(g, ans, *inputs, **attrs):
    return const(_xp(g._data).zeros_like(g._data))


def _rounding(name, fn, doc, **options):
    def forward(xp, x, **attrs):
        return x.copy() if x.dtype.kind in "biu" else fn(xp, x, **attrs)

    return defop(
        name,
        forward,
        _zero,
        saves=False,
        samples=options.pop("samples", UNARY),
        infer=shapes.same,
        doc=doc,
        **options,
    )


floor = _rounding("floor", lambda xp, x: xp.floor(x), "the largest integer <= x (gradient zero, as in PyTorch)")
ceil = _rounding("ceil", lambda xp, x: xp.ceil(x), "the smallest integer >= x (gradient zero, as in PyTorch)")
trunc = _rounding("trunc", lambda xp, x: xp.trunc(x), "x rounded toward zero (gradient zero, as in PyTorch)")


def _round(xp, x, decimals):
    if decimals == 0:
        return xp.round(x)
    # PyTorch's definition: nearbyint(x * 10**d) / 10**d (and the other way round for d < 0), in x's dtype
    scale = x.dtype.type(10.0 ** abs(decimals))
    out = x * scale if decimals > 0 else x / scale
    xp.round(out, out=out)  # in place: the result is the only array this allocates
    if decimals > 0:
        out /= scale
    else:
        out *= scale
    return out


round = _rounding(
    "round",
    _round,
    "x rounded to `decimals` places, halves to even (gradient zero, as in PyTorch)",
    attrs={"decimals": Attr("int", 0, "decimal places (negative: to tens, hundreds...)")},
    samples=(Sample(((3, 4),)), Sample(((),)), Sample(((5,),), {"decimals": 2}), Sample(((5,),), {"decimals": -1})),
)


def _quotient_vjp(rounding):
    def vjp(g, ans, x, y):
        dtype = g.dtype

        def minus_rounded_quotient(xd, yd):
            xp = _xp(xd)
            return -rounding(xp, xp.true_divide(xd, yd)).astype(dtype, copy=False)

        return g * derived(minus_rounded_quotient, x, y)

    return vjp


# divisors kept away from zero, where the quotient (and so the gradient) is not defined
DIVISORS = tuple(Sample(s.shapes, low=0.3, high=2.0) for s in BINARY) + (
    Sample(
        make=lambda rng: [rng.uniform(-5, 5, (3, 4)), rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(0.3, 2, (3, 4))]
    ),
)


def _integer_divisor(x, y):
    """y, refused (PyTorch's RuntimeError) when it is an integer divisor of a non-empty x with a zero."""
    if y.dtype.kind in "biu" and x.size and not y.all():
        raise RuntimeError("ZeroDivisionError")
    return y


fmod = defop(
    "fmod",
    lambda xp, x, y: xp.fmod(x, _integer_divisor(x, y)),
    lambda g, ans, x, y: g,
    _quotient_vjp(lambda xp, q: xp.trunc(q)),
    samples=DIVISORS,
    infer=shapes.broadcast,
    doc="x - trunc(x / y) * y: the remainder with x's sign, as C's fmod",
)
remainder = defop(
    "remainder",
    lambda xp, x, y: xp.remainder(x, _integer_divisor(x, y)),
    lambda g, ans, x, y: g,
    _quotient_vjp(lambda xp, q: xp.floor(q)),
    samples=DIVISORS,
    infer=shapes.broadcast,
    doc="x - floor(x / y) * y: the remainder with y's sign, as Python's % (x % y)",
)
floor_divide = defop(
    "floor_divide",
    lambda xp, x, y: xp.floor_divide(x, _integer_divisor(x, y)),
    arity=2,
    differentiable=False,
    samples=DIVISORS,
    infer=shapes.broadcast,
    doc="floor(x / y), as Python's // (x // y); no gradient",
)


def _div_rounded(xp, x, y, floor=True):
    if floor:
        return xp.floor_divide(x, y)  # Python's (and PyTorch's) floor division, also of floats: 1.0 // 0.1 is 9
    if x.dtype.kind in "fc" or getattr(y, "dtype", x.dtype).kind in "fc":
        return xp.trunc(xp.true_divide(x, y))
    return xp.floor_divide(x - xp.fmod(x, y), y)  # exact: x less its C remainder is a multiple of y


div_rounded = defop(
    "div_rounded",
    _div_rounded,
    _zero,
    _zero,
    saves=False,
    methods=(),
    attrs={"floor": Attr("bool", True, "round the quotient down (True) or toward zero (False)")},
    samples=DIVISORS + (Sample(((3, 4), (3, 4)), {"floor": False}, low=0.3, high=2.0),),
    infer=shapes.broadcast,
    doc="x / y rounded down (or toward zero): torch.div's rounding_mode; integers stay integers; gradient zero",
)


def _shift(name, fn, symbol):
    def forward(xp, x, y):
        for a in (x, y):
            if numpy.result_type(a).kind not in "biu":
                kernel = "lshift" if symbol == "<<" else "rshift"
                raise NotImplementedError(f'"{kernel}_cpu" not implemented for {type_name(numpy.result_type(a))!r}')
        return fn(xp, x, y)

    return defop(
        name,
        forward,
        arity=2,
        differentiable=False,
        samples=(Sample(make=lambda rng: [rng.integers(-50, 50, (3, 4)), rng.integers(0, 8, (4,))]),),
        infer=shapes.bitwise,
        doc=f"x {symbol} y of bool or integer Variables (shifts past the width give 0, or -1 of a negative x)",
    )


bitwise_left_shift = _shift("bitwise_left_shift", lambda xp, x, y: xp.left_shift(x, y), "<<")
bitwise_right_shift = _shift("bitwise_right_shift", lambda xp, x, y: xp.right_shift(x, y), ">>")

LN10, LN2 = math.log(10.0), math.log(2.0)
log10 = defop(
    "log10",
    lambda xp, x: xp.log10(x),
    lambda g, ans, x: g / (x * LN10),
    samples=POSITIVE,
    infer=shapes.floating,
    doc="base-10 logarithm",
)
log2 = defop(
    "log2",
    lambda xp, x: xp.log2(x),
    lambda g, ans, x: g / (x * LN2),
    samples=POSITIVE,
    infer=shapes.floating,
    doc="base-2 logarithm",
)
exp2 = defop(
    "exp2",
    lambda xp, x: xp.exp2(x),
    lambda g, ans, x: g * ans * LN2,
    uses_output=True,
    samples=UNARY,
    infer=shapes.floating,
    doc="2 ** x",
)
