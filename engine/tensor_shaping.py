"""PyTorch's layout functions, composed of the registry's shape and indexing ops (so each is differentiable
through them, and the client records nodes the server knows): `flip`, `roll`, `rot90`, `diagonal`, `diag`,
`diag_embed`, `trace`, `narrow`, `select`, `unbind`, `movedim`, `tile`, `ravel`, `unflatten`, `broadcast_to`,
`broadcast_tensors`, `meshgrid`, the `*stack`s, `tensor_split`, `repeat_interleave`, `kron`, `cartesian_prod`,
`tril_indices`/`triu_indices`, `Tensor.unfold` and the layout queries (`stride()`, `nbytes`...).
`engine.surface` installs them; `FUNCTIONS_ONLY` are no Tensor methods, `METHODS_ONLY` no torch.* functions."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy

from engine import views
from engine.indexing import REVERSED
from engine.tensor_ops import _dim, dim_in_range
from engine.user_warnings import warn

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import VariableSurface

FUNCTIONS_ONLY = (
    *("tril_indices", "triu_indices", "broadcast_tensors", "broadcast_shapes", "meshgrid", "cartesian_prod"),
    *("atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack", "dstack", "column_stack"),
)
METHODS_ONLY = ("unfold", "stride", "storage_offset", "element_size")
EVERY = slice(None)


def _dims(input, dims) -> list:
    """`dims` (an int or a sequence) checked and made non-negative; a repeated one raises PyTorch's error."""
    out = [_dim(input, d) for d in ((dims,) if isinstance(dims, int) else dims)]
    for d in out:
        if out.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return out


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """The shape that tensors of `shapes` broadcast to (PyTorch's error when they do not)."""
    shapes = tuple((s,) if isinstance(s, int) else tuple(s) for s in shapes)
    size = max(map(len, shapes), default=0)
    out = [1] * size
    for shape in shapes:
        for i, n in enumerate(shape, size - len(shape)):
            if n != 1 and out[i] not in (1, n):
                raise RuntimeError(
                    f"The size of tensor a ({out[i]}) must match the size of tensor b ({n}) at non-singleton dimension {i}"
                )
            out[i] = n if n != 1 else out[i]
    return tuple(out)


