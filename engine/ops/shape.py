"""Shape ops: views of the same values in another layout, and joining."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy

from engine import shapes, views
from engine.attrs import Attr
from engine.grad_mode import state as grad_state
from engine.node import FORWARD, RECORDING
from engine.ops.indexing import take
from engine.promotion import promoted
from engine.recording import derived, note_constant
from engine.registry import Sample, defop, trusted
from engine.user_warnings import reversing
from engine.variable import Variable


def _sum_to(xp, x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and x.shape[i + lead] != 1)
    out = x.sum(axis=axes, keepdims=True)
    return out.reshape(shape) if lead else out


def _expand(xp, x, shape):
    if -1 in shape:
        shape = shapes.expand([x.shape], [x.dtype], {"shape": shape})[0]
    if x.ndim == 0 and xp is numpy:
        # the gradient of every full reduction lands here; numpy.broadcast_to costs ~5x this view
        view = numpy.ndarray(shape, x.dtype, x, 0, (0,) * len(shape))
        view.setflags(write=False)  # ~10x cheaper than `view.flags.writeable = False`
        return view
    return xp.broadcast_to(x, shape)


sum_to = defop(
    "sum_to",
    _sum_to,
    lambda g, ans, x, shape: trusted.expand(g, shape=x.shape),
    attrs={"shape": Attr("shape")},
    saves=False,
    methods=(),
    samples=(Sample(((2, 3, 4),), {"shape": (3, 1)}), Sample(((3, 4),), {"shape": ()})),
    infer=shapes.sum_to,
    doc="sum x down to a shape it broadcasts from (the adjoint of expand)",
)
expand = defop(
    "expand",
    _expand,
    lambda g, ans, x, shape: trusted.sum_to(g, shape=x.shape),
    attrs={"shape": Attr("shape")},
    saves=False,
    view=True,
    samples=(Sample(((3, 1),), {"shape": (2, 3, 4)}), Sample(((4,),), {"shape": (3, -1)})),
    infer=shapes.expand,
    doc="broadcast x to a larger shape (-1 keeps a size)",
)
reshape = defop(
    "reshape",
    lambda xp, x, shape: x.reshape(shape),
    lambda g, ans, x, shape: trusted.reshape(g, shape=x.shape),
    attrs={"shape": Attr("shape")},
    saves=False,
    view=True,
    methods=("reshape", "view"),
    samples=(Sample(((3, 4),), {"shape": (2, 6)}), Sample(((2, 3, 4),), {"shape": (-1,)})),
    infer=shapes.reshape,
    doc="the same values in a new shape (one size may be -1)",
)


def _inverse(dims):
    n = len(dims)
    out = [0] * n
    for i, d in enumerate(dims):
        out[d % n] = i
    return tuple(out)


permute = defop(
    "permute",
    lambda xp, x, dims: x.transpose(dims),
    lambda g, ans, x, dims: transposed(g) if dims == (1, 0) else _permute((g,), {"dims": _inverse(dims)}),
    attrs={"dims": Attr("ints")},
    saves=False,
    view=True,
    samples=(Sample(((2, 3, 4),), {"dims": (2, 0, 1)}),),
    infer=shapes.permute,
    doc="reorder dimensions",
)
_permute: Callable = getattr(permute, "untracked", permute.call)  # `trusted.permute`'s own call, without its layers


def _diagonal_dims(shape, offset, dim1, dim2):
    """(the other dims, then dim1 and dim2; the diagonal's length): its layout in `shape`."""
    d1, d2 = dim1 % len(shape), dim2 % len(shape)
    size = max(min(shape[d1] + min(offset, 0), shape[d2] - max(offset, 0)), 0)
    return (*(d for d in range(len(shape)) if d not in (d1, d2)), d1, d2), size


def _diagonal_vjp(g, ans, x, offset, dim1, dim2):
    order, size = _diagonal_dims(x.shape, offset, dim1, dim2)
    steps, every = numpy.arange(size), {"slice": [None, None, None]}
    at = [steps - min(offset, 0), steps + max(offset, 0)]
    for array in at:
        note_constant(array)  # (the same whatever the inputs' values: a recorded plan's constant)
    index = (every,) * (x.ndim - 2) + ({"tensor": 0}, {"tensor": 1})
    spread = trusted.index_add(g, *at, index=index, shape=tuple(x.shape[d] for d in order))
    return trusted.permute(spread, dims=_inverse(order))


def _diagonal_infer(s, d, attrs):
    order, size = _diagonal_dims(s[0], attrs["offset"], attrs["dim1"], attrs["dim2"])
    return (*(s[0][i] for i in order[:-2]), size), d[0]


diagonal = defop(
    "diagonal",
    lambda xp, x, offset, dim1, dim2: xp.diagonal(x, offset, dim1, dim2),
    _diagonal_vjp,
    attrs={"offset": Attr("int", 0), "dim1": Attr("int", 0), "dim2": Attr("int", 1)},
    saves=False,
    view=True,
    methods=(),
    samples=(Sample(((3, 4),), {"offset": 1}), Sample(((2, 4, 3),), {"offset": -1, "dim1": 2, "dim2": 0})),
    infer=_diagonal_infer,
    doc="the diagonal of dims dim1 and dim2 (above it for offset > 0) as a last dim, a view",
)


def _strided_at(size, stride, offset):
    """The flat positions `as_strided(size, stride, offset)` reads, as an array of shape `size`."""
    where = numpy.arange(offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else offset + 1)
    return numpy.lib.stride_tricks.as_strided(where[offset:], size, [s * where.itemsize for s in stride]).copy()


def _as_strided(xp, x, size, stride, storage_offset):
    """x's elements in row-major order as its storage (the engine's `stride()`): a view where x is contiguous."""
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: {list(stride)}")
    need = storage_offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
    if need > x.size:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {storage_offset}, and itemsize "
            f"{x.itemsize} requiring a storage size of {need * x.itemsize} are out of bounds for storage of size "
            f"{x.size * x.itemsize}"
        )
    if xp is not numpy or not x.flags.c_contiguous:
        return x.reshape(-1)[xp.asarray(_strided_at(size, stride, storage_offset))]
    return numpy.ndarray(size, x.dtype, x, storage_offset * x.itemsize, [s * x.itemsize for s in stride])


