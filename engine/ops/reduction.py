"""Reductions and the normalisations built on them (softmax family, var)."""

from __future__ import annotations

import builtins
import math

import numpy

from engine import costs, shapes
from engine.attrs import Attr
from engine.backend import array_module
from engine.grad_mode import state as grad_state
from engine.node import FORWARD, RECORDING, _result
from engine.ops.shape import _expand
from engine.recording import derived
from engine.registry import F, Sample, defop, local, trusted

DIM = Attr("dims", None, "dimension(s) to reduce; null reduces all")
KEEPDIM = Attr("bool", False, "keep reduced dimensions with size 1")
REDUCE_SAMPLES = (
    Sample(((3, 4),)),
    Sample(((2, 3, 4),), {"dim": 1}),
    Sample(((2, 3, 4),), {"dim": (0, 2), "keepdim": True}),
    Sample(((3, 4),), {"dim": -1}),
)


def _axes(dim, ndim):
    if dim is None or dim == ():
        return None
    axes = shapes.normalize_dims(dim, ndim)
    return axes if ndim else None  # (a 0-d tensor's dim 0 or -1 is all of it, as PyTorch's)


def _count(shape, dim):
    if dim is None or dim == ():  # an empty dim list reduces everything, as in PyTorch
        return math.prod(shape)
    return math.prod(shape[d] for d in _axes(dim, len(shape)) or ())


def unreduce(g, shape, dim, keepdim):
    """Broadcast a reduction's gradient back to the input's shape (without create_graph, on the
    array: `local`, no op's dispatch)."""
    kept = None
    if not keepdim and g._data.ndim:  # a 0-d gradient (every dim reduced) broadcasts as it is
        kept = shapes.reduced_shape(shape, dim, True)
    shape = tuple(shape)
    if not (grad_state.enabled or FORWARD):
        if not RECORDING and type(g._data) is numpy.ndarray:  # (a loss's backward: `local`'s work without its frames)
            return _result(_expand(numpy, g._data if kept is None else g._data.reshape(kept), shape), None)
        return local(lambda a: _expand(array_module(a), a if kept is None else a.reshape(kept), shape), g)
    return trusted.expand(g if kept is None else trusted.reshape(g, shape=kept), shape=shape)


def _sum(xp, x, dim, keepdim):
    # NumPy's own reduce, as `x.sum` calls it, without the Python frame of NumPy's `_methods._sum` between
    axis = None if dim is None else _axes(dim, x.ndim)
    wide = "int64" if x.dtype.kind == "u" else None  # (a uint8 sum is PyTorch's int64, not NumPy's uint64)
    return (
        _add_reduce(x, axis, wide, None, keepdim) if type(x) is numpy.ndarray else x.sum(axis, wide, keepdims=keepdim)
    )


_add_reduce = numpy.add.reduce
sum = defop(
    "sum",
    _sum,
    lambda g, ans, x, dim, keepdim: unreduce(g, x.shape, dim, keepdim),
    attrs={"dim": DIM, "keepdim": KEEPDIM},
    saves=False,
    samples=REDUCE_SAMPLES,
    infer=shapes.reduce,
    doc="sum over dim (all when null)",
)
mean = defop(
    "mean",
    lambda xp, x, dim, keepdim: (
        x.mean(axis=_axes(dim, x.ndim), keepdims=keepdim)
        if x.dtype.kind in "fc" and x.size
        else x.sum(axis=_axes(dim, x.ndim), keepdims=keepdim) / 0
        if x.dtype.kind in "fc"
        else shapes.reduce_mean([], [x.dtype], {})
    ),  # (an empty x's nan divided here: NumPy's mean would warn from its own module, PyTorch is silent)
    lambda g, ans, x, dim, keepdim: unreduce(g, x.shape, dim, keepdim) / _count(x.shape, dim),
    attrs={"dim": DIM, "keepdim": KEEPDIM},
    saves=False,
    samples=REDUCE_SAMPLES,
    infer=shapes.reduce_mean,
    doc="mean over dim (all when null)",
)


def _prod_forward(xp, x, dim, keepdim):
    wide = "int64" if x.dtype.kind in "biu" else None  # PyTorch's: integer and bool products are int64
    return x.prod(axis=_axes(dim, x.ndim), keepdims=keepdim, dtype=wide)