def functions(ops, make) -> dict:
    """The functions (each also a method, but FUNCTIONS_ONLY) over `ops`, the side's op functions, and
    `make`, its constructors."""
    cat, reshape, permute, expand = ops["cat"], ops["reshape"], ops["permute"], ops["expand"]

    def flip(input: VariableSurface, *args: int | Sequence[int], dims=None) -> VariableSurface:
        """The entries in reverse order along each of `dims` (a copy); `x.flip(0, 1)` as `x.flip((0, 1))`."""
        flipped = _dims(input, dims if dims is not None else args[0] if len(args) == 1 else args)
        return input[tuple(REVERSED if d in flipped else EVERY for d in range(input.ndim))]

    def fliplr(input: VariableSurface) -> VariableSurface:
        if input.ndim < 2:
            raise RuntimeError("Input must be >= 2-d.")
        return flip(input, 1)

    def flipud(input: VariableSurface) -> VariableSurface:
        if input.ndim < 1:
            raise RuntimeError("Input must be >= 1-d.")
        return flip(input, 0)

    def roll(
        input: VariableSurface, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None
    ) -> VariableSurface:
        """The entries shifted by `shifts` along `dims`, those past the end coming round to the front
        (without dims: over the flattened Variable, then reshaped)."""
        if dims is None:
            return reshape(roll(ravel(input), shifts, 0), tuple(input.shape))
        shifts, dims = ((shifts,) if isinstance(shifts, int) else shifts), ((dims,) if isinstance(dims, int) else dims)
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        out = ops["clone"](input)
        for shift, dim in zip(shifts, dims):
            d = _dim(input, dim)
            size = input.shape[d]
            if size and shift % size:
                cut = size - shift % size
                out = cat([narrow(out, d, cut, size - cut), narrow(out, d, 0, cut)], dim=d)
        return out

    def rot90(input: VariableSurface, k: int = 1, dims: Sequence[int] = (0, 1)) -> VariableSurface:
        """Rotated by 90 degrees `k` times, from the first of `dims` towards the second."""
        if len(dims) != 2:
            raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
        if input.ndim < 2:
            raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
        d0, d1 = _dim(input, dims[0]), _dim(input, dims[1])
        if d0 == d1:
            raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
        k %= 4
        if k == 2:
            return flip(input, [d0, d1])
        return ops["transpose"](flip(input, [d1 if k == 1 else d0]), d0, d1) if k else ops["clone"](input)

    def diagonal(input: VariableSurface, offset: int = 0, dim1: int = 0, dim2: int = 1) -> VariableSurface:
        """The diagonal of dims `dim1` and `dim2` (above it for offset > 0), as a last dimension."""
        d1, d2 = _dim(input, dim1), _dim(input, dim2)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        return ops["diagonal"](input, offset=offset, dim1=d1, dim2=d2)

    def diag_embed(input: VariableSurface, offset: int = 0, dim1: int = -2, dim2: int = -1) -> VariableSurface:
        """Square matrices (in dims `dim1`, `dim2` of the result) with the last dimension on their diagonal."""
        ndim, size = input.ndim + 1, input.shape[-1] if input.ndim else 1
        d1, d2 = dim_in_range(ndim, dim1), dim_in_range(ndim, dim2)
        if d1 == d2:
            raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
        steps, n = numpy.arange(size), size + abs(offset)
        spec = ({"slice": [None, None, None]},) * (ndim - 2) + ({"tensor": 0}, {"tensor": 1})
        shape = (*input.shape[:-1], n, n)
        out = ops["index_add"]([input, steps + max(-offset, 0), steps + max(offset, 0)], index=spec, shape=shape)
        order, rest = [0] * ndim, iter(range(ndim - 2))
        for d in range(ndim):
            order[d] = ndim - 2 if d == d1 else ndim - 1 if d == d2 else next(rest)
        return permute(out, tuple(order))

    def diag(input: VariableSurface, diagonal: int = 0) -> VariableSurface:
        """A 1-d Variable's square matrix with it on a diagonal, or a matrix's diagonal."""
        if input.ndim == 1:
            return diag_embed(input, diagonal)
        if input.ndim != 2:
            raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
        return ops["clone"](_diagonal(input, diagonal))  # (PyTorch's is a copy)

    _diagonal = diagonal

    def trace(input: VariableSurface) -> VariableSurface:
        """The sum of a matrix's diagonal."""
        if input.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
        return ops["sum"](diagonal(input))

    def narrow(input: VariableSurface, dim: int, start: int, length: int) -> VariableSurface:
        """`length` entries from `start` along `dim`."""
        d = _dim(input, dim)
        size, start = input.shape[d], int(start)
        if not -size <= start <= size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
        start += size if start < 0 else 0
        if length < 0 or start > size - length:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
        return input[(EVERY,) * d + (slice(start, start + length),)]

    def select(input: VariableSurface, dim: int, index: int) -> VariableSurface:
        """The slice at `index` along `dim` (that dimension removed)."""
        d = _dim(input, dim)
        if not -input.shape[d] <= index < input.shape[d]:
            raise IndexError(
                f"select(): index {index} out of range for tensor of size {list(input.shape)} at dimension {d}"
            )
        return input[(EVERY,) * d + (index,)]

    def unbind(input: VariableSurface, dim: int = 0) -> tuple[VariableSurface, ...]:
        """The slices along `dim`, each without it."""
        d = _dim(input, dim)
        with views.multiple("Unbind"):
            return tuple(select(input, d, i) for i in range(input.shape[d]))

    def movedim(
        input: VariableSurface, source: int | Sequence[int], destination: int | Sequence[int]
    ) -> VariableSurface:
        """Dimensions `source` moved to positions `destination`, the others keeping their order."""
        sources, targets = _dims(input, source), _dims(input, destination)
        if len(sources) != len(targets):
            raise RuntimeError(
                f"movedim: Invalid source or destination dims: source ({sources} dims) should contain the same "
                f"number of dims as destination ({targets} dims)"
            )
        order: list = [None] * input.ndim
        for s, t in zip(sources, targets):
            order[t] = s
        rest = iter(d for d in range(input.ndim) if d not in sources)
        return permute(input, tuple(next(rest) if d is None else d for d in order))

    def tile(input: VariableSurface, *dims: Any) -> VariableSurface:
        """Repeated `dims[i]` times along each dimension (ones prepended to the shorter of the two)."""
        dims = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
        return input.repeat(*((1,) * (input.ndim - len(dims)) + dims))

    def ravel(input: VariableSurface) -> VariableSurface:
        return reshape(input, (-1,))

    def unflatten(input: VariableSurface, dim: int, sizes: Sequence[int]) -> VariableSurface:
        """Dimension `dim` split into `sizes` (one of them may be -1)."""
        d, sizes = _dim(input, dim), tuple(sizes)
        known, size = math.prod(s for s in sizes if s != -1), input.shape[d]
        if (-1 in sizes and (known == 0 or size % known)) or (-1 not in sizes and known != size):
            raise RuntimeError(
                f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} ({size}) in the "
                "input tensor"
            )
        return reshape(input, (*input.shape[:d], *sizes, *input.shape[d + 1 :]))

    def broadcast_to(input: VariableSurface, size: Sequence[int]) -> VariableSurface:
        return expand(input, tuple(size))

    def broadcast_tensors(*tensors: VariableSurface) -> tuple[VariableSurface, ...]:
        """The Variables expanded to their common broadcast shape."""
        shape = broadcast_shapes(*(t.shape for t in tensors))
        return tuple(expand(t, shape) for t in tensors)

    def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[VariableSurface, ...]:
        """Coordinate grids of 0-d or 1-d Variables ("ij": the first varies along the first dimension; "xy":
        the first two swapped, as NumPy's default)."""
        tensors = tuple(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
        for t in tensors:
            if t.ndim > 1:
                raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
        if indexing is None:
            warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.")
        if indexing not in (None, "ij", "xy"):
            raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
        places = list(range(len(tensors)))
        if indexing == "xy" and len(places) > 1:
            places[:2] = [1, 0]
        shape = [1] * len(tensors)
        for t, place in zip(tensors, places):
            shape[place] = t.numel()
        return tuple(
            expand(reshape(t, tuple(-1 if i == place else 1 for i in range(len(shape)))), tuple(shape))
            for t, place in zip(tensors, places)
        )

    def _at_least(ndim, padded):
        def fn(*tensors: Any) -> Any:
            many = len(tensors) != 1 or isinstance(tensors[0], (list, tuple))
            tensors = tuple(tensors[0]) if len(tensors) == 1 and many else tensors
            out = tuple(t if t.ndim >= ndim else reshape(t, padded[t.ndim](tuple(t.shape))) for t in tensors)
            return out if many else out[0]

        fn.__name__ = fn.__qualname__ = f"atleast_{ndim}d"
        fn.__doc__ = f"Each Variable with at least {ndim} dimensions (ones added); one Variable, or a tuple of them."
        return fn

    atleast_1d = _at_least(1, {0: lambda s: (1,)})
    atleast_2d = _at_least(2, {0: lambda s: (1, 1), 1: lambda s: (1, *s)})
    atleast_3d = _at_least(3, {0: lambda s: (1, 1, 1), 1: lambda s: (1, *s, 1), 2: lambda s: (*s, 1)})

    def hstack(tensors: Sequence[VariableSurface]) -> VariableSurface:
        """Concatenated along the second dimension (the first for 1-d Variables)."""
        tensors = atleast_1d(tuple(tensors))
        return cat(list(tensors), dim=0 if all(t.ndim == 1 for t in tensors) else 1)

    def vstack(tensors: Sequence[VariableSurface]) -> VariableSurface:
        """Concatenated along the first dimension, 1-d Variables as rows."""
        return cat(list(atleast_2d(tuple(tensors))), dim=0)

    def dstack(tensors: Sequence[VariableSurface]) -> VariableSurface:
        """Concatenated along the third dimension (depth)."""
        return cat(list(atleast_3d(tuple(tensors))), dim=2)

    def column_stack(tensors: Sequence[VariableSurface]) -> VariableSurface:
        """0-d and 1-d Variables as columns, concatenated with the others along the second dimension."""
        return cat([reshape(t, (t.numel(), 1)) if t.ndim < 2 else t for t in tensors], dim=1)

    def tensor_split(input: VariableSurface, indices_or_sections: Any, dim: int = 0) -> tuple[VariableSurface, ...]:
        """`sections` pieces along `dim` (the first `size % sections` one longer), or the pieces between `indices`."""
        d, parts = _dim(input, dim), indices_or_sections
        size = input.shape[d]
        if hasattr(parts, "tolist"):
            parts = parts.tolist()
        if isinstance(parts, int):
            if parts <= 0:
                raise RuntimeError(f"number of sections must be larger than 0, got {parts}")
            sizes = [size // parts + 1] * (size % parts) + [size // parts] * (parts - size % parts)
            parts = list(itertools.accumulate(sizes))[:-1]
        bounds = [0, *parts, size]
        return tuple(input[(EVERY,) * d + (slice(a, max(a, b)),)] for a, b in zip(bounds, bounds[1:]))

    def repeat_interleave(
        input: VariableSurface, repeats: Any = None, dim: int | None = None, *, output_size: int | None = None
    ) -> VariableSurface:
        """Each entry repeated `repeats` times (an int, or one count per entry along `dim`; without dim, of
        the flattened Variable). `repeat_interleave(counts)`: each index repeated counts[index] times."""
        if repeats is None:
            counts = numpy.asarray(input.tolist(), dtype=numpy.int64)
            return make.tensor(numpy.repeat(numpy.arange(counts.size), counts))
        if dim is None:
            input, dim = ravel(input), 0
        d = _dim(input, dim)
        counts = numpy.asarray(repeats.tolist() if hasattr(repeats, "tolist") else repeats, dtype=numpy.int64)
        if (counts < 0).any():
            raise RuntimeError("repeats can not be negative")
        if counts.size == 1:
            shape, r = tuple(input.shape), int(counts.reshape(()))
            spread = expand(ops["unsqueeze"](input, d + 1), (*shape[: d + 1], r, *shape[d + 1 :]))
            return reshape(spread, (*shape[:d], shape[d] * r, *shape[d + 1 :]))
        if counts.ndim != 1 or counts.size != input.shape[d]:
            raise RuntimeError(
                f"repeats must have the same size as input along dim, but got repeats.size(0) = {counts.size} and "
                f"input.size({d}) = {input.shape[d]}"
            )
        return ops["index_select"](input, numpy.repeat(numpy.arange(counts.size), counts), dim=d)

    def kron(input: VariableSurface, other: VariableSurface) -> VariableSurface:
        """The Kronecker product: block (i, j...) is input[i, j...] * other."""
        ndim = max(input.ndim, other.ndim)
        a, b = ((1,) * (ndim - v.ndim) + tuple(v.shape) for v in (input, other))
        spread = ops["mul"](
            reshape(input, tuple(v for n in a for v in (n, 1))), reshape(other, tuple(v for n in b for v in (1, n)))
        )
        return reshape(spread, tuple(m * n for m, n in zip(a, b)))

    def cartesian_prod(*tensors: VariableSurface) -> VariableSurface:
        """Every combination of one entry of each 1-d Variable, one per row."""
        if len(tensors) == 1:
            return tensors[0]
        return ops["stack"]([ravel(g) for g in meshgrid(*tensors, indexing="ij")], dim=1)

    def _indices(name):
        def fn(row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None) -> VariableSurface:
            rows, cols = getattr(numpy, name)(row, offset, col)
            return make.tensor(numpy.stack([rows, cols]).astype(numpy.int64), dtype=dtype, device=device)

        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"The 2 x N (row, column) indices of a row x col matrix's {name[:4]} triangle, row by row."
        return fn

    def unfold(self: VariableSurface, dimension: int, size: int, step: int) -> VariableSurface:
        """Every window of `size` entries along `dimension`, `step` apart, as a new last dimension."""
        d = _dim(self, dimension)
        length = self.shape[d] if self.ndim else 1
        if size > length:
            raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
        if step <= 0:
            raise RuntimeError(f"step is {step} but must be > 0")
        windows = numpy.arange((length - size) // step + 1)[:, None] * step + numpy.arange(size)
        if not self.ndim:
            return reshape(self, (1,))[windows[0]]
        return movedim(self[(EVERY,) * d + (windows,)], d + 1, -1)

    def stride(self: VariableSurface, dim: int | None = None) -> Any:
        """The steps, in elements, between neighbours along each dimension (a strided view's, of its root's memory;
        every other Variable is contiguous)."""
        strides = views.strides(self) or tuple(math.prod(self.shape[i + 1 :]) for i in range(self.ndim))
        return strides if dim is None else strides[_dim(self, dim)]

    def storage_offset(self: VariableSurface) -> int:
        return 0

    def element_size(self: VariableSurface) -> int:
        return itemsize(self)

    # every function defined above but the helpers (named with a leading underscore)
    out = {name: f for name, f in locals().items() if getattr(f, "__module__", None) == __name__ and name[0] != "_"}
    out.update(moveaxis=movedim, row_stack=vstack, broadcast_shapes=broadcast_shapes)
    out.update(tril_indices=_indices("tril_indices"))
    out["triu_indices"] = _indices("triu_indices")
    return out


def nbytes(self: VariableSurface) -> int:
    """The bytes its elements take."""
    return math.prod(self.shape) * numpy.dtype(self.dtype).itemsize


def itemsize(self: VariableSurface) -> int:
    """The bytes one element takes."""
    return numpy.dtype(self.dtype).itemsize


def properties() -> dict:
    """`nbytes` and `itemsize`, Tensor properties."""
    return {"nbytes": property(nbytes), "itemsize": property(itemsize)}
