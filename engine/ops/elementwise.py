"""Elementwise ops: arithmetic, transcendental functions, comparisons, selection, casts."""

from __future__ import annotations

import operator

import numpy

from engine import backend, costs, promotion, shapes
from engine.attrs import Attr
from engine.backend import array_module as _xp
from engine.grad_mode import state as grad_state
from engine.node import FORWARD, RECORDING, _result, _wrap, passes, times
from engine.promotion import promoted
from engine.recording import derived, fixed
from engine.registry import F, Sample, defop, local, trusted

BINARY = (
    Sample(((3, 4), (3, 4))),
    Sample(((2, 3, 4), (4,))),
    Sample(((3, 1), (1, 4))),
    Sample(((), (2, 3))),
)
UNARY = (Sample(((3, 4),)), Sample(((),)))
POSITIVE = (Sample(((3, 4),), low=0.5, high=2.0), Sample(((),), low=0.5, high=2.0))

add = defop(
    "add",
    operator.add,
    passes,
    passes,
    saves=False,
    takes_xp=False,
    samples=BINARY,
    infer=shapes.broadcast,
    doc="x + y (broadcasting)",
)


def _sub(x, y):
    # NumPy subtracts a bool from a number: a ValueError, so that the shape rule words PyTorch's refusal of it
    if numpy.dtype(bool) in (getattr(x, "dtype", None), getattr(y, "dtype", None)):
        raise ValueError("a bool subtraction")
    return x - y


def _neg(x):
    try:
        return -x
    except TypeError:  # NumPy's refusal of bools
        raise RuntimeError(promotion.BOOL_NEGATION) from None


def _sub_vjp_y(g, ans, x, y):  # -g, on the array where nothing records (no dispatch of neg: the HVP's second walk)
    return -g if grad_state.enabled or FORWARD or RECORDING else _result(_wrap(-g._data, g._data), None)


sub = defop(
    "sub",
    _sub,
    passes,
    _sub_vjp_y,
    saves=False,
    takes_xp=False,
    samples=BINARY,
    infer=shapes.subtract,
    doc="x - y (broadcasting)",
)
mul = defop(
    "mul",
    operator.mul,
    lambda g, ans, x, y: times(g, y),
    lambda g, ans, x, y: times(g, x),
    takes_xp=False,
    reads=((1,), (0,)),
    samples=BINARY,
    infer=shapes.broadcast,
    scratch=costs.temporaries(per_broadcast=0.5),
    doc="x * y (broadcasting)",
)
div = defop(
    "div",
    operator.truediv,
    lambda g, ans, x, y: g / y,
    lambda g, ans, x, y: g * local(lambda x, y: -(x / (y * y)), x, y),
    takes_xp=False,
    reads=((1,), (0, 1)),
    samples=tuple(Sample(s.shapes, low=0.5, high=2.0) for s in BINARY),
    infer=shapes.floating_broadcast,
    scratch=costs.temporaries(per_broadcast=1),  # -(x / (y * y)) and its product with g at once
    doc="x / y (true division, broadcasting; IEEE results for division by zero)",
)
neg = defop("neg", _neg, lambda g, ans, x: -g, saves=False, takes_xp=False, samples=UNARY, infer=shapes.same, doc="-x")


def _zero_base(x, y):
    return (x == 0) & (y >= 0)


def _is_zero(a):
    return a == 0


def _pow_exponent_vjp(g, ans, x, y):
    base = x if x.dtype == ans.dtype else trusted.cast(x, dtype=ans.dtype.name)  # log(x) in the promoted dtype
    return F.where(derived(_zero_base, x, y), 0.0, g * ans * F.log(base))


def _power_rule(x, y):
    return y * x ** (y - 1)


def _square_rule(x, y):  # the power rule at y == 2 (x ** 1 is x: the same values, one pass less)
    return y * x


