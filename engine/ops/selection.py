"""Triangles, cumulative sums, sorting and index-driven picks (`gather`, `scatter_add`,
`index_select`, `masked_fill`): torch's names over the indexing primitives where they compose.

`gather`, `scatter_add` and `index_select` read their index through one `derived` step that
checks its range (PyTorch refuses negative and too-large indices; NumPy would wrap or fail later)
and, for the first two, flattens it into positions of the flattened input: the pick is then
`getitem` and its adjoint `index_add`, so gradients of any order come from those.
"""

from __future__ import annotations

import numpy

from engine import costs, shapes
from engine.attrs import Attr
from engine.backend import array_module
from engine.ops.indexing import take
from engine.promotion import c_name
from engine.recording import derived
from engine.registry import F, Sample, defop, trusted

EVERY = {"slice": [None, None, None]}


def _triangle(name):
    def forward(xp, x, diagonal):
        if x.ndim < 2:
            raise shapes.ShapeError(f"{name}: input tensor must have at least 2 dimensions")
        return getattr(xp, name)(x, max(min(diagonal, x.shape[-1]), -x.shape[-2]))

    def infer(s, d, a):
        if len(s[0]) < 2:
            raise shapes.ShapeError(f"{name}: input tensor must have at least 2 dimensions")
        return tuple(s[0]), numpy.result_type(d[0])

    defop(
        name,
        forward,
        lambda g, ans, x, diagonal: getattr(trusted, name)(g, diagonal=diagonal),
        attrs={"diagonal": Attr("int", 0, "0: the main diagonal; k > 0 above it, k < 0 below")},
        saves=False,
        samples=(Sample(((3, 4),)), Sample(((2, 4, 3),), {"diagonal": -1}), Sample(((3, 3),), {"diagonal": 2})),
        infer=infer,
        doc=f"the {'lower' if name == 'tril' else 'upper'} triangle of the last two dimensions, zeros elsewhere",
    )


_triangle("tril")
_triangle("triu")


def _flip(g, dim):
    return take(g, (EVERY,) * (dim % g.ndim) + ({"slice": [None, None, -1]},))


def _running(name):
    """cumsum's or cumprod's forward: integers and booleans accumulate as int64, as in PyTorch."""

    def forward(xp, x, dim):
        shapes.normalize_dims(dim, x.ndim)
        wide = "int64" if x.dtype.kind in "biu" else x.dtype
        return getattr(xp, name)(x, axis=dim, dtype=wide) if x.ndim else x.astype(wide)

    return forward


def _along(s, d, a):
    """Same shape, with `dim` checked; integer and boolean dtypes become int64."""
    shapes.normalize_dims(a["dim"], len(s[0]))
    return tuple(s[0]), shapes.reduce(s, d, {"dim": ()})[1]


defop(
    "cumsum",
    _running("cumsum"),
    lambda g, ans, x, dim: _flip(trusted.cumsum(_flip(g, dim), dim=dim), dim) if g.ndim else g,
    attrs={"dim": Attr("int", doc="dimension to accumulate along")},
    saves=False,
    samples=(Sample(((3, 4),), {"dim": 1}), Sample(((2, 3, 4),), {"dim": 0}), Sample(((5,),), {"dim": -1})),
    infer=_along,
    doc="running sums along dim (integers and booleans sum as int64)",
)


def _zero_runs(dim, which):
    """A mask of x's positions by how many zeros lie at or before them along dim: `before` (none),
    `first`/`second` (that zero itself), `both` (either) or `between` (after the first zero, not a zero, before a second)."""

    def mask(a):
        zero = a == 0
        count = array_module(a).cumsum(zero, axis=dim)
        return {
            "before": count == 0,
            "first": zero & (count == 1),
            "second": zero & (count == 2),
            "both": zero & (count <= 2),
        }.get(which, ~zero & (count == 1))

    mask.__name__ = f"cumprod_{which}"
    return mask