def _as_strided_vjp(g, ans, x, size, stride, storage_offset):
    at = _strided_at(size, stride, storage_offset)
    note_constant(at)
    spread = trusted.index_add(g, at, index=({"tensor": 0},), shape=(math.prod(x.shape),))
    return trusted.reshape(spread, shape=x.shape)


as_strided = defop(
    "as_strided",
    _as_strided,
    _as_strided_vjp,
    attrs={"size": Attr("shape"), "stride": Attr("ints"), "storage_offset": Attr("int", 0)},
    saves=False,
    view=True,
    samples=(Sample(((3, 4),), {"size": (2, 2), "stride": (1, 2), "storage_offset": 1}),),
    infer=lambda s, d, attrs: (tuple(attrs["size"]), d[0]),
    doc="a view of x's elements (row-major, as its storage) with these sizes and strides",
)


def _swap(ndim, dim0, dim1):
    dims = list(range(ndim))
    if ndim:
        a, b = shapes.normalize_dims(dim0, ndim)[0], shapes.normalize_dims(dim1, ndim)[0]
        dims[a], dims[b] = dims[b], dims[a]
    return tuple(dims)


def _transpose(x, dim0, dim1):
    return x.permute(_swap(x.ndim, dim0, dim1))


def _transpose_infer(s, d, attrs):
    return shapes.permute(s, d, {"dims": _swap(len(s[0]), attrs["dim0"], attrs["dim1"])})


transpose = defop(
    "transpose",
    _transpose,
    attrs={"dim0": Attr("int"), "dim1": Attr("int")},
    composite=True,
    samples=(Sample(((2, 3, 4),), {"dim0": 0, "dim1": 2}),),
    infer=_transpose_infer,
    doc="swap two dimensions",
)


def _t_infer(s, d, attrs):
    if len(s[0]) > 2:
        raise shapes.ShapeError(f"t() expects a tensor with <= 2 dimensions, but self is {len(s[0])}D")
    return tuple(reversed(s[0])), d[0]