def _pow_base_vjp(g, ans, x, y):
    exponent = y._data
    if exponent.ndim == 0 and not y._requires_grad and (not RECORDING or fixed(exponent)):
        # a constant exponent c (`x ** 2`, `x.pow(3.0)`): g * c * x ** (c - 1), as PyTorch's pow_backward; no
        # mask unless c == 0 (where the rule's 0 * x ** -1 is nan at x == 0). Without create_graph, on the
        # arrays in one pass less (the product with g made in the rule's fresh array)
        c = exponent.item() if type(exponent) is numpy.ndarray else backend.host_item(exponent)
        rule = _square_rule if c == 2 else _power_rule
        if c != 0 and not (grad_state.enabled or FORWARD or RECORDING):  # on the arrays: `local`'s work inline
            return _result(_wrap(operator.imul(rule(x._data, exponent), g._data), g._data), None)
        if c != 0 and (grad_state.enabled or FORWARD):
            return g * local(rule, x, y)
        if c != 0:  # on the arrays, g multiplied into the rule's fresh array (of g's shape: y is 0-d)
            return local(lambda g, x, y: operator.imul(rule(x, y), g), g, x, y)
    grad = g * local(_power_rule, x, y)
    # d/dx x ** 0 is 0 everywhere, also at x == 0 where y * x ** (y - 1) would be 0 * inf (selected
    # whatever the values, so that the steps do not depend on them: see engine.recording)
    return F.where(derived(_is_zero, y), 0.0, grad)


def _origin(y, x):
    return (x == 0) & (y == 0)


def _zeros_like(a):
    return _xp(a).zeros_like(a)


def _positive(x):
    return ~(x <= 0)


def _sign(xp, x):
    """sign(x), 0 at NaN as PyTorch's (NumPy's is NaN), in place: one mask of scratch."""
    if x.dtype.kind != "f":
        return xp.sign(x)
    out = xp.sign(x, out=xp.empty_like(x))  # (an array, also of a 0-d x)
    out[xp.isnan(out)] = 0
    return out


def _sign_as(x, g):
    return _sign(_xp(x), x).astype(g.dtype, copy=False)


def _pow_forward(xp, x, y):
    # x ** 2 as x * x, as NumPy's own `x ** 2` and PyTorch do (the same values; the power loop costs ~2x);
    # not on a device array, whose exponent's value would have to be fetched
    square = y.ndim == 0 and type(y) is numpy.ndarray and y.dtype == x.dtype and x.dtype.kind == "f" and y.item() == 2
    if x.dtype.kind == "b":  # (promoted: both bool) x ** y of bools is a bool, PyTorch's; NumPy's is int8
        return x | ~y
    return x * x if square else x**y


pow = defop(
    "pow",
    _pow_forward,
    _pow_base_vjp,
    _pow_exponent_vjp,
    uses_output=(1,),
    reads=((1, 0), (0, 1)),
    samples=tuple(Sample(s.shapes, low=0.5, high=2.0) for s in BINARY),
    infer=shapes.broadcast,
    scratch=costs.temporaries(backward=2.5, per_broadcast=1, backward_masks=2),  # y * x ** (y - 1), g * ans * log(x)
    doc="x ** y (broadcasting)",
)