def _cumprod_vjp(g, ans, x, dim):
    """d out_j / d x_i = prod_{m <= j, m != i} x_m for j >= i, in O(n) per line without dividing by
    a zero (PyTorch's case split, written with differentiable ops): before a line's first zero z it is
    rsum(g * out) / x_i; at z, rsum(g * cumprod(x with x_z = 1)); after z the values are 0 but their
    derivatives in x_z are not, so they are x_z times the same split one zero further on. Exact to
    second order; a third derivative at a line's two or more zeros misses terms."""
    if g.ndim == 0:
        return g
    masks = {k: derived(_zero_runs(dim, k), x) for k in ("before", "first", "second", "both", "between")}

    def rsum(ones):
        values = x if ones is None else F.where(ones, 1.0, x)
        return _flip(trusted.cumsum(_flip(g * trusted.cumprod(values, dim=dim), dim), dim=dim), dim)

    def split(ahead, at, ones, first_ones):
        nonzero = F.where(ahead, x, 1.0)
        return F.where(ahead, rsum(ones) / nonzero, 0.0) + F.where(at, rsum(first_ones), 0.0)

    x_z = trusted.sum(F.where(masks["first"], x, 0.0), dim=dim, keepdim=True)
    after = split(masks["between"], masks["second"], masks["first"], masks["both"])
    return split(masks["before"], masks["first"], None, masks["first"]) + x_z * after


defop(
    "cumprod",
    _running("cumprod"),
    _cumprod_vjp,
    attrs={"dim": Attr("int", doc="dimension to multiply along")},
    scratch=costs.temporaries(backward=12, backward_masks=16),
    samples=(Sample(((3, 4),), {"dim": 1}), Sample(((2, 3, 4),), {"dim": 0}), Sample(((5,),), {"dim": -1})),
    infer=_along,
    doc="running products along dim (integers and booleans as int64); gradients exact at zeros",
)


def _argsort(xp, x, dim, descending, stable):
    if x.ndim == 0:
        return xp.zeros((), numpy.int64)
    key = x if x.dtype.kind == "f" else x.astype(numpy.int64)
    kind = "stable" if xp is numpy else None  # CuPy sorts stably and takes no kind
    order = xp.argsort(-key if descending else key, axis=dim, kind=kind).astype(numpy.int64, copy=False)
    if descending and key.dtype.kind == "f" and xp.isnan(key).any():  # NaN is the largest (first), as PyTorch's
        numbers = xp.take_along_axis(~xp.isnan(key), order, axis=dim)  # (a stable sort of that: the NaNs first)
        order = xp.take_along_axis(order, xp.argsort(numbers, axis=dim, kind=kind), axis=dim)
    return order


def _argsort_scratch(in_metas, out_meta, attrs):
    """The sort key (x negated, or widened to int64) and the stable sort's buffer of as many int64 positions."""
    return costs.Scratch(forward=costs.numel(out_meta[0]) * 16)


defop(
    "argsort",
    _argsort,
    attrs={"dim": Attr("int", -1), "descending": Attr("bool", False), "stable": Attr("bool", False)},
    differentiable=False,
    scratch=_argsort_scratch,
    samples=(Sample(((3, 4),)), Sample(((3, 4),), {"dim": 0, "descending": True})),
    infer=lambda s, d, a: (_along(s, d, a)[0], numpy.dtype(numpy.int64)),
    doc="the indices that sort x along dim (ties keep their order; no gradient)",
)


def _running_extreme_index(xp, x, dim, largest):
    # where x reaches its running max (min) or is NaN, its own position, else the last such one: torch's cummax
    # indices (a later tie wins; a NaN holds). The accumulate runs along the moved-last axis
    moved = xp.moveaxis(x, dim, -1) if x.ndim else x.reshape(1)
    running = _accumulate(xp, xp.maximum if largest else xp.minimum, moved)
    positions = xp.arange(moved.shape[-1], dtype=numpy.int64)
    hit = (moved == running) | (moved != moved)
    index = _accumulate(xp, xp.maximum, xp.where(hit, positions, 0))
    return xp.moveaxis(index, -1, dim) if x.ndim else index.reshape(())