def _t(x):
    if x.ndim > 2:
        raise shapes.ShapeMismatch(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return x.permute((1, 0)[2 - x.ndim :])  # (of fewer dims, a view of x all the same, as PyTorch's)


t = defop("t", _t, composite=True, samples=(Sample(((3, 4),)),), infer=_t_infer, doc="transpose of a matrix")


def _transposed(a):
    return a.transpose()


def transposed(v):
    """All dimensions of `v` reversed, for engine code (a vjp's `x.T`: no view a program sees), the array's
    view itself when nothing records and no forward-AD level could give it a tangent."""
    if not (v._requires_grad and grad_state.enabled or FORWARD):  # the view, without an op's dispatch
        return derived(_transposed, v) if RECORDING else Variable._result(v._data.transpose(), None)
    return _permute((v,), {"dims": tuple(range(v._data.ndim - 1, -1, -1))})


def reversed_dims(v):
    """`v.T` on the engine: `transposed(v)`, a view of `v` (engine.views)."""
    if v._data.ndim != 2:  # (a call only then: `w.T` of a Linear is every step)
        reversing(v._data.ndim)
    dims = tuple(range(v._data.ndim - 1, -1, -1))
    return views.note(v, transposed(v), (permute, (), {"dims": dims}), grad_state.enabled)


def _unsqueeze_shape(shape, dim):
    d = shapes.normalize_dims(dim, len(shape) + 1)[0]
    return tuple(shape[:d]) + (1,) + tuple(shape[d:])


def _squeeze_shape(shape, dim):
    if dim is None:
        return tuple(s for s in shape if s != 1)
    dims = shapes.normalize_dims(dim, len(shape)) if shape else ()
    return tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))


def _flatten_shape(shape, start_dim, end_dim):
    if not shape:
        return (1,)
    (a,), (b,) = (shapes.normalize_dims(d, len(shape)) for d in (start_dim, end_dim))  # (PyTorch's IndexError)
    if a > b:
        raise shapes.ShapeError("flatten() has invalid args: start_dim cannot come after end_dim")  # (PyTorch's)
    size = 1
    for s in shape[a : b + 1]:
        size *= s
    return tuple(shape[:a]) + (size,) + tuple(shape[b + 1 :])


unsqueeze = defop(
    "unsqueeze",
    lambda x, dim: x.reshape(_unsqueeze_shape(x.shape, dim)),
    attrs={"dim": Attr("int")},
    composite=True,
    samples=(Sample(((3, 4),), {"dim": 1}), Sample(((3, 4),), {"dim": -1})),
    infer=lambda s, d, a: (_unsqueeze_shape(s[0], a["dim"]), d[0]),
    doc="insert a dimension of size 1",
)
squeeze = defop(
    "squeeze",
    lambda x, dim=None: x.reshape(_squeeze_shape(x.shape, dim)),
    attrs={"dim": Attr("dims", None)},
    composite=True,
    samples=(Sample(((3, 1, 4, 1),)), Sample(((3, 1, 4),), {"dim": 1})),
    infer=lambda s, d, a: (_squeeze_shape(s[0], a["dim"]), d[0]),
    doc="drop dimensions of size 1",
)
flatten = defop(
    "flatten",
    lambda x, start_dim=0, end_dim=-1: x.reshape(_flatten_shape(x.shape, start_dim, end_dim)),
    attrs={"start_dim": Attr("int", 0), "end_dim": Attr("int", -1)},
    composite=True,
    samples=(Sample(((2, 3, 4),)), Sample(((2, 3, 4),), {"start_dim": 1})),
    infer=lambda s, d, a: (_flatten_shape(s[0], a["start_dim"], a["end_dim"]), d[0]),
    doc="merge dimensions start_dim..end_dim into one",
)


def _slice_along(g, dim, item):
    d = dim % g.ndim
    return take(g, ({"slice": [None, None, None]},) * d + (item,))


def _cat_vjp(g, ans, xs, needs, dim):
    out, start = [], 0
    for x, need in zip(xs, needs):
        size = x.shape[dim % len(x.shape)]
        out.append(_slice_along(g, dim, {"slice": [start, start + size, None]}) if need else None)
        start += size
    return out


def _stack_vjp(g, ans, xs, needs, dim):
    return [_slice_along(g, dim, i) if need else None for i, need in enumerate(needs)]


JOIN_SAMPLES = (Sample(((2, 3), (4, 3)), {"dim": 0}), Sample(((2, 3), (2, 1), (2, 2)), {"dim": -1}))
cat = defop(
    "cat",
    lambda xp, *xs, dim: xp.concatenate(promoted(xs), axis=dim),
    vjp=_cat_vjp,
    variadic=True,
    attrs={"dim": Attr("int", 0)},
    saves=False,
    methods=(),
    samples=JOIN_SAMPLES,
    infer=shapes.cat,
    doc="join inputs along an existing dimension",
)
stack = defop(
    "stack",
    lambda xp, *xs, dim: xp.stack(promoted(xs), axis=dim),
    vjp=_stack_vjp,
    variadic=True,
    attrs={"dim": Attr("int", 0)},
    saves=False,
    methods=(),
    samples=(Sample(((2, 3), (2, 3)), {"dim": 0}), Sample(((2, 3), (2, 3), (2, 3)), {"dim": 2})),
    infer=shapes.stack,
    doc="join inputs along a new dimension",
)