def _prod_vjp(g, ans, x, dim, keepdim):
    """d prod / d x_i is the product of the other entries. Without zeros in a slice that is
    prod / x_i; with zeros it is built from P, the product of the slice's nonzero entries, and S,
    the sum of its zero entries (0 in value, but recorded, so second derivatives are exact): one
    zero at z gives P / x_i * S off z and P at z; two give P * (S - x_i) at each zero and 0 off them;
    more give 0."""
    axes = _axes(dim, x.ndim)

    def zeros_in_slice(a):
        return (a == 0).sum(axis=axes, keepdims=True)

    def is_zero(a):
        return a == 0

    def one_zero_in_slice(a):
        return zeros_in_slice(a) == 1

    def off_zero_of_at_most_one(a):
        return (a != 0) & (zeros_in_slice(a) <= 1)

    def zero_of_at_most_two(a):
        return (a == 0) & (zeros_in_slice(a) <= 2)

    at_zero, one_zero = derived(is_zero, x), derived(one_zero_in_slice, x)
    safe = F.where(at_zero, 1.0, x)
    nonzero_product = trusted.prod(safe, dim=dim, keepdim=True)
    zero_sum = trusted.sum(F.where(at_zero, x, 0.0), dim=dim, keepdim=True)
    off_zeros = nonzero_product / safe * F.where(one_zero, zero_sum, 1.0)
    on_zeros = nonzero_product * F.where(one_zero, 1.0, zero_sum - x)
    grad = F.where(derived(off_zero_of_at_most_one, x), off_zeros, 0.0)
    grad = grad + F.where(derived(zero_of_at_most_two, x), on_zeros, 0.0)
    return unreduce(g, x.shape, dim, keepdim) * grad


prod = defop(
    "prod",
    _prod_forward,
    _prod_vjp,
    attrs={"dim": DIM, "keepdim": KEEPDIM},
    samples=REDUCE_SAMPLES
    + (
        Sample(make=lambda rng: [numpy.array([[2.0, 0.0, 3.0], [0.5, -1.5, 1.0], [0.0, 0.0, 2.0]])], attrs={"dim": 1}),
        Sample(make=lambda rng: [numpy.array([[1.5, 0.0, -2.0, 0.7]])]),
    ),
    infer=shapes.reduce,
    scratch=costs.temporaries(backward=4, backward_masks=3),  # x with ones at its zeros, the product, the weights
    doc="product over dim (all when null); gradients exact at zeros",
)


def _extreme_vjp(g, ans, x, dim, keepdim):
    def weights(ans, x, g):
        peak = ans if keepdim else ans.reshape(shapes.reduced_shape(x.shape, dim, True))
        hit = x == peak
        count = hit.sum(axis=_axes(dim, x.ndim), keepdims=True)  # int64: a float16 count would overflow
        shares = hit.astype(g.dtype)  # in the gradient's dtype, not float64
        del hit
        shares /= count
        return shares

    return unreduce(g, x.shape, dim, keepdim) * derived(weights, ans, x, g)


EXTREME_SCRATCH = costs.temporaries(backward=1, backward_masks=1)  # the weights (input-sized) and the hits
amax = defop(
    "amax",
    lambda xp, x, dim, keepdim: xp.amax(x, axis=_axes(dim, x.ndim), keepdims=keepdim),
    _extreme_vjp,
    attrs={"dim": DIM, "keepdim": KEEPDIM},
    uses_output=True,
    samples=REDUCE_SAMPLES,
    infer=shapes.reduce_same_dtype,
    scratch=EXTREME_SCRATCH,
    doc="maximum over dim (ties share the gradient)",
)
amin = defop(
    "amin",
    lambda xp, x, dim, keepdim: xp.amin(x, axis=_axes(dim, x.ndim), keepdims=keepdim),
    _extreme_vjp,
    attrs={"dim": DIM, "keepdim": KEEPDIM},
    uses_output=True,
    samples=REDUCE_SAMPLES,
    infer=shapes.reduce_same_dtype,
    scratch=EXTREME_SCRATCH,
    doc="minimum over dim (ties share the gradient)",
)