exp = defop(
    "exp",
    lambda xp, x: xp.exp(x),
    lambda g, ans, x: g * ans,
    uses_output=True,
    saves=False,
    reads=((),),
    samples=UNARY,
    infer=shapes.floating,
    doc="e ** x",
)
log = defop(
    "log",
    lambda xp, x: xp.log(x),
    lambda g, ans, x: g / x,
    samples=POSITIVE,
    infer=shapes.floating,
    doc="natural logarithm (IEEE: log(0) = -inf, log(-1) = nan)",
)
sqrt = defop(
    "sqrt",
    lambda xp, x: xp.sqrt(x),
    lambda g, ans, x: g / (ans * 2),
    uses_output=True,
    saves=False,
    reads=((),),
    samples=POSITIVE,
    infer=shapes.floating,
    doc="square root",
)
sign = defop(
    "sign",
    _sign,
    lambda g, ans, x: derived(_zeros_like, g),
    saves=False,
    samples=UNARY,
    infer=shapes.same,
    doc="-1, 0 or 1 by the sign of x (gradient zero, as in PyTorch)",
)
abs = defop(
    "abs",
    lambda xp, x: xp.abs(x),
    lambda g, ans, x: g * derived(_sign_as, x, g),
    samples=UNARY,
    infer=shapes.same,
    doc="|x| (gradient sign(x), 0 at 0)",
)
sin = defop(
    "sin", lambda xp, x: xp.sin(x), lambda g, ans, x: g * F.cos(x), samples=UNARY, infer=shapes.floating, doc="sine"
)
cos = defop(
    "cos",
    lambda xp, x: xp.cos(x),
    lambda g, ans, x: -(g * F.sin(x)),
    samples=UNARY,
    infer=shapes.floating,
    doc="cosine",
)
INSIDE_ONE = (Sample(((3, 4),), low=-0.9, high=0.9), Sample(((),), low=-0.9, high=0.9))
asin = defop(
    "asin",
    lambda xp, x: xp.arcsin(x),
    lambda g, ans, x: g / F.sqrt(1 - x * x),
    samples=INSIDE_ONE,
    infer=shapes.floating,
    doc="arcsine (NaN outside [-1, 1])",
)
acos = defop(
    "acos",
    lambda xp, x: xp.arccos(x),
    lambda g, ans, x: -(g / F.sqrt(1 - x * x)),
    samples=INSIDE_ONE,
    infer=shapes.floating,
    doc="arccosine (NaN outside [-1, 1])",
)
atan = defop(
    "atan",
    lambda xp, x: xp.arctan(x),
    lambda g, ans, x: g / (1 + x * x),
    samples=UNARY,
    infer=shapes.floating,
    doc="arctangent",
)
atan2 = defop(
    "atan2",
    lambda xp, y, x: xp.arctan2(y, x),
    lambda g, ans, y, x: F.where(derived(_origin, y, x), 0.0, g * (x / (x * x + y * y))),  # (0 at (0, 0), as PyTorch)
    lambda g, ans, y, x: F.where(derived(_origin, y, x), 0.0, g * (-y / (x * x + y * y))),
    samples=tuple(Sample(s.shapes, low=0.5, high=2.0) for s in BINARY),
    infer=shapes.floating_broadcast,
    scratch=costs.temporaries(per_broadcast=1),
    doc="the angle of the point (x, y): arctan(y / x) in the right quadrant (broadcasting)",
)
tanh = defop(
    "tanh",
    lambda xp, x: xp.tanh(x),
    lambda g, ans, x: times(g, local(lambda a: 1 - a * a, ans)),  # (`times`: the product without its dispatch)
    uses_output=True,
    saves=False,
    reads=((),),
    samples=UNARY,
    infer=shapes.floating,
    doc="hyperbolic tangent",
)
sigmoid = defop(
    "sigmoid",
    lambda xp, x: (xp.tanh(x * 0.5) + 1) * 0.5,
    lambda g, ans, x: g * local(lambda a: a * (1 - a), ans),
    uses_output=True,
    saves=False,
    reads=((),),
    samples=UNARY,
    infer=shapes.floating,
    scratch=costs.temporaries(forward=1),  # tanh(x * 0.5) and x * 0.5
    doc="1 / (1 + e ** -x), computed stably",
)
relu = defop(
    "relu",
    lambda xp, x: xp.maximum(x, 0),
    lambda g, ans, x: (
        g * derived(_positive, x) if grad_state.enabled or FORWARD else local(lambda g, x: g * _positive(x), g, x)
    ),
    samples=UNARY,
    infer=shapes.same,
    doc="max(x, 0)",
)


def _clamp_forward(xp, x, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    # min(max(x, min), max), PyTorch's definition; xp.clip computes the same at several times the cost
    out = x if min is None else xp.maximum(x, min)
    return out if max is None else xp.minimum(out, max)


def _clamp_vjp(g, ans, x, min=None, max=None):
    if not (grad_state.enabled or FORWARD or RECORDING):  # on the arrays, without `local`'s and the mask's frames
        a = x._data
        mask = a >= min if max is None else a <= max if min is None else (a >= min) & (a <= max)
        return _result(_wrap(g._data * mask, a), None)

    def inside(x):
        within = True
        if min is not None:
            within = x >= min
        if max is not None:
            within = within & (x <= max)
        return within

    return g * derived(inside, x) if grad_state.enabled or FORWARD else local(lambda g, x: g * inside(x), g, x)


clamp = defop(
    "clamp",
    _clamp_forward,
    _clamp_vjp,
    attrs={"min": Attr("float?", None), "max": Attr("float?", None)},
    samples=(
        Sample(((3, 4),), {"min": -0.5}),
        Sample(((3, 4),), {"min": -0.5, "max": 0.7}),
        Sample(((5,),), {"max": 0.3}),
    ),
    infer=shapes.same,
    scratch=costs.temporaries(forward=1),  # max(x, min) before min(.., max)
    doc="x limited to [min, max] (gradient 1 inside, 0 outside)",
)


def _tie_weights(x, y, g):
    # PyTorch's rule: 0 where x loses, 1/2 on ties, 1 otherwise (so a NaN passes the gradient on);
    # built in the gradient's dtype, with one boolean mask at a time (no int64/float64 temporaries)
    return derived(_ties, x, y, g)


def _ties(xd, yd, g):
    xp, dtype = _xp(xd), g.dtype
    weights = xp.asarray(xd < yd, dtype=dtype)  # an array also when both are 0-d
    xp.subtract(1, weights, out=weights)
    weights[xd == yd] = 0.5
    return weights


TIE_SCRATCH = costs.temporaries(per_broadcast=1, backward_masks=1)  # the weights and a mask of ties
maximum = defop(
    "maximum",
    lambda xp, x, y: xp.maximum(x, y),
    lambda g, ans, x, y: g * _tie_weights(x, y, g),
    lambda g, ans, x, y: g * _tie_weights(y, x, g),
    samples=BINARY,
    infer=shapes.broadcast,
    scratch=TIE_SCRATCH,
    doc="elementwise max (ties split the gradient)",
)
minimum = defop(
    "minimum",
    lambda xp, x, y: xp.minimum(x, y),
    lambda g, ans, x, y: g * _tie_weights(y, x, g),
    lambda g, ans, x, y: g * _tie_weights(x, y, g),
    samples=BINARY,
    infer=shapes.broadcast,
    scratch=TIE_SCRATCH,
    doc="elementwise min (ties split the gradient)",
)


def _mask_sample(rng):
    return [rng.random((3, 4)) > 0.5, rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (4,))]