def _accumulate(xp, ufunc, a):
    """`ufunc.accumulate(a, axis=-1)` for an associative ufunc (maximum, minimum: NaN propagates either way).
    CuPy has no `accumulate` for them: there log2(n) shifted steps (a Hillis-Steele scan) compute it."""
    if xp is numpy:
        return ufunc.accumulate(a, axis=-1)
    out, shift = a.copy(), 1
    while shift < a.shape[-1]:
        out[..., shift:] = ufunc(out[..., shift:], out[..., :-shift])
        shift *= 2
    return out


def _running_extreme_scratch(in_metas, out_meta, attrs):
    """The running extreme (x's dtype), three bool masks at once and the positions where they hit (int64)."""
    shape, dtype = in_metas[0]
    return costs.Scratch(forward=costs.numel(shape) * (numpy.dtype(dtype).itemsize + 3 + 8))


defop(
    "cumextreme_index",
    _running_extreme_index,
    attrs={"dim": Attr("int"), "largest": Attr("bool", True, "of the running maximum (True) or minimum")},
    differentiable=False,
    methods=(),
    scratch=_running_extreme_scratch,
    samples=(Sample(((3, 4),), {"dim": 1}), Sample(((3, 4),), {"dim": 0, "largest": False})),
    infer=lambda s, d, a: (shapes.normalize_dims(a["dim"], len(s[0])) and tuple(s[0]), numpy.dtype(numpy.int64)),
    doc="the index of the running maximum (or minimum) along dim: torch.cummax's indices (no gradient)",
)


def _check_index(name, x_shape, i_shape, i_dtype, dim, larger_along=True):
    """The dimension `dim` names, after PyTorch's checks of an index of shape `i_shape` for `x_shape`."""
    if numpy.dtype(i_dtype).kind not in "iu":
        raise shapes.ShapeError(f"{name.split('_')[0]}(): Expected dtype int32/int64 for index")  # (scatter_add's too)
    if len(i_shape) != len(x_shape):
        raise shapes.ShapeError(f"{name}(): Index tensor must have the same number of dimensions as input tensor")
    d = shapes.normalize_dims(dim, len(x_shape))[0]
    for k, (i, s) in enumerate(zip(i_shape, x_shape)):
        if i > s and k != d:
            raise shapes.ShapeError(
                f"{name}(): Size does not match at dimension {k} expected index {list(i_shape)} to be no larger "
                f"than self {list(x_shape)} apart from dimension {d}"
            )
    return d


def _positions(x_shape, d, flat=True):
    """`derived`'s function: the index checked against size x_shape[d], and (flat) as positions of
    x flattened (each element's own coordinates elsewhere)."""

    def positions(index):
        xp = array_module(index)
        index = index.astype(numpy.int64, copy=False)
        size = x_shape[d] if x_shape else 1
        low, high = (int(index.min()), int(index.max())) if index.size else (0, 0)
        if (low < 0 or high >= size) and not flat:  # index_select's: PyTorch's words (its kernel for dim 1)
            if d != 1:
                raise IndexError("index out of range in self")
            bad = int(index[(index < 0) | (index >= size)].reshape(-1)[0])
            raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={size}")
        if low < 0 or high >= size:
            raise RuntimeError(f"index {low if low < 0 else high} is out of bounds for dimension {d} with size {size}")
        if not flat:
            return index.reshape(-1)
        strides = numpy.cumprod((1, *x_shape[::-1]))[-2::-1] if x_shape else (1,)
        out = index * int(strides[d])
        for k, n in enumerate(index.shape):
            if k != d:
                out += (xp.arange(n, dtype=numpy.int64) * int(strides[k])).reshape((n,) + (1,) * (index.ndim - k - 1))
        return out

    return positions