def _arg(fn_name):
    def forward(xp, x, dim, keepdim):
        if x.size == 0 and (dim is None or x.shape[dim] == 0):  # PyTorch's IndexError (NumPy's is a ValueError)
            which = (
                "to be specified for input.numel() == 0." if dim is None else f"{dim % x.ndim} to have non-zero size."
            )
            raise IndexError(f"{fn_name}(): Expected reduction dim {which}")
        out = getattr(xp, fn_name)(x, axis=dim, keepdims=keepdim) if dim is not None else getattr(xp, fn_name)(x)
        if dim is None and keepdim:
            out = xp.asarray(out).reshape((1,) * x.ndim)
        return xp.asarray(out, dtype=numpy.int64)

    return forward


ARG_ATTRS = {"dim": Attr("int?", None, "dimension; null means the flattened input"), "keepdim": KEEPDIM}
argmax = defop(
    "argmax",
    _arg("argmax"),
    attrs=ARG_ATTRS,
    differentiable=False,
    samples=(Sample(((3, 4),)), Sample(((3, 4),), {"dim": 1})),
    infer=shapes.arg_reduce,
    doc="index of the maximum (no gradient)",
)
argmin = defop(
    "argmin",
    _arg("argmin"),
    attrs=ARG_ATTRS,
    differentiable=False,
    samples=(Sample(((3, 4),)), Sample(((3, 4),), {"dim": 1})),
    infer=shapes.arg_reduce,
    doc="index of the minimum (no gradient)",
)


def _norm_forward(xp, x, p, dim, keepdim):
    if x.dtype.kind not in "fc":
        raise ValueError("norm of integers")  # (refused by its shape rule, in PyTorch's words)
    axes = _axes(dim, x.ndim)
    if p == 2:
        return xp.sqrt((x * x).sum(axis=axes, keepdims=keepdim))
    if math.isinf(p):
        return xp.amax(xp.abs(x), axis=axes, keepdims=keepdim)
    return (xp.abs(x) ** p).sum(axis=axes, keepdims=keepdim) ** (1.0 / p)


def _is_zero(a):
    return a == 0


def _sign_as(x, g):
    return array_module(x).sign(x).astype(g.dtype)


def _norm_vjp(g, ans, x, p, dim, keepdim):
    zero = derived(_is_zero, ans)
    safe = F.where(zero, 1.0, ans)
    if math.isinf(p):
        return _extreme_vjp(g, ans.detach(), F.abs(x), dim, keepdim) * derived(_sign_as, x, g)
    if p == 2:
        return x * unreduce(F.where(zero, 0.0, g / safe), x.shape, dim, keepdim)
    scale = F.where(zero, 0.0, g / safe ** (p - 1))
    grad = derived(_sign_as, x, g) * F.abs(x) ** (p - 1) * unreduce(scale, x.shape, dim, keepdim)
    return F.where(derived(_is_zero, x), 0.0, grad) if p < 1 else grad  # 0 * inf at zeros when p < 1


def _norm_scratch(in_metas, out_meta, attrs):
    p = attrs["p"]
    # p = 2: x * x; inf: |x|, then the vjp's weights and sign(x); other p: |x| ** p and the vjp's powers
    forward, backward = (1, 0) if p == 2 else (1, 2) if math.isinf(p) else (2, 2)
    return costs.temporaries(forward=forward, backward=backward, backward_masks=1)(in_metas, out_meta, attrs)


norm = defop(
    "norm",
    _norm_forward,
    _norm_vjp,
    attrs={"p": Attr("p", 2.0, "order: any positive number or inf"), "dim": DIM, "keepdim": KEEPDIM},
    uses_output=True,
    twice_differentiable=True,
    samples=(
        Sample(((3, 4),)),
        Sample(((2, 3, 4),), {"dim": 1}),
        Sample(((3, 4),), {"p": 1.0, "dim": -1}),
        Sample(((3, 4),), {"p": 3.0}),
        Sample(((3, 4),), {"p": float("inf"), "dim": 0}),
    ),
    infer=shapes.reduce_norm,
    scratch=_norm_scratch,
    doc="p-norm over dim (all when null); gradient 0 where the norm is 0",
)


