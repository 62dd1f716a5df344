"""PyTorch functions whose signature is not a registry op's (`gather(input, dim, index)` puts an
attribute between inputs; `split` and `sort` return several Variables; `einsum` takes its equation
first), written over the side's op functions: `sort`, `topk`, `gather`, `scatter_add`,
`index_select`, `cummax`, `cummin`, `bmm`, `chunk`, `split`, `repeat` and `einsum`. `engine.modern` adds them to the surface."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from engine import views
from engine.grad_fn_names import renamed, swap
from engine.surface_types import MaxMin

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import Operand, V, VariableSurface

FUNCTIONS_ONLY = ("einsum",)  # torch.* functions that are no Tensor method


def _dim(input, dim) -> int:
    return dim_in_range(input.ndim, dim)


def dim_in_range(ndim, dim) -> int:
    """`dim` made non-negative for a Variable of `ndim` dimensions (PyTorch's IndexError when out of range)."""
    ndim = max(ndim, 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % ndim


def _named(values, name):  # `values` with its grad_fn named PyTorch's (TopkBackward0), not its last op's (Gather...)
    return values if values.grad_fn is None else swap(values.grad_fn, name) or values


def functions(ops) -> dict:
    """The functions (each also a method, but those in FUNCTIONS_ONLY) over `ops`, the side's op functions."""

    def gather(input: VariableSurface, dim: int, index: Operand, *, sparse_grad: bool = False) -> VariableSurface:
        """out[i][j] = input[i][index[i][j]] along `dim` (shown for 2-d, dim=1)."""
        return ops["gather"](input, index, dim=dim)

    def scatter_add(input: VariableSurface, dim: int, index: Operand, src: Operand) -> VariableSurface:
        """A copy of `input` with `src`'s entries added at `index` along `dim` (repeated positions add up)."""
        return ops["scatter_add"](input, index, src, dim=dim)

    def scatter_add_(self: V, dim: int, index: Operand, src: Operand) -> V:
        """In place: `scatter_add`."""
        self.copy_(scatter_add(self.clone(), dim, index, src))  # the sum must not save `self`, which changes
        return self

    def index_select(input: VariableSurface, dim: int, index: Operand) -> VariableSurface:
        """The entries of `input` at the positions of the vector `index` along `dim`."""
        return ops["index_select"](input, index, dim=dim)

    def sort(
        input: VariableSurface, dim: int = -1, descending: bool = False, stable: bool = False
    ) -> MaxMin[VariableSurface]:
        """(values, indices) sorted along `dim`; the values' gradient goes to the positions they came from."""
        indices = ops["argsort"](input, dim=dim, descending=descending, stable=stable)
        return MaxMin(_named(ops["gather"](input, indices, dim=dim), f"SortBackward{int(stable)}"), indices)

    def msort(input: VariableSurface) -> VariableSurface:
        """The values sorted along the first dimension (`sort(input, dim=0).values`)."""
        return sort(input, dim=0)[0]

    def topk(
        input: VariableSurface, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
    ) -> MaxMin[VariableSurface]:
        """(values, indices) of the `k` largest (or smallest) entries along `dim`, in order."""
        d = _dim(input, dim)
        if not 0 <= k <= (input.shape[d] if input.ndim else 1):
            raise RuntimeError("selected index k out of range")
        order = ops["argsort"](input, dim=d, descending=largest, stable=True)
        indices = order[(slice(None),) * d + (slice(0, k),)] if input.ndim else order
        return MaxMin(_named(ops["gather"](input, indices, dim=d), "TopkBackward0"), indices)

    def _running(largest):
        def running(input: VariableSurface, dim: int) -> MaxMin[VariableSurface]:
            """(values, indices) of the running maximum (cummin: minimum) along `dim`, a later tie's index winning
            and a NaN holding, as torch's; the values' gradient goes to the positions they came from."""
            flat = input if input.ndim else ops["reshape"](input, (1,))
            indices = ops["cumextreme_index"](flat, dim=_dim(input, dim), largest=largest)
            values = ops["gather"](flat, indices, dim=_dim(input, dim))
            if not input.ndim:
                values, indices = ops["reshape"](values, ()), ops["reshape"](indices, ())
            return MaxMin(_named(values, "CummaxBackward0" if largest else "CumminBackward0"), indices)

        running.__name__ = running.__qualname__ = "cummax" if largest else "cummin"
        return running

    def bmm(input: VariableSurface, mat2: VariableSurface) -> VariableSurface:
        """Batched matrix product of two 3-d Variables of equal batch size."""
        for name, v in (("batch1", input), ("batch2", mat2)):
            if v.ndim != 3:
                raise RuntimeError(f"{name} must be a 3D tensor")
        wanted = [input.shape[0], input.shape[2]]
        if list(mat2.shape[:2]) != wanted:
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: {wanted} but got: {list(mat2.shape[:2])}."
            )
        return renamed(ops["matmul"](input, mat2), "BmmBackward0", (input.grad_fn, mat2.grad_fn))

    def split(
        tensor: VariableSurface, split_size_or_sections: int | Sequence[int], dim: int = 0
    ) -> tuple[VariableSurface, ...]:
        """Pieces of `split_size_or_sections` along `dim` (the last one smaller), or of the listed sizes."""
        d = _dim(tensor, dim)
        size = tensor.shape[d]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step < 0 or (step == 0 and size):
                raise RuntimeError(
                    f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}"
                    if step == 0
                    else f"split expects split_size be non-negative, but got split_size={step}"
                )
            sizes = [min(step, size - start) for start in range(0, size, step)] if step else [0]
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != size or any(s < 0 for s in sizes):
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at "
                    f"dimension {d}), but got split_sizes={sizes}"
                )
        starts = [0, *itertools.accumulate(sizes)]
        with views.multiple("Split" if isinstance(split_size_or_sections, int) else "SplitWithSizes"):
            return tuple(tensor[(slice(None),) * d + (slice(a, a + n),)] for a, n in zip(starts, sizes))

    def chunk(input: VariableSurface, chunks: int, dim: int = 0) -> tuple[VariableSurface, ...]:
        """At most `chunks` pieces of equal size along `dim` (the last one smaller)."""
        if chunks <= 0:
            raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
        size = input.shape[_dim(input, dim)]
        return split(input, max(math.ceil(size / chunks), 1) if size else 0, dim)

    def repeat(self: VariableSurface, *sizes: Any) -> VariableSurface:
        """This Variable tiled `sizes[i]` times along each dimension (new leading ones for extra sizes)."""
        sizes = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes
        if len(sizes) < self.ndim:
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
            )
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        out = [r * s for r, s in zip(sizes, shape)]
        if any(r < 0 for r in sizes):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: {out}")
        spread = ops["reshape"](self, tuple(v for s in shape for v in (1, s)))
        return ops["reshape"](ops["expand"](spread, tuple(v for pair in zip(sizes, shape) for v in pair)), tuple(out))

    def einsum(equation: str, *operands: Any) -> VariableSurface:
        """Einstein summation: `einsum("ij,jk->ik", a, b)` (operands also as one list)."""
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        return ops["einsum"](list(operands), equation=equation)

    return {
        f.__name__: f
        for f in (gather, scatter_add, scatter_add_, index_select, sort, msort, topk, bmm, split, chunk, repeat, einsum)
    } | {"cummax": _running(True), "cummin": _running(False)}