def _index_scratch(in_metas, out_meta, attrs):
    """The default, and the index checked and as flat positions (int64, kept by the pick for its vjp);
    scatter_add's sum of src into zeros of x's shape too."""
    base, positions = costs.default_scratch(in_metas, out_meta, attrs), costs.numel(in_metas[1][0]) * 8
    summed = costs.nbytes(in_metas[0]) if len(in_metas) == 3 else 0
    return costs.Scratch(base.forward + 2 * positions + summed, base.kept + positions, base.backward + positions)


def _gather(x, index, dim):
    d = _check_index("gather", x.shape, index.shape, index.dtype, dim)
    flat = derived(_positions(tuple(x.shape), d), index)
    return take(trusted.reshape(x, shape=(-1,)), ({"tensor": 0},), (flat,))


def _gather_infer(s, d, a):
    _check_index("gather", s[0], s[1], d[1], a["dim"])
    return tuple(s[1]), numpy.result_type(d[0])


DIM = Attr("int", doc="dimension the index picks along")
defop(
    "gather",
    _gather,
    attrs={"dim": DIM},
    arity=2,
    composite=True,
    methods=(),
    samples=(
        Sample(make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.integers(0, 4, (2, 5))], attrs={"dim": 1}),
        Sample(make=lambda rng: [rng.uniform(-2, 2, (3, 4, 2)), rng.integers(0, 3, (3, 2, 2))], attrs={"dim": 0}),
    ),
    infer=_gather_infer,
    scratch=_index_scratch,
    doc="out[i][j] = x[i][index[i][j]] along dim (torch.gather(x, dim, index); repeated picks add gradients)",
)


def _scatter_add(x, index, src, dim):
    d = _scatter_check("scatter_add", x.shape, index.shape, src.shape, index.dtype, dim, x.dtype, src.dtype)
    flat = derived(_positions(tuple(x.shape), d), index)
    if tuple(src.shape) != tuple(index.shape):
        src = take(src, tuple({"slice": [0, n, None]} for n in index.shape))
    added = trusted.index_add(src, flat, index=({"tensor": 0},), shape=(x.numel(),))
    return x + trusted.reshape(added, shape=tuple(x.shape))


def _scatter_check(name, x_shape, i_shape, src_shape, i_dtype, dim, x_dtype, src_dtype):
    if numpy.dtype(x_dtype) != numpy.dtype(src_dtype):
        raise shapes.ShapeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    d = _check_index(name, x_shape, i_shape, i_dtype, dim)
    if (name == "scatter_add" or len(src_shape)) and (
        len(src_shape) != len(i_shape) or any(i > s for i, s in zip(i_shape, src_shape))
    ):
        raise shapes.ShapeError(
            f"{name}(): Expected index {list(i_shape)} to be no larger than self {list(x_shape)} apart from "
            f"dimension {d} and to be no larger size than src {list(src_shape)}"
        )
    return d


def _scatter_infer(name):
    def infer(s, d, a):
        _scatter_check(name, s[0], s[1], s[2], d[1], a["dim"], d[0], d[2])
        return tuple(s[0]), numpy.result_type(d[0])

    return infer


def _scatter(x, index, src, dim):
    d = _scatter_check("scatter", x.shape, index.shape, src.shape, index.dtype, dim, x.dtype, src.dtype)
    flat = derived(_positions(tuple(x.shape), d), index)
    if src.ndim and tuple(src.shape) != tuple(index.shape):
        src = take(src, tuple({"slice": [0, n, None]} for n in index.shape))
    out = trusted.setitem(trusted.reshape(x, shape=(-1,)), src, flat, index=({"tensor": 0},))
    return trusted.reshape(out, shape=tuple(x.shape))


def _scatter_op(name, forward, samples, doc):
    defop(
        name,
        forward,
        attrs={"dim": DIM},
        arity=3,
        composite=True,
        methods=(),
        samples=samples,
        infer=_scatter_infer(name),
        scratch=_index_scratch,
        doc=doc,
    )


