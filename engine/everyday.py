"""Everyday PyTorch functions that compose from the registry's ops, written over the side's op functions
(`functions(ops)`; `engine.modern` adds them to the surface, each also a Tensor method unless
`FUNCTIONS_ONLY` names it): rearranging (`flip`, `roll`, `rot90`, `diag`, `diagonal`, `diag_embed`,
`trace`, `narrow`, `select`, `unbind`, `movedim`, `tile`, `broadcast_to`, `broadcast_tensors`, `meshgrid`,
the `*stack`s, `tensor_split`, `repeat_interleave`, `take`, `take_along_dim`, `masked_select`), products
(`addmm`, `addmv`, `baddbmm`, `tensordot`, `kron`, `cartesian_prod`, `cdist`, `dist`), elementwise math
(`tan`, `sinh`, `cosh`, `asinh`, `acosh`, `atanh`, `lerp`, `hypot`, `logaddexp`, `frac`, `deg2rad`,
`rad2deg`, `diff`), and reductions (`nansum`, `nanmean`, `logcumsumexp`, `std_mean`, `var_mean`,
`median`, `kthvalue`, `quantile`, `isin`, `searchsorted`, `bucketize`). Each is differentiable where
PyTorch's is, through the ops it calls. Those whose result's shape depends on values (`nonzero`,
`unique`) read the values (a client Variable is fetched first), as `one_hot` does.
"""

from __future__ import annotations

import math
import string
from typing import TYPE_CHECKING, Any

import numpy

from engine.surface_types import MaxMin

if TYPE_CHECKING:
    from engine.surface_types import VariableSurface

FUNCTIONS_ONLY = (
    "broadcast_tensors",
    "meshgrid",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "cartesian_prod",
    "cdist",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
)


