"""PyTorch's math functions that compose of the registry's ops: elementwise (`frac`, `deg2rad`, `rad2deg`,
`hypot`, `logaddexp`, `logaddexp2`, `xlogy`, `lerp`, `polygamma(n, x)`, the `arc*` spellings), products and distances
(`addmm`, `addmv`, `addr`, `addbmm`, `baddbmm`,
`tensordot`, `cdist`, `dist`), differences (`diff`, `trapezoid`, `cumulative_trapezoid`), `vander`, `combinations`, `logspace`, `block_diag`, `histc`, and reductions (`nansum`,
`nanmean`, `median`, `nanmedian`, `mode`, `kthvalue`, `quantile`, `nanquantile`, `logcumsumexp`).

Gradients are those of the ops they call, which are PyTorch's: a selected value's (median, kthvalue, mode,
quantile's sorted values) goes to where it came from; a whole-tensor `median` shares it among its ties.
`logcumsumexp` is shifted by the maximum along `dim`: entries more than ~88 (float32; ~700 in float64) below it
underflow to -inf where PyTorch's are exact.
`engine.surface` installs them; `FUNCTIONS_ONLY` are no Tensor methods."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy

from engine.factory import as_dtype
from engine.grad_fn_names import renamed
from engine.promotion import c_name, check_addmm, result_type, type_name
from engine.surface_types import MaxMin
from engine.tensor_ops import _dim

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import Operand, VariableSurface

FUNCTIONS_ONLY = (
    *("block_diag", "polygamma", "tensordot", "cdist", "logspace", "vander", "trapezoid", "trapz"),
    *("cumulative_trapezoid", "combinations"),
)
METHODS_ONLY = ()
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def functions(ops, make) -> dict:
    """The functions (each also a method, but FUNCTIONS_ONLY) over `ops`, the side's op functions, and
    `make`, its constructors."""
    where, cast, reshape, narrow = ops["where"], ops["cast"], ops["reshape"], ops["narrow"]

    def _as(input, count):
        return cast(count, dtype=numpy.dtype(input.dtype).name)

    def frac(input: Operand) -> VariableSurface:
        """The fractional part, x - trunc(x), with x's sign."""
        return ops["sub"](input, ops["trunc"](input))

    def deg2rad(input: Operand) -> VariableSurface:
        return ops["mul"](input, math.pi / 180)

    def rad2deg(input: Operand) -> VariableSurface:
        return ops["mul"](input, 180 / math.pi)

    def hypot(input: Operand, other: Operand) -> VariableSurface:
        """sqrt(input ** 2 + other ** 2)."""
        return ops["sqrt"](ops["add"](ops["mul"](input, input), ops["mul"](other, other)))

    def logaddexp2(input: Operand, other: Operand) -> VariableSurface:
        """log2(2 ** input + 2 ** other)."""
        return ops["div"](logaddexp(ops["mul"](input, math.log(2)), ops["mul"](other, math.log(2))), math.log(2))

    def logaddexp(input: Operand, other: Operand) -> VariableSurface:
        """log(exp(input) + exp(other)), computed without overflow."""
        larger = ops["maximum"](input, other)
        out = larger + ops["log1p"](ops["exp"](-ops["abs"](ops["sub"](input, other))))
        return where(ops["bitwise_and"](ops["eq"](input, other), ops["isinf"](larger)), larger, out)

    def xlogy(input: Operand, other: Operand) -> VariableSurface:
        """input * log(other), 0 where input is 0 (unless other is nan)."""
        if isinstance(other, (int, float)):
            if other > 0 or other != other:
                return ops["mul"](input, math.log(other) if other > 0 else math.nan)
            return where(ops["eq"](input, 0), 0.0, ops["mul"](input, -math.inf if other == 0 else math.nan))
        pole = ops["bitwise_and"](ops["eq"](input, 0), ops["le"](other, 0))
        with numpy.errstate(divide="ignore", invalid="ignore"):  # log(0) and 0 * -inf in the branch not taken
            out = ops["mul"](input, where(pole, 0.0, ops["log"](other)))  # (d/dinput 0 there, as PyTorch's)
        return renamed(out, "XlogyBackward0", (getattr(input, "grad_fn", None),))

    def lerp(input: Operand, end: Operand, weight: Operand) -> VariableSurface:
        """input + weight * (end - input)."""
        first = getattr(input, "dtype", None)
        for name, other in (("end", end), ("weight", weight)):  # (a number or a 0-d weight: any dtype)
            dtype = getattr(other, "dtype", first)
            if (getattr(other, "ndim", 0) or name == "end") and dtype != first:
                raise RuntimeError(f"expected dtype {c_name(first)} for `{name}` but got dtype {c_name(dtype)}")
        out = ops["add"](input, ops["mul"](weight, ops["sub"](end, input)))
        return renamed(out, f"LerpBackward{int(hasattr(weight, 'shape'))}", (getattr(input, "grad_fn", None),))

    def polygamma(n: int, input: Operand) -> VariableSurface:
        """The n-th derivative of digamma."""
        return ops["polygamma"](input, n=n)

    def addmm(
        input: Operand, mat1: VariableSurface, mat2: VariableSurface, *, beta: float = 1, alpha: float = 1
    ) -> VariableSurface:
        """beta * input + alpha * (mat1 @ mat2) (beta 0: input ignored, even its nans)."""
        dtypes = (getattr(input, "dtype", mat2.dtype), mat1.dtype, mat2.dtype)
        if mat2.ndim == 1 and len(set(map(type_name, dtypes))) > 1:  # (addmv)
            names = ", ".join(map(type_name, dtypes[:2]))
            raise RuntimeError(
                f"addmv input tensors must have the same dtype, but got {names}, and {type_name(dtypes[2])}"
            )
        check_addmm(*dtypes)
        return _scaled_sum(input, ops["mm"](mat1, mat2), beta, alpha)

    def baddbmm(
        input: Operand, batch1: VariableSurface, batch2: VariableSurface, *, beta: float = 1, alpha: float = 1
    ) -> VariableSurface:
        """beta * input + alpha * bmm(batch1, batch2)."""
        dtypes = [getattr(input, "dtype", batch1.dtype), batch1.dtype, batch2.dtype]
        if dtypes[0] != dtypes[1]:
            got = ", ".join(f"{n}{c_name(d)}" for n, d in zip(("input ", "batch1: ", "batch2: "), dtypes))
            raise RuntimeError(f"Input dtypes must be the same, got: {got}")
        return _scaled_sum(input, ops["bmm"](batch1, batch2), beta, alpha)

    def addmv(
        input: Operand, mat: VariableSurface, vec: VariableSurface, *, beta: float = 1, alpha: float = 1
    ) -> VariableSurface:
        """beta * input + alpha * (mat @ vec)."""
        return _scaled_sum(input, ops["mv"](mat, vec), beta, alpha)

    def addr(
        input: Operand, vec1: VariableSurface, vec2: VariableSurface, *, beta: float = 1, alpha: float = 1
    ) -> VariableSurface:
        """beta * input + alpha * outer(vec1, vec2)."""
        return _scaled_sum(input, ops["outer"](vec1, vec2), beta, alpha)

    def addbmm(
        input: Operand, batch1: VariableSurface, batch2: VariableSurface, *, beta: float = 1, alpha: float = 1
    ) -> VariableSurface:
        """beta * input + alpha * the sum over the batch of batch1[i] @ batch2[i]."""
        return _scaled_sum(input, ops["sum"](ops["bmm"](batch1, batch2), 0), beta, alpha)

    def _scaled_sum(input, product, beta, alpha):
        product = product if alpha == 1 else product * alpha
        if beta == 0:
            return ops["expand"](product, numpy.broadcast_shapes(tuple(product.shape), tuple(input.shape)))
        return ops["add"](input if beta == 1 else ops["mul"](input, beta), product)

    def tensordot(a: VariableSurface, b: VariableSurface, dims: Any = 2) -> VariableSurface:
        """The sum of a * b over the dims paired in `dims` (an int: a's last `dims` with b's first)."""
        if a.dtype != b.dtype:
            raise RuntimeError("both inputs should have same dtype")
        if isinstance(dims, int):
            if dims < 0:
                raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
            pairs = list(zip(range(a.ndim - dims, a.ndim), range(dims)))
        else:
            first, second = ([d] if isinstance(d, int) else list(d) for d in dims)
            pairs = list(zip((_dim(a, d) for d in first), (_dim(b, d) for d in second)))
        left = list(LETTERS[: a.ndim])
        right = list(LETTERS[a.ndim : a.ndim + b.ndim])
        for i, j in pairs:
            if a.shape[i] != b.shape[j]:
                raise RuntimeError(
                    f"contracted dimensions need to match, but first has size {a.shape[i]} in dim {i} and second "
                    f"has size {b.shape[j]} in dim {j}"
                )
            right[j] = left[i]
        kept = [c for c in left if c not in right] + [c for c in right if c not in left]
        return ops["einsum"]([a, b], equation=f"{''.join(left)},{''.join(right)}->{''.join(kept)}")

    def cdist(x1: VariableSurface, x2: VariableSurface, p: float = 2.0, **options: Any) -> VariableSurface:
        """The p-norm distance of each row of x1 to each row of x2 (batched over leading dimensions)."""
        for name, v in (("X1", x1), ("X2", x2)):
            if v.ndim < 2:
                raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {v.ndim}D")
        if x1.shape[-1] != x2.shape[-1]:
            raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
        pairs = ops["sub"](ops["unsqueeze"](x1, -2), ops["unsqueeze"](x2, -3))
        return ops["norm"](pairs, p=p, dim=-1)

    def dist(input: VariableSurface, other: Operand, p: float = 2) -> VariableSurface:
        """The p-norm of input - other."""
        return ops["norm"](ops["sub"](input, other), p=p)

    def diff(
        input: VariableSurface, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None
    ) -> VariableSurface:
        """The n-th forward difference along `dim` (out[i] = x[i + 1] - x[i]; booleans: !=), after
        concatenating `prepend` and `append`."""
        if n < 0:
            raise RuntimeError(f"order must be non-negative but got {n}")
        d = _dim(input, dim)
        if prepend is not None or append is not None:
            input = ops["cat"]([v for v in (prepend, input, append) if v is not None], dim=d)
        for _ in range(n):
            size = max(input.shape[d] - 1, 0)
            later, earlier = narrow(input, d, min(input.shape[d], 1), size), narrow(input, d, 0, size)
            input = ops["ne"](later, earlier) if input.dtype == bool else ops["sub"](later, earlier)
        return input

    def trapezoid(y: VariableSurface, x: Any = None, *, dx: float | None = None, dim: int = -1) -> VariableSurface:
        """The trapezoidal rule's integral of y along `dim`, over the sample points `x` or a spacing `dx`."""
        d = _dim(y, dim)
        size = y.shape[d]
        if size == 0:
            return ops["sum"](y, d)
        pairs = ops["add"](narrow(y, d, 1, size - 1), narrow(y, d, 0, size - 1))
        if x is None:
            return ops["sum"](pairs, d) * ((1 if dx is None else dx) / 2)
        if x.ndim == 1:
            x = reshape(x, tuple(-1 if i == d else 1 for i in range(y.ndim)))
            d_x = d
        else:
            d_x = d - y.ndim + x.ndim
        return ops["sum"](pairs * diff(x, dim=d_x), d) / 2

    def cumulative_trapezoid(
        y: VariableSurface, x: Any = None, *, dx: float | None = None, dim: int = -1
    ) -> VariableSurface:
        """`trapezoid`'s running integral along `dim`: one entry fewer than y along it."""
        d = _dim(y, dim)
        size = max(y.shape[d] - 1, 0)
        pairs = ops["add"](narrow(y, d, min(y.shape[d], 1), size), narrow(y, d, 0, size))
        if x is None:
            return ops["cumsum"](pairs * ((1 if dx is None else dx) / 2), dim=d)
        if x.ndim == 1:
            x = reshape(x, tuple(-1 if i == d else 1 for i in range(y.ndim)))
        return ops["cumsum"](pairs * diff(x, dim=d - y.ndim + x.ndim) / 2, dim=d)

    def combinations(input: VariableSurface, r: int = 2, with_replacement: bool = False) -> VariableSurface:
        """Every r-combination of a 1-d Variable's entries, one per row, in itertools' order."""
        if input.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
        if r < 0:
            raise RuntimeError(f"Expect a non-negative number, but got {r}")
        pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
        index = numpy.array(list(pick(range(input.shape[0]), r)), dtype=numpy.int64).reshape(-1)
        if index.size == 0:  # (r = 0: PyTorch's is empty and 1-d)
            return reshape(narrow(input, 0, 0, 0), (0, r) if r else (0,))
        return reshape(ops["index_select"](input, index, dim=0), (-1, r))

    def vander(x: VariableSurface, N: int | None = None, increasing: bool = False) -> VariableSurface:
        """The Vandermonde matrix: columns x ** (N - 1), ..., x ** 0 (increasing: the other way round)."""
        if x.ndim != 1:
            raise RuntimeError("x must be a one-dimensional tensor.")
        N = x.shape[0] if N is None else N
        if N < 0:
            raise RuntimeError("N must be non-negative.")
        powers = numpy.arange(N) if increasing else numpy.arange(N - 1, -1, -1)
        dtype = x.dtype if numpy.dtype(x.dtype).kind in "fc" else numpy.int64
        return ops["pow"](ops["unsqueeze"](cast(x, dtype=numpy.dtype(dtype).name), 1), powers.astype(dtype))

    def logspace(
        start: float, end: float, steps: int, base: float = 10.0, *, dtype: Any = None, **options: Any
    ) -> VariableSurface:
        """`steps` values from base ** start to base ** end, evenly spaced in the exponent."""
        return make.tensor(numpy.power(base, numpy.linspace(start, end, steps)).tolist(), dtype=dtype, **options)

    def nansum(
        input: VariableSurface, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> VariableSurface:
        """The sum with NaNs counted as zero (`dtype=`: the input cast to it first)."""
        input = input if dtype is None else cast(input, dtype=numpy.dtype(as_dtype(dtype)).name)
        counted = where(ops["isnan"](input), 0.0, input) if input.dtype.kind == "f" else input
        return renamed(ops["sum"](counted, dim, keepdim), "NansumBackward0", (input.grad_fn,))

    def nanmean(
        input: VariableSurface, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype: Any = None
    ) -> VariableSurface:
        """The mean of the entries that are not NaN (`dtype=`: the input cast to it first)."""
        if input.dtype.kind != "f":
            got = type_name(input.dtype)
            raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got {got}")
        input = input if dtype is None else cast(input, dtype=numpy.dtype(as_dtype(dtype)).name)
        count = ops["sum"](ops["logical_not"](ops["isnan"](input)), dim, keepdim)
        return nansum(input, dim, keepdim) / _as(input, count)

    def _picked(input, order, d, keepdim, at, name):
        """(values, indices) at position `at` (an int, or a Variable of positions) of `order` along d; the values'
        grad_fn named `name` (PyTorch's: KthvalueBackward0...)."""
        if not input.ndim:  # its one entry (d is 0), 0-d as PyTorch's whatever keepdim
            input, order, keepdim = reshape(input, (1,)), reshape(order, (1,)), False
        indices = narrow(order, d, at, 1) if isinstance(at, int) else ops["gather"](order, at, dim=d)
        values = ops["gather"](input, indices, dim=d)
        if not keepdim:
            values, indices = ops["squeeze"](values, d), ops["squeeze"](indices, d)
        return renamed(MaxMin(values, indices), name, (input.grad_fn,))

    def _middle(input, d, skip_nan):
        """The lower median's position in the sorted order along d, or the first NaN's (sorted last); skipping
        NaNs, the lower median of the numbers."""
        size = input.shape[d]
        numbers = ops["sum"](ops["logical_not"](ops["isnan"](input)), d, keepdim=True)
        if skip_nan:
            return where(ops["gt"](numbers, 0), ops["floor_divide"](numbers - 1, 2), 0)
        return where(ops["lt"](numbers, size), numbers, (size - 1) // 2)

    def median(input: VariableSurface, dim: int | None = None, keepdim: bool = False) -> Any:
        """The lower median (NaN where there is one): of all entries (its gradient shared among the entries
        equal to it), or along `dim` as (values, indices)."""
        return _median(input, dim, keepdim, False)

    def nanmedian(input: VariableSurface, dim: int | None = None, keepdim: bool = False) -> Any:
        """median, NaNs ignored (NaN only where every entry is)."""
        return _median(input, dim, keepdim, True)

    def _median(input, dim, keepdim, skip_nan):
        if dim is None:
            flat = reshape(input, (-1,))
            if not flat.numel():
                return ops["sum"](flat) * math.nan
            order = ops["argsort"](flat, dim=0, stable=True)
            middle = reshape(flat.detach()[ops["gather"](order, _middle(flat, 0, skip_nan), dim=0)], ())
            if input.dtype.kind != "f":
                return middle
            ties = ops["eq"](input, middle)
            out = ops["sum"](where(ties, input, 0.0)) / _as(input, ops["sum"](ties))
            return renamed(out, "NanmedianBackward0" if skip_nan else "MedianBackward0", (input.grad_fn,))
        d = _dim(input, dim)
        order = ops["argsort"](input, dim=d, stable=True)
        name = "NanmedianBackward1" if skip_nan else "MedianBackward1"
        return _picked(input, order, d, keepdim, _middle(input, d, skip_nan) if input.ndim else 0, name)

    def kthvalue(input: VariableSurface, k: int, dim: int = -1, keepdim: bool = False) -> MaxMin[VariableSurface]:
        """(values, indices) of the k-th smallest entry along `dim` (k from 1)."""
        d = _dim(input, dim)
        if not 1 <= k <= (input.shape[d] if input.ndim else 1):
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
        return _picked(input, ops["argsort"](input, dim=d, stable=True), d, keepdim, k - 1, "KthvalueBackward0")

    def mode(input: VariableSurface, dim: int = -1, keepdim: bool = False) -> MaxMin[VariableSurface]:
        """(values, indices) of the most frequent value along `dim` (the smallest of equally frequent ones;
        the index of its last occurrence)."""
        if not input.ndim:
            values, indices = mode(reshape(input, (1,)))
            return renamed(MaxMin(reshape(values, ()), reshape(indices, ())), "ModeBackward0", (input.grad_fn,))
        d = _dim(input, dim)
        rows = ops["movedim"](input.detach(), d, -1)
        counts = ops["sum"](ops["eq"](ops["unsqueeze"](rows, -1), ops["unsqueeze"](rows, -2)), -1)
        frequent = ops["eq"](counts, ops["amax"](counts, -1, keepdim=True))
        value = ops["amin"](where(frequent, rows, ops["amax"](rows, -1, keepdim=True)), -1, keepdim=True)
        positions = numpy.arange(rows.shape[-1])
        last = ops["amax"](where(ops["eq"](rows, value), positions, -1), -1)
        return _picked(input, ops["unsqueeze"](last, d), d, keepdim, 0, "ModeBackward0")

    def quantile(
        input: VariableSurface,
        q: Any,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> VariableSurface:
        """The q-th quantiles along `dim` (of all entries when None): between the sorted values either side of
        q * (n - 1), by `interpolation`; a vector q gives a leading dimension of its length. NaN where a NaN is."""
        return _quantile(input, q, dim, keepdim, interpolation, False)

    def nanquantile(
        input: VariableSurface,
        q: Any,
        dim: int | None = None,
        keepdim: bool = False,
        *,
        interpolation: str = "linear",
    ) -> VariableSurface:
        """quantile of the numbers (n counts a slice's non-NaN entries; NaN where there are none)."""
        return _quantile(input, q, dim, keepdim, interpolation, True)

    def _nan_quantile(x, values, d, q, interpolation):
        """One q's quantile of each slice's numbers along d (sorted first in `values`), keeping d."""
        count = ops["sum"](ops["logical_not"](ops["isnan"](x)), d, keepdim=True)
        position = ops["mul"](cast(ops["clamp"](count - 1, min=0), dtype=numpy.dtype(x.dtype).name), q)
        below, above = ops["floor"](position), ops["ceil"](position)
        pick = {"lower": below, "higher": above, "nearest": ops["round"](position)}
        chosen = [pick[interpolation]] if interpolation in pick else [below, above]
        low, *high = (ops["gather"](values, cast(at, dtype="int64"), dim=d) for at in chosen)
        if high:
            low = lerp(low, high[0], 0.5 if interpolation == "midpoint" else ops["sub"](position, below))
        return ops["squeeze"](where(ops["eq"](count, 0), math.nan, low), d)

    def _quantile(input, q, dim, keepdim, interpolation, skip_nan):
        qs = numpy.asarray(q.tolist() if hasattr(q, "tolist") else q, dtype=numpy.float64)
        if input.dtype.kind != "f":
            raise RuntimeError("quantile() input tensor must be either float or double dtype")
        if qs.ndim > 1:
            raise RuntimeError("quantile() q must be a scalar or 1D tensor")
        if ((qs < 0) | (qs > 1)).any():
            raise RuntimeError(
                f"quantile() q must be in the range [0, 1] but got {float(qs)}"
                if qs.ndim == 0
                else "quantile() q values must be in the range [0, 1]"
            )
        if interpolation not in INTERPOLATIONS:
            raise RuntimeError(f"quantile() interpolation must be one of {', '.join(INTERPOLATIONS)}")
        x = reshape(input, (-1,)) if dim is None else input
        d = 0 if dim is None else _dim(input, dim)
        values = ops["sort"](x, d).values
        size = x.shape[d] if x.ndim else 1
        if skip_nan:
            out = ops["stack"]([_nan_quantile(x, values, d, float(one), interpolation) for one in qs.reshape(-1)], d)
        else:
            position = qs.reshape(-1) * (size - 1)
            below, above = numpy.floor(position).astype(numpy.int64), numpy.ceil(position).astype(numpy.int64)
            pick = {"lower": below, "higher": above, "nearest": numpy.round(position).astype(numpy.int64)}
            if interpolation in pick:
                out = ops["index_select"](values, pick[interpolation], dim=d)
            else:
                low, high = (ops["index_select"](values, i, dim=d) for i in (below, above))
                weight = 0.5 if interpolation == "midpoint" else position - below
                shape = tuple(-1 if i == d else 1 for i in range(values.ndim))
                out = lerp(low, high, numpy.asarray(weight, input.dtype).reshape(shape if numpy.ndim(weight) else ()))
            out = where(ops["isnan"](ops["sum"](x, d, keepdim=True)), math.nan, out)
        out = ops["movedim"](out, d, 0)
        if keepdim:
            kept = [1] * input.ndim if dim is None else list(input.shape)
            kept[0 if dim is None else d] = 1
            out = reshape(out, (qs.size, *kept))
        return ops["squeeze"](out, 0) if qs.ndim == 0 else out

    def logcumsumexp(input: VariableSurface, dim: int) -> VariableSurface:
        """log(cumsum(exp(x))) along `dim`, shifted by the maximum along it."""
        d = _dim(input, dim)
        top = ops["amax"](input.detach(), d, keepdim=True) if input.ndim else input.detach()
        top = where(ops["isfinite"](top), top, 0.0)
        return ops["log"](ops["cumsum"](ops["exp"](input - top), dim=d)) + top

    def histc(input: VariableSurface, bins: int = 100, min: float = 0, max: float = 0) -> VariableSurface:
        """Counts of `input`'s values in `bins` equal bins over [min, max] (the data's range when min == max),
        values outside left out, in input's floating dtype (no gradient)."""
        if input.dtype.kind != "f":
            raise NotImplementedError(f'"histogram_cpu" not implemented for {type_name(input.dtype)!r}')
        if bins <= 0:
            raise RuntimeError("torch.histc: bins must be > 0")
        flat, dtype = ops["reshape"](input.detach(), (-1,)), numpy.dtype(input.dtype).name
        if min == max and flat.numel():
            min, max = ops["amin"](flat).item(), ops["amax"](flat).item()
        if min == max:
            min, max = min - 1, max + 1
        if min > max:
            raise RuntimeError(f"torch.histc: max must be larger than min, but got min {min} max {max}")
        inside = ops["bitwise_and"](ops["ge"](flat, min), ops["le"](flat, max))
        position = ops["floor"](ops["div"](ops["mul"](ops["sub"](flat, min), bins), max - min))  # torch's order
        position = where(inside, ops["clamp"](position, max=bins - 1), 0)
        count = make.zeros(bins, dtype=dtype)
        return ops["scatter_add"](count, cast(position, dtype="int64"), cast(inside, dtype=dtype), dim=0)

    def block_diag(*tensors: VariableSurface) -> VariableSurface:
        """The 0-, 1- or 2-d `tensors` as the blocks of a block-diagonal matrix (of their promoted dtype)."""
        for k, t in enumerate(tensors):
            if t.ndim > 2:
                raise RuntimeError(
                    f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input {k} has {t.ndim} dimensions"
                )
        blocks = [reshape(t, (1, -1) if t.ndim < 2 else tuple(t.shape)) for t in tensors]
        shapes, dtypes = [tuple(b.shape) for b in blocks], [numpy.dtype(b.dtype) for b in blocks]
        dtype = result_type(shapes, dtypes).name if blocks else "float32"
        width, rows, left = sum(b.shape[1] for b in blocks), [], 0
        for b in blocks:
            pieces = [make.zeros(b.shape[0], left, dtype=dtype), cast(b, dtype=dtype)]
            rows.append(ops["cat"]([*pieces, make.zeros(b.shape[0], width - left - b.shape[1], dtype=dtype)], dim=1))
            left += b.shape[1]
        return ops["cat"](rows, dim=0) if rows else make.zeros(0, 0, dtype=dtype)

    # every function defined above but the helpers (named with a leading underscore)
    out = {name: f for name, f in locals().items() if getattr(f, "__module__", None) == __name__ and name[0] != "_"}
    out["trapz"] = trapezoid
    out.update(arcsinh=ops["asinh"], arccosh=ops["acosh"], arctanh=ops["atanh"])
    return out
