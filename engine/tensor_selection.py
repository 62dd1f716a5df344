"""PyTorch's picking, writing and searching functions, composed of the registry's ops: `take`,
`take_along_dim`, `masked_select`, `nonzero`/`argwhere`, `scatter`, `index_fill`, `index_copy`, `masked_scatter`,
`fill_diagonal_`, `searchsorted`, `bucketize`, `isin`, `unique` and `unique_consecutive`.

A result whose length depends on values (`masked_select`, `nonzero`, `unique`) is a boolean-mask `getitem`: a
client fetches the mask's values (one request, as for `x[mask]`) and records it; a server bounds its length by
the mask's size.
`engine.surface` installs them; `FUNCTIONS_ONLY` are no Tensor methods, `METHODS_ONLY` no torch.* functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy

from engine.grad_fn_names import renamed
from engine.tensor_ops import _dim

if TYPE_CHECKING:
    from engine.surface_types import Operand, V, VariableSurface

FUNCTIONS_ONLY = ("searchsorted", "bucketize", "isin", "where")
METHODS_ONLY = ("scatter_", "scatter_reduce_", "index_fill_", "index_copy_", "masked_scatter_", "fill_diagonal_")
EVERY = slice(None)


def _number(value) -> bool:  # a Python number: PyTorch's `value` overload (ScatterBackward1, IndexFillBackward0)
    return isinstance(value, (bool, int, float))


def _no_derivative(grad):
    raise NotImplementedError("the derivative for 'unique_dim' is not implemented.")


def functions(ops, make) -> dict:
    """The functions (each also a method, but FUNCTIONS_ONLY) over `ops`, the side's op functions, and
    `make`, its constructors."""
    reshape, where, cast = ops["reshape"], ops["where"], ops["cast"]

    def _flat(input):
        return reshape(input, (-1,))

    def _arange(mask):
        """0, 1, ... as many as the 1-d `mask` has entries, computed where the mask is (no constant sent)."""
        return ops["cumsum"](cast(ops["eq"](mask, mask), dtype="int64"), dim=0) - 1

    def _nonzero_mask(input):
        return input if input.dtype == bool else ops["ne"](input, 0)

    def _same_dtype(input, value):
        """A Python number as a 0-d value of `input`'s dtype (PyTorch casts a scalar fill)."""
        return value if hasattr(value, "dtype") else numpy.asarray(value, numpy.dtype(input.dtype))

    def take(input: VariableSurface, index: Operand) -> VariableSurface:
        """The entries of the flattened `input` at `index` (negative ones from the end), in index's shape."""
        return renamed(_flat(input)[index], "TakeBackward0", (input.grad_fn,))

    def take_along_dim(input: VariableSurface, indices: VariableSurface, dim: int | None = None) -> VariableSurface:
        """`gather` along `dim` after broadcasting input and indices in the other dimensions (without dim:
        `take` of the flattened indices)."""
        if dim is None:
            return _flat(input)[_flat(indices)]
        d = _dim(input, dim)
        if input.ndim != indices.ndim:
            raise RuntimeError(
                "torch.take_along_dim(): input and indices should have the same number of dimensions, but got "
                f"{input.ndim} dimensions for input, and {indices.ndim} dimensions for indices"
            )
        shape = numpy.broadcast_shapes(*(tuple(v.shape[:d]) + (1,) + tuple(v.shape[d + 1 :]) for v in (input, indices)))
        grown = [ops["expand"](v, shape[:d] + (v.shape[d],) + shape[d + 1 :]) for v in (input, indices)]
        return ops["gather"](grown[0], grown[1], dim=d)

    def masked_select(input: VariableSurface, mask: VariableSurface) -> VariableSurface:
        """The entries where the boolean `mask` (broadcast) is true, as a 1-d Variable."""
        if mask.dtype != bool:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {numpy.dtype(mask.dtype).name}")
        shape = numpy.broadcast_shapes(tuple(input.shape), tuple(mask.shape))
        return _flat(ops["expand"](input, shape))[_flat(ops["expand"](mask, shape))]

    def nonzero(input: VariableSurface, *, as_tuple: bool = False) -> Any:
        """The coordinates of the nonzero entries, one row each (as_tuple: one 1-d Variable per dimension)."""
        mask = _flat(_nonzero_mask(input))
        positions = _arange(mask)[mask]
        coordinates: list = []
        step = 1
        for size in reversed(input.shape):
            coordinates.insert(0, positions // step % size if step > 1 else positions % size)
            step *= size
        if as_tuple:
            return tuple(coordinates) if input.ndim else (positions,)
        if not input.ndim:
            return reshape(positions, (-1, 1))[:, :0]
        return ops["stack"](coordinates, dim=1)

    def argwhere(input: VariableSurface) -> VariableSurface:
        return nonzero(input)

    def scatter(
        input: VariableSurface, dim: int, index: VariableSurface, src: Any = None, value: Any = None, **options: Any
    ) -> VariableSurface:
        """A copy of `input` with `src`'s entries (or `value`) written at `index` along `dim`:
        out[i][index[i][j]] = src[i][j] for dim=1."""
        if options:
            raise NotImplementedError("scatter(reduce=...) is not supported: use scatter_add, or index_put")
        out = ops["scatter"](input, index, _same_dtype(input, value if src is None else src), dim=dim)
        return renamed(out, "ScatterBackward1", (input.grad_fn,)) if _number(value if src is None else src) else out

    def scatter_(self: V, dim: int, index: VariableSurface, src: Any = None, value: Any = None, **options: Any) -> V:
        """In place: `scatter`."""
        self.copy_(scatter(self.clone(), dim, index, src, value, **options))
        return self

    def scatter_reduce(
        input: VariableSurface,
        dim: int,
        index: VariableSurface,
        src: VariableSurface,
        reduce: str,
        *,
        include_self: bool = True,
    ) -> VariableSurface:
        """A copy of `input` with `src`'s entries reduced into it at `index` along `dim` by `reduce` ("sum", "prod",
        "mean", "amax" or "amin"), `input`'s own entry included unless `include_self` is False (PyTorch's gradients)."""
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
        if input.dtype != src.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
        if tuple(src.shape) != tuple(index.shape) and src.ndim == index.ndim:
            src = src[tuple(slice(0, n) for n in index.shape)]
        if reduce not in ("sum", "mean"):
            return ops["scatter_" + reduce](input, index, src, dim=dim, include_self=include_self)
        dtype = input.dtype
        count = ops["scatter_add"](
            make.zeros(tuple(input.shape), dtype=dtype), index, make.ones(tuple(index.shape), dtype=dtype), dim=dim
        )
        base = input if include_self else where(ops["gt"](count, 0), 0, input)
        out = ops["scatter_add"](base, index, src, dim=dim)
        if reduce == "sum":
            return out
        count = where(ops["eq"](count, 0), 1, count + 1 if include_self else count)
        return ops["div"](out, count) if input.is_floating_point() else ops["div_rounded"](out, count)

    def scatter_reduce_(
        self: V, dim: int, index: VariableSurface, src: VariableSurface, reduce: str, *, include_self: bool = True
    ) -> V:
        """In place: `scatter_reduce`."""
        self.copy_(scatter_reduce(self.clone(), dim, index, src, reduce, include_self=include_self))
        return self

    def index_fill(input: VariableSurface, dim: int, index: Operand, value: Any) -> VariableSurface:
        """A copy of `input` with `value` at the positions `index` names along `dim`."""
        out = ops["setitem"](input, _same_dtype(input, value), (EVERY,) * _dim(input, dim) + (index,))
        return renamed(out, f"IndexFillBackward{0 if _number(value) else 1}", (input.grad_fn,))

    def index_copy(input: VariableSurface, dim: int, index: Operand, source: Operand) -> VariableSurface:
        """A copy of `input` with source's slices along `dim` at the positions `index` names."""
        out = ops["setitem"](input, source, (EVERY,) * _dim(input, dim) + (index,))
        return renamed(out, "IndexCopyBackward0", (input.grad_fn,))

    def masked_scatter(input: VariableSurface, mask: VariableSurface, source: VariableSurface) -> VariableSurface:
        """A copy of `input` with source's first entries, in order, where `mask` is true."""
        if mask.dtype != bool:
            raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {mask.dtype}")
        shape = numpy.broadcast_shapes(tuple(input.shape), tuple(mask.shape))
        mask = ops["expand"](mask, shape)
        rank = ops["maximum"](ops["cumsum"](_flat(mask), dim=0) - 1, 0)  # the source entry each true takes
        out = where(mask, reshape(_flat(source)[rank], shape), input)
        return renamed(out, "MaskedScatterBackward0", (input.grad_fn, source.grad_fn))

    def _inplace(fn):
        def method(self: V, *args: Any, **kwargs: Any) -> V:
            self.copy_(fn(self.clone(), *args, **kwargs))
            return self

        method.__name__ = method.__qualname__ = fn.__name__ + "_"
        method.__doc__ = f"In place: `{fn.__name__}`."
        return method

    def fill_diagonal_(self: V, fill_value: float, wrap: bool = False) -> V:
        """In place: `fill_value` on the main diagonal (wrap: a tall matrix's diagonal starts again every
        columns + 1 rows)."""
        if self.ndim < 2:
            raise RuntimeError("dimensions must larger than 1")
        if self.ndim > 2 and len(set(self.shape)) > 1:
            raise RuntimeError("all dimensions of input must be of equal length")
        rows, cols = self.shape[0], self.shape[1]
        if self.ndim == 2 and wrap and rows > cols:
            flat = numpy.arange(0, rows * cols, cols + 1)
            key: tuple = (flat // cols, flat % cols)
        else:
            key = (numpy.arange(min(self.shape)),) * self.ndim
        self[key] = fill_value
        return self

    def searchsorted(
        sorted_sequence: VariableSurface,
        input: Any,
        *,
        out_int32: bool = False,
        right: bool = False,
        side: str | None = None,
        sorter: VariableSurface | None = None,
    ) -> VariableSurface:
        """For each value, how many of the sorted boundaries (along the last dimension) are below it
        (right: not above it): the index it would be inserted at to keep the order."""
        values = input if hasattr(input, "ndim") else make.tensor(input, dtype=sorted_sequence.dtype)
        boundaries = sorted_sequence if sorter is None else ops["gather"](sorted_sequence, sorter, dim=-1)
        if boundaries.ndim > 1 and tuple(boundaries.shape[:-1]) != tuple(values.shape[:-1]):
            raise RuntimeError(
                "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
                f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
                f"{list(boundaries.shape)} and input value tensor {list(values.shape)}"
            )
        if boundaries.ndim > 1:
            boundaries = ops["unsqueeze"](boundaries, -2)
        below = ops["le" if right or side == "right" else "lt"](boundaries, ops["unsqueeze"](values, -1))
        count = ops["sum"](below, -1)
        return cast(count, dtype="int32") if out_int32 else count

    def bucketize(
        input: Any, boundaries: VariableSurface, *, out_int32: bool = False, right: bool = False
    ) -> VariableSurface:
        """The index of the bucket of 1-d `boundaries` each value falls in (`searchsorted(boundaries, input)`)."""
        if boundaries.ndim != 1:
            raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
        return searchsorted(boundaries, input, out_int32=out_int32, right=right)

    def isin(
        elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False
    ) -> VariableSurface:
        """Whether each element is among `test_elements`, as a bool Variable (invert: is not)."""
        elements, tests = (v if hasattr(v, "ndim") else make.tensor(v) for v in (elements, test_elements))
        found = ops["any"](ops["eq"](ops["unsqueeze"](elements, -1), _flat(tests)), -1)
        return ops["logical_not"](found) if invert else found

    def _runs(values, order, return_inverse, return_counts, shape):
        """unique's results from `values`, flat with equal entries next to each other (`order`: where
        they came from, None when unsorted)."""
        if values.numel():
            first = ops["cat"]([make.ones(1, dtype=bool), ops["ne"](values[1:], values[:-1])], dim=0)
        else:
            first = ops["ne"](values, values)
        out = [values[first]]
        if return_inverse:
            group = ops["cumsum"](first, dim=0) - 1
            inverse = group if order is None else group[ops["argsort"](order, dim=0)]
            out.append(reshape(inverse, shape))
        if return_counts:
            starts = _arange(first)[first]
            ends = ops["cat"]([starts[1:], make.tensor([values.numel()])], dim=0)
            out.append(ends - starts)
        return out[0] if len(out) == 1 else tuple(out)

    def unique(
        input: VariableSurface,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,
        dim: int | None = None,
    ) -> Any:
        """The distinct values, in ascending order; with return_inverse, where each entry's value is among
        them; with return_counts, how many times each occurs."""
        if dim is not None:  # the distinct slices along dim in lexicographic order, from the values (no gradient)
            found = numpy.unique(input.detach().numpy(), axis=_dim(input, dim), return_inverse=True, return_counts=True)
            keep, anchor = [make.tensor(found[0])], input.sum()
            if anchor.requires_grad:  # PyTorch's values have a node, whose backward refuses
                anchor.register_hook(_no_derivative)
                keep[0] = renamed(where(make.tensor(False), anchor, keep[0]), "UniqueDimBackward0", (input.grad_fn,))
            keep += [
                make.tensor(a.reshape(-1).astype(numpy.int64))
                for a, k in zip(found[1:], (return_inverse, return_counts))
                if k
            ]
            return keep[0] if len(keep) == 1 else tuple(keep)
        flat = _flat(input.detach())
        order = ops["argsort"](flat, dim=0, stable=True)
        return _runs(flat[order], order, return_inverse, return_counts, tuple(input.shape))

    def unique_consecutive(
        input: VariableSurface, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Any:
        """The values with each run of equal neighbours kept once (`unique` without the sort)."""
        if dim is not None:
            raise NotImplementedError("unique_consecutive(dim=...) is not supported: of the flattened Variable only")
        return _runs(_flat(input.detach()), None, return_inverse, return_counts, tuple(input.shape))

    def _where(
        condition: VariableSurface, input: Operand | None = None, other: Operand | None = None, **keywords: Any
    ) -> Any:
        """`torch.where(condition, input, other)`; of the condition alone, `nonzero(condition, as_tuple=True)`."""
        if input is None and other is None and not keywords:
            return nonzero(condition, as_tuple=True)
        return where(condition, input, other, **keywords)

    # every function defined above but the helpers (named with a leading underscore)
    out = {name: f for name, f in locals().items() if getattr(f, "__module__", None) == __name__ and name[0] != "_"}
    out["where"] = _where
    _where.__name__ = _where.__qualname__ = "where"
    for fn in (index_fill, index_copy, masked_scatter):
        out[fn.__name__ + "_"] = _inplace(fn)
    return out