def _dim(ndim: int, dim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _along(ndim: int, dim: int, index) -> tuple:
    return (slice(None),) * dim + (index,) + (slice(None),) * (ndim - dim - 1)


def _sizes(args) -> tuple:
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else tuple(args)


def functions(ops) -> dict:  # noqa: C901  (a table of small functions)
    getitem, cat, stack = ops["getitem"], ops["cat"], ops["stack"]

    def flip(input, *dims) -> VariableSurface:
        dims = _sizes(dims)
        key = [slice(None)] * input.ndim
        for d in dims:
            key[_dim(input.ndim, d)] = slice(None, None, -1)
        return getitem(input, tuple(key))

    def fliplr(input) -> VariableSurface:
        return flip(input, 1)

    def flipud(input) -> VariableSurface:
        return flip(input, 0)

    def roll(input, shifts, dims=None) -> VariableSurface:
        if dims is None:
            return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
        shifts, dims = (shifts, dims) if isinstance(shifts, (list, tuple)) else ((shifts,), (dims,))
        out = input
        for shift, dim in zip(shifts, dims):
            d = _dim(input.ndim, dim)
            n = input.shape[d]
            s = shift % n if n else 0
            if s:
                out = cat(
                    [
                        getitem(out, _along(input.ndim, d, slice(n - s, None))),
                        getitem(out, _along(input.ndim, d, slice(0, n - s))),
                    ],
                    d,
                )
        return out

    def rot90(input, k=1, dims=(0, 1)) -> VariableSurface:
        d0, d1 = (_dim(input.ndim, d) for d in dims)
        k %= 4
        if k == 1:
            return flip(input, d1).transpose(d0, d1)
        if k == 2:
            return flip(input, d0, d1)
        if k == 3:
            return flip(input, d0).transpose(d0, d1)
        return input.clone()

    def _diagonal_positions(rows, cols, offset):
        count = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
        start_row, start_col = max(-offset, 0), max(offset, 0)
        return list(range(start_row, start_row + count)), list(range(start_col, start_col + count))

    def diagonal(input, offset=0, dim1=0, dim2=1) -> VariableSurface:
        d1, d2 = _dim(input.ndim, dim1), _dim(input.ndim, dim2)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        moved = movedim(input, (d1, d2), (-2, -1))
        rows, cols = _diagonal_positions(input.shape[d1], input.shape[d2], offset)
        return getitem(moved, (Ellipsis, rows, cols))

    def diag_embed(input, offset=0, dim1=-2, dim2=-1) -> VariableSurface:
        n = input.shape[-1] + abs(offset)
        rows, cols = _diagonal_positions(n, n, offset)
        out = ops["setitem"](input.new_zeros((*input.shape[:-1], n, n)), input, (Ellipsis, rows, cols))
        return movedim(out, (-2, -1), (dim1, dim2))

    main_diagonal = diagonal

    def diag(input, diagonal=0) -> VariableSurface:
        if input.ndim == 1:
            return diag_embed(input, diagonal)
        if input.ndim == 2:
            return main_diagonal(input, diagonal)
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")

    def trace(input) -> VariableSurface:
        if input.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
        return diagonal(input).sum()

    def narrow(input, dim, start, length) -> VariableSurface:
        d = _dim(input.ndim, dim)
        start = start % input.shape[d] if start < 0 else start
        if start + length > input.shape[d]:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({input.shape[d]}).")
        return getitem(input, _along(input.ndim, d, slice(start, start + length)))

    def select(input, dim, index) -> VariableSurface:
        d = _dim(input.ndim, dim)
        if not -input.shape[d] <= index < input.shape[d]:
            raise IndexError(
                f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension {dim}"
            )
        return getitem(input, _along(input.ndim, d, index))

    def unbind(input, dim=0) -> tuple[VariableSurface, ...]:
        d = _dim(input.ndim, dim)
        return tuple(select(input, d, i) for i in range(input.shape[d]))

    def movedim(input, source, destination) -> VariableSurface:
        source = [source] if isinstance(source, int) else list(source)
        destination = [destination] if isinstance(destination, int) else list(destination)
        if len(source) != len(destination):
            raise RuntimeError(
                f"movedim: Invalid source or destination dims: source ({source} dims) should contain the same "
                f"number of dims as destination ({destination} dims)"
            )
        source = [_dim(input.ndim, s) for s in source]
        destination = [_dim(input.ndim, d) for d in destination]
        if len(set(source)) != len(source) or len(set(destination)) != len(destination):
            raise RuntimeError("movedim: repeated dim in `source` or `destination`")
        rest = [i for i in range(input.ndim) if i not in source]
        perm: list = [None] * input.ndim
        for s, d in zip(source, destination):
            perm[d] = s
        fill = iter(rest)
        perm = [p if p is not None else next(fill) for p in perm]
        return input if perm == list(range(input.ndim)) else input.permute(*perm)

    def tile(input, *dims) -> VariableSurface:
        dims = _sizes(dims)
        dims = (1,) * (input.ndim - len(dims)) + dims
        shaped = input.reshape((1,) * (len(dims) - input.ndim) + tuple(input.shape))
        return shaped.repeat(*dims)

    def ravel(input) -> VariableSurface:
        return input.reshape(-1)

    def unflatten(input, dim, sizes) -> VariableSurface:
        d = _dim(input.ndim, dim)
        return input.reshape((*input.shape[:d], *sizes, *input.shape[d + 1 :]))

    def broadcast_to(input, size) -> VariableSurface:
        return input.expand(*size)

    def broadcast_tensors(*tensors) -> tuple[VariableSurface, ...]:
        shape = numpy.broadcast_shapes(*(tuple(t.shape) for t in tensors))
        return tuple(t if tuple(t.shape) == shape else t.expand(*shape) for t in tensors)

    def meshgrid(*tensors, indexing="ij") -> tuple[VariableSurface, ...]:
        tensors = _sizes(tensors)
        if indexing not in ("ij", "xy"):
            raise ValueError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
        swap = indexing == "xy" and len(tensors) >= 2
        order = [1, 0, *range(2, len(tensors))] if swap else list(range(len(tensors)))
        shape = [tensors[i].numel() for i in order]
        grids = []
        for i, t in enumerate(tensors):
            view = [1] * len(tensors)
            view[order.index(i)] = -1
            grids.append(t.reshape(view).expand(*shape))
        return tuple(grids)

    def atleast_1d(input) -> VariableSurface:
        return input.reshape(1) if input.ndim == 0 else input

    def atleast_2d(input) -> VariableSurface:
        return input.reshape(1, -1) if input.ndim < 2 else input

    def atleast_3d(input) -> VariableSurface:
        if input.ndim == 0:
            return input.reshape(1, 1, 1)
        if input.ndim == 1:
            return input.reshape(1, -1, 1)
        return input.unsqueeze(-1) if input.ndim == 2 else input

    def hstack(tensors) -> VariableSurface:
        tensors = [atleast_1d(t) for t in tensors]
        return cat(tensors, 0 if tensors[0].ndim == 1 else 1)

    def vstack(tensors) -> VariableSurface:
        return cat([atleast_2d(t) for t in tensors], 0)

    def dstack(tensors) -> VariableSurface:
        return cat([atleast_3d(t) for t in tensors], 2)

    def column_stack(tensors) -> VariableSurface:
        return cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors], 1)

    def tensor_split(input, indices_or_sections, dim=0) -> tuple[VariableSurface, ...]:
        d = _dim(input.ndim, dim)
        n = input.shape[d]
        if isinstance(indices_or_sections, int):
            k = indices_or_sections
            if k < 1:
                raise RuntimeError(f"number of sections must be larger than 0, got {k}")
            bounds = [int(b) for b in numpy.cumsum([0] + [n // k + (1 if i < n % k else 0) for i in range(k)])]
        else:
            bounds = [0, *indices_or_sections, n]
        return tuple(
            getitem(input, _along(input.ndim, d, slice(min(a, n), min(max(a, b), n))))
            for a, b in zip(bounds[:-1], bounds[1:])
        )

    def repeat_interleave(input, repeats, dim=None, *, output_size=None) -> VariableSurface:
        if dim is None:
            input, dim = input.reshape(-1), 0
        d = _dim(input.ndim, dim)
        counts = repeats.tolist() if hasattr(repeats, "tolist") else repeats
        counts = [counts] * input.shape[d] if isinstance(counts, int) else list(counts)
        index = [i for i, r in enumerate(counts) for _ in range(r)]
        return ops["index_select"](input, input.new_tensor(index).long(), dim=d)

    def take(input, index) -> VariableSurface:
        return getitem(input.reshape(-1), index)

    def take_along_dim(input, indices, dim=None) -> VariableSurface:
        if dim is None:
            return ops["gather"](input.reshape(-1), indices.reshape(-1), dim=0)
        d = _dim(input.ndim, dim)
        shape = list(numpy.broadcast_shapes(tuple(input.shape), tuple(indices.shape)))
        in_shape, ix_shape = list(shape), list(shape)
        in_shape[d], ix_shape[d] = input.shape[d], indices.shape[d]
        return ops["gather"](input.expand(*in_shape), indices.expand(*ix_shape), dim=d)

    def masked_select(input, mask) -> VariableSurface:
        input, mask = broadcast_tensors(input, mask)
        return getitem(input, mask)

    def nonzero(input, *, as_tuple=False) -> Any:
        found = numpy.nonzero(numpy.asarray(input.detach().numpy()).reshape(input.shape))
        if as_tuple:
            return tuple(input.new_tensor(f).long() for f in found)
        return input.new_tensor(numpy.stack(found, 1) if found else numpy.zeros((0, 0))).long()

    def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None) -> Any:
        values = numpy.asarray(input.detach().numpy())
        found = numpy.unique(values, return_inverse=True, return_counts=True, axis=dim)
        out = [input.new_tensor(found[0]).type_as(input)]
        if return_inverse:
            out.append(input.new_tensor(found[1].reshape(values.shape if dim is None else -1)).long())
        if return_counts:
            out.append(input.new_tensor(found[2]).long())
        return out[0] if len(out) == 1 else tuple(out)

    def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> VariableSurface:
        product = mat1 @ mat2
        product = product if alpha == 1 else product * alpha
        return product if beta == 0 else (input if beta == 1 else input * beta) + product

    def tensordot(a, b, dims=2) -> VariableSurface:
        if isinstance(dims, int):
            a_dims, b_dims = list(range(a.ndim - dims, a.ndim)), list(range(dims))
        else:
            a_dims, b_dims = ([d] if isinstance(d, int) else list(d) for d in dims)
        letters = iter(string.ascii_letters)
        a_sub = [next(letters) for _ in range(a.ndim)]
        b_sub = [next(letters) for _ in range(b.ndim)]
        for i, j in zip(a_dims, b_dims):
            b_sub[_dim(b.ndim, j)] = a_sub[_dim(a.ndim, i)]
        kept_a = [s for i, s in enumerate(a_sub) if i not in [_dim(a.ndim, d) for d in a_dims]]
        kept_b = [s for i, s in enumerate(b_sub) if i not in [_dim(b.ndim, d) for d in b_dims]]
        equation = f"{''.join(a_sub)},{''.join(b_sub)}->{''.join(kept_a + kept_b)}"
        return ops["einsum"]([a, b], equation=equation)

    def kron(input, other) -> VariableSurface:
        n = max(input.ndim, other.ndim)
        a = input.reshape((1,) * (n - input.ndim) + tuple(input.shape))
        b = other.reshape((1,) * (n - other.ndim) + tuple(other.shape))
        a_view = [s for d in a.shape for s in (d, 1)]
        b_view = [s for d in b.shape for s in (1, d)]
        return (a.reshape(a_view) * b.reshape(b_view)).reshape([x * y for x, y in zip(a.shape, b.shape)])

    def cartesian_prod(*tensors) -> VariableSurface:
        if len(tensors) == 1:
            return tensors[0]
        return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)

    def cdist(x1, x2, p=2.0, compute_mode=None) -> VariableSurface:
        difference = x1.unsqueeze(-2) - x2.unsqueeze(-3)
        return ops["norm"](difference, p, dim=-1)

    def dist(input, other, p=2) -> VariableSurface:
        return ops["norm"](input - other, p)

    def lerp(input, end, weight) -> VariableSurface:
        return input + weight * (end - input)

    def hypot(input, other) -> VariableSurface:
        return (input * input + other * other).sqrt()

    def logaddexp(input, other) -> VariableSurface:
        high = ops["maximum"](input, other)
        return high + (-(input - other).abs()).exp().log1p()

    def diff(input, n=1, dim=-1, prepend=None, append=None) -> VariableSurface:
        d = _dim(input.ndim, dim)
        parts = [t for t in (prepend, input, append) if t is not None]
        out = cat(parts, d) if len(parts) > 1 else input
        for _ in range(n):
            size = out.shape[d]
            out = getitem(out, _along(out.ndim, d, slice(1, size))) - getitem(
                out, _along(out.ndim, d, slice(0, size - 1))
            )
        return out

    def nansum(input, dim=None, keepdim=False, *, dtype=None) -> VariableSurface:
        zeroed = ops["where"](input != input, 0.0, input)
        return zeroed.sum() if dim is None else zeroed.sum(dim, keepdim)

    def nanmean(input, dim=None, keepdim=False, *, dtype=None) -> VariableSurface:
        present = (input == input).type_as(input)
        if dim is None:
            return nansum(input) / present.sum()
        return nansum(input, dim, keepdim) / present.sum(dim, keepdim)

    def logcumsumexp(input, dim) -> VariableSurface:
        d = _dim(input.ndim, dim)
        high = input.detach().amax(d, keepdim=True) if input.numel() else input.detach()
        high = ops["where"](high.isinf(), 0.0, high)
        return ops["cumsum"]((input - high).exp(), dim=d).log() + high

    def _correction(unbiased, correction):
        return correction if correction is not None else (1 if unbiased is None or unbiased else 0)

    def var_mean(
        input, dim=None, unbiased=None, keepdim=False, *, correction=None
    ) -> tuple[VariableSurface, VariableSurface]:
        c = _correction(unbiased, correction)
        mean = input.mean(dim, keepdim=True) if dim is not None else input.mean()
        count = (
            input.numel()
            if dim is None
            else math.prod(input.shape[_dim(input.ndim, d)] for d in ([dim] if isinstance(dim, int) else dim))
        )
        squares = ((input - mean) ** 2).sum(dim, keepdim) if dim is not None else ((input - mean) ** 2).sum()
        variance = squares / max(count - c, 0)
        return variance, (mean if keepdim or dim is None else mean.squeeze(dim))

    def std_mean(
        input, dim=None, unbiased=None, keepdim=False, *, correction=None
    ) -> tuple[VariableSurface, VariableSurface]:
        variance, mean = var_mean(input, dim, unbiased, keepdim, correction=correction)
        return variance.sqrt(), mean

    def kthvalue(input, k, dim=-1, keepdim=False) -> MaxMin[VariableSurface]:
        d = _dim(input.ndim, dim)
        if not 1 <= k <= max(input.shape[d] if input.ndim else 1, 1):
            raise IndexError(f"kthvalue(): selected number k out of range for dimension {dim}")
        order = ops["argsort"](input, dim=d, stable=True)
        index = getitem(order, _along(input.ndim, d, slice(k - 1, k)))
        values = ops["gather"](input, index, dim=d)
        return MaxMin(values if keepdim else values.squeeze(d), index if keepdim else index.squeeze(d))

    def median(input, dim=None, keepdim=False) -> Any:
        if dim is None:
            flat = input.reshape(-1)
            return kthvalue(flat, (flat.numel() + 1) // 2, 0).values
        d = _dim(input.ndim, dim)
        return kthvalue(input, (input.shape[d] + 1) // 2, d, keepdim)

    def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear") -> VariableSurface:
        if dim is None:
            input, dim, reshape_back = input.reshape(-1), 0, True
        else:
            reshape_back = False
        d = _dim(input.ndim, dim)
        qs = q.tolist() if hasattr(q, "tolist") else q
        scalar = not isinstance(qs, (list, tuple))
        qs = [qs] if scalar else list(qs)
        if any(not 0 <= v <= 1 for v in qs):
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
        ordered = ops["gather"](input, ops["argsort"](input, dim=d, stable=True), dim=d)
        n = input.shape[d]
        out = []
        for v in qs:
            position = v * (n - 1)
            low, high = math.floor(position), math.ceil(position)
            lower = getitem(ordered, _along(input.ndim, d, slice(low, low + 1)))
            upper = getitem(ordered, _along(input.ndim, d, slice(high, high + 1)))
            fraction = position - low
            chosen = {
                "linear": lower + (upper - lower) * fraction,
                "lower": lower,
                "higher": upper,
                "nearest": upper if (fraction > 0.5 or (fraction == 0.5 and low % 2 == 1)) else lower,
                "midpoint": (lower + upper) / 2,
            }[interpolation]
            out.append(chosen if keepdim and not reshape_back else chosen.squeeze(d))
        if reshape_back and keepdim:
            out = [o.reshape((1,) * len(o.shape)) for o in out]
        return out[0] if scalar else stack(out, 0)

    def isin(elements, test_elements, *, assume_unique=False, invert=False) -> VariableSurface:
        found = (elements.unsqueeze(-1) == test_elements.reshape(-1)).any(-1)
        return ~found if invert else found

    def searchsorted(
        sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None
    ) -> VariableSurface:
        right = right or side == "right"
        values = input if hasattr(input, "shape") else sorted_sequence.new_tensor([input])
        if sorted_sequence.ndim == 1:
            compare = sorted_sequence <= values.unsqueeze(-1) if right else sorted_sequence < values.unsqueeze(-1)
        else:
            below = sorted_sequence.unsqueeze(-2)
            compare = below <= values.unsqueeze(-1) if right else below < values.unsqueeze(-1)
        found = compare.sum(-1)
        found = found if hasattr(input, "shape") else found.reshape(())
        return found.int() if out_int32 else found

    def bucketize(input, boundaries, *, out_int32=False, right=False) -> VariableSurface:
        return searchsorted(boundaries, input, out_int32=out_int32, right=right)

    def tan(input: VariableSurface) -> VariableSurface:
        return input.sin() / input.cos()

    def sinh(input: VariableSurface) -> VariableSurface:
        return (input.exp() - (-input).exp()) / 2

    def cosh(input: VariableSurface) -> VariableSurface:
        return (input.exp() + (-input).exp()) / 2

    def asinh(input: VariableSurface) -> VariableSurface:
        return (input + (input * input + 1).sqrt()).log()

    def acosh(input: VariableSurface) -> VariableSurface:
        return (input + (input * input - 1).sqrt()).log()

    def atanh(input: VariableSurface) -> VariableSurface:
        return 0.5 * ((1 + input) / (1 - input)).log()

    def frac(input: VariableSurface) -> VariableSurface:
        return input - input.trunc()

    def deg2rad(input: VariableSurface) -> VariableSurface:
        return input * (math.pi / 180)

    def rad2deg(input: VariableSurface) -> VariableSurface:
        return input * (180 / math.pi)

    out: dict[str, Any] = {}
    for fn in (
        tan,
        sinh,
        cosh,
        asinh,
        acosh,
        atanh,
        frac,
        deg2rad,
        rad2deg,
        flip,
        fliplr,
        flipud,
        roll,
        rot90,
        diagonal,
        diag_embed,
        diag,
        trace,
        narrow,
        select,
        unbind,
        movedim,
        tile,
        ravel,
        unflatten,
        broadcast_to,
        broadcast_tensors,
        meshgrid,
        atleast_1d,
        atleast_2d,
        atleast_3d,
        hstack,
        vstack,
        dstack,
        column_stack,
        tensor_split,
        repeat_interleave,
        take,
        take_along_dim,
        masked_select,
        nonzero,
        unique,
        addmm,
        tensordot,
        kron,
        cartesian_prod,
        cdist,
        dist,
        lerp,
        hypot,
        logaddexp,
        diff,
        nansum,
        nanmean,
        logcumsumexp,
        var_mean,
        std_mean,
        kthvalue,
        median,
        quantile,
        isin,
        searchsorted,
        bucketize,
    ):
        out[fn.__name__] = fn
    out["moveaxis"] = movedim
    out["addmv"] = addmm
    out["baddbmm"] = addmm
    return out