def _where_forward(xp, c, x, y):
    if c.dtype.kind != "b" and c.dtype != numpy.uint8:  # (NumPy's where takes it; the shape rule refuses it)
        raise ValueError("where's condition")
    if x.dtype is not y.dtype:  # PyTorch's type promotion (here: a recording's replay casts them too)
        x, y = promoted((x, y))
    return xp.where(c, x, y)


where = defop(
    "where",
    _where_forward,
    None,
    lambda g, ans, c, x, y: F.where(c, g, 0.0),
    lambda g, ans, c, x, y: F.where(c, 0.0, g),
    methods=(),
    samples=(Sample(make=_mask_sample),),
    infer=shapes.where_rule,
    doc="x where cond else y (cond gets no gradient)",
)

cast = defop(
    "cast",
    lambda xp, x, dtype: x.astype(dtype),
    lambda g, ans, x, dtype: trusted.cast(g, dtype=x.dtype.name),
    attrs={"dtype": Attr("dtype")},
    saves=False,
    methods=(),
    samples=(Sample(((3,),), {"dtype": "float64"}),),
    infer=shapes.cast,
    doc="x converted to dtype (gradient converted back)",
)
clone = defop(
    "clone",
    lambda xp, x: x.copy(),
    passes,
    saves=False,
    samples=UNARY,
    infer=shapes.same,
    ignores=("memory_format",),  # every Variable is contiguous (engine.runtime.memory_format)
    doc="a copy of x",
)

COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_compare_forward = {
    "lt": lambda xp, x, y: x < y,
    "le": lambda xp, x, y: x <= y,
    "gt": lambda xp, x, y: x > y,
    "ge": lambda xp, x, y: x >= y,
    "eq": lambda xp, x, y: x == y,
    "ne": lambda xp, x, y: x != y,
}
for _name, _symbol in COMPARISONS.items():
    defop(
        _name,
        _compare_forward[_name],
        arity=2,
        differentiable=False,
        samples=BINARY,
        infer=shapes.compare,
        scratch=costs.temporaries(backward=0, buffered=True),  # a bool output: NumPy's buffers count
        doc=f"x {_symbol} y as a bool Variable (no gradient)",
    )


def _bits_sample(rng):
    return [rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5]


BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_bitwise_forward = {
    "bitwise_and": lambda xp, x, y: x & y,
    "bitwise_or": lambda xp, x, y: x | y,
    "bitwise_xor": lambda xp, x, y: x ^ y,
}
for _name, _symbol in BITWISE.items():
    defop(
        _name,
        _bitwise_forward[_name],
        arity=2,
        differentiable=False,
        samples=(Sample(make=_bits_sample),),
        infer=shapes.bitwise,
        scratch=costs.temporaries(backward=0, buffered=True),
        doc=f"x {_symbol} y of bool or integer Variables (no gradient)",
    )
bitwise_not = defop(
    "bitwise_not",
    lambda xp, x: ~x,
    differentiable=False,
    samples=(Sample(make=lambda rng: [rng.random((3, 4)) > 0.5]),),
    infer=shapes.bitwise,
    scratch=costs.temporaries(backward=0, buffered=True),
    doc="~x of a bool or integer Variable (no gradient)",
)