_scatter_op(
    "scatter",
    _scatter,
    (
        Sample(
            make=lambda rng: [
                rng.uniform(-2, 2, (3, 4)),
                numpy.array([[2, 0, 1], [1, 3, 0]]),
                rng.uniform(-2, 2, (2, 3)),
            ],
            attrs={"dim": 1},
        ),
        Sample(
            make=lambda rng: [rng.uniform(-2, 2, (3, 4)), numpy.array([[2, 0, 1, 1]]), numpy.array(0.5)],
            attrs={"dim": 0},
        ),
    ),
    "x with src's entries (or a 0-d src everywhere) written at index along dim (torch.scatter(x, dim, index, src))",
)
_scatter_op(
    "scatter_add",
    _scatter_add,
    (
        Sample(
            make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.integers(0, 4, (2, 5)), rng.uniform(-2, 2, (2, 5))],
            attrs={"dim": 1},
        ),
    ),
    "x with src added at index along dim (torch.scatter_add(x, dim, index, src); the adjoint of gather)",
)


def _index_select_check(x_shape, i_shape, i_dtype, dim):
    if len(i_shape) > 1:
        raise shapes.ShapeError("index_select(): Index is supposed to be a vector")
    if numpy.dtype(i_dtype).kind not in "iu":
        raise shapes.ShapeError("index_select(): Expected dtype int32 or int64 for index")
    return shapes.normalize_dims(dim, len(x_shape))[0]


def _index_select(x, index, dim):
    d = _index_select_check(x.shape, index.shape, index.dtype, dim)
    checked = derived(_positions(tuple(x.shape), d, flat=False), index)
    return take(x, (EVERY,) * d + ({"tensor": 0},), (checked,)) if x.ndim else take(x, (), ())


def _index_select_infer(s, d, a):
    dim = _index_select_check(s[0], s[1], d[1], a["dim"])
    shape = list(s[0])
    if shape:
        shape[dim] = int(numpy.prod(s[1]))
    return tuple(shape), numpy.result_type(d[0])


defop(
    "index_select",
    _index_select,
    attrs={"dim": DIM},
    arity=2,
    composite=True,
    methods=(),
    samples=(Sample(make=lambda rng: [rng.uniform(-2, 2, (3, 4)), numpy.array([3, 0, 3])], attrs={"dim": 1}),),
    infer=_index_select_infer,
    scratch=_index_scratch,
    doc="the entries of x at a vector of positions along dim (torch.index_select(x, dim, index))",
)


def _masked_fill_check(mask_dtype, value_shape):
    if numpy.dtype(mask_dtype) != bool:
        raise shapes.ShapeError(
            f"masked_fill_ only supports boolean masks, but got mask with dtype {c_name(mask_dtype)}"
        )
    if len(value_shape):
        raise shapes.ShapeError(
            "masked_fill_ only supports a 0-dimensional value tensor, "
            f"but got tensor with {len(value_shape)} dimension(s)."
        )


def _masked_fill(x, mask, value):
    _masked_fill_check(mask.dtype, value.shape)
    out = F.where(mask, value, x)
    return out if out.dtype == x.dtype else trusted.cast(out, dtype=numpy.dtype(x.dtype).name)


def _masked_fill_infer(s, d, a):
    _masked_fill_check(d[1], s[2])
    return shapes.broadcast(s[:2], d[:1], a)[0], numpy.result_type(d[0])


defop(
    "masked_fill",
    _masked_fill,
    arity=3,
    composite=True,
    samples=(
        Sample(make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.random((3, 4)) > 0.5, numpy.array(0.5)]),
        Sample(make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.random((4,)) > 0.5, rng.uniform(-2, 2, ())]),
    ),
    infer=_masked_fill_infer,
    doc="x with value where mask is true (mask broadcasts; the result keeps x's dtype)",
)