def _var(x, dim=None, unbiased=True, keepdim=False):
    centred = x - x.mean(dim, keepdim=True)
    count = _count(x.shape, dim)
    return (centred * centred).sum(dim, keepdim=keepdim) / builtins.max(count - (1 if unbiased else 0), 0)


var = defop(
    "var",
    _var,
    attrs={"dim": DIM, "unbiased": Attr("bool", True, "divide by n - 1"), "keepdim": KEEPDIM},
    composite=True,
    samples=REDUCE_SAMPLES + (Sample(((5,),), {"unbiased": False}),),
    infer=shapes.reduce_float,
    # x - mean and its square at once; the recorded product keeps x - mean for its vjps
    scratch=costs.temporaries(forward=2, kept=1, backward=3),
    doc="variance over dim (all when null)",
)


def _finite_peak(axes):
    """The max over `axes` (kept), 0 where it is not finite, in x's dtype: the shift of a stable softmax."""

    def finite_peak(x):
        xp = array_module(x)
        if not x.size:  # (nothing to reduce: no shift; logsumexp's -inf and softmax's empty result follow)
            return xp.zeros(shapes.reduced_shape(x.shape, axes, True), x.dtype)
        peak = xp.amax(x, axis=axes, keepdims=True)
        return xp.where(xp.isfinite(peak), peak, 0).astype(x.dtype)

    return finite_peak


def _logsumexp(x, dim, keepdim=False):
    axes = tuple(range(x.ndim)) if dim == () else _axes(dim, x.ndim) or ()
    peak = derived(_finite_peak(axes), x)
    out = (x - peak).exp().sum(axes, keepdim=True).log() + peak
    return out if keepdim else out.reshape(shapes.reduced_shape(x.shape, axes, False))


SOFTMAX_DIM = Attr("int", doc="dimension that sums to one")
SOFTMAX_SAMPLES = (Sample(((3, 4),), {"dim": 1}), Sample(((2, 3, 4),), {"dim": 0}), Sample(((5,),), {"dim": -1}))

logsumexp = defop(
    "logsumexp",
    _logsumexp,
    attrs={"dim": Attr("dims", doc="dimension(s) to reduce"), "keepdim": KEEPDIM},
    composite=True,
    samples=SOFTMAX_SAMPLES + (Sample(((2, 3, 4),), {"dim": (1, 2), "keepdim": True}),),
    infer=shapes.reduce_float,
    scratch=costs.temporaries(forward=2, kept=1, backward=1),  # x - max and its exp (kept by exp)
    doc="log(sum(exp(x))) over dim, computed stably",
)


def _log_softmax(x, dim, kernel="log_softmax"):
    if x.dtype.kind not in "fc":  # (PyTorch's kernels are floating only; `dtype=` casts before)
        shapes.floating_kernel(kernel, x.ndim, dim, x.dtype)
    # (x - max) - log(sum(exp(x - max))): subtracting the max first keeps float32 exact on inputs
    # like [1000, 1001, 1002], where x - logsumexp(x) would lose digits to x's magnitude
    axes = _axes(dim, x.ndim) or ()
    shifted = x - derived(_finite_peak(axes), x)
    return shifted - shifted.exp().sum(axes, keepdim=True).log()


log_softmax = defop(
    "log_softmax",
    _log_softmax,
    attrs={"dim": SOFTMAX_DIM},
    composite=True,
    samples=SOFTMAX_SAMPLES,
    infer=shapes.LOG_SOFTMAX,
    scratch=costs.temporaries(forward=1, kept=1, backward=2),  # x - max and its exp (kept by exp)
    doc="x - logsumexp(x, dim)",
)
softmax = defop(
    "softmax",
    lambda x, dim: _log_softmax(x, dim, "softmax").exp(),
    attrs={"dim": SOFTMAX_DIM},
    composite=True,
    samples=SOFTMAX_SAMPLES,
    infer=shapes.SOFTMAX,
    scratch=costs.temporaries(forward=1, kept=1, backward=3),  # as log_softmax, and the exp's vjp
    doc="exp(x) / sum(exp(x)) along dim, computed stably",
)
