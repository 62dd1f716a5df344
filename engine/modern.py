"""Today's PyTorch spellings over the registry's ops (the counterpart of `engine.compat`'s
PyTorch 0.3 ones): the PyTorch names of ops the registry computes under another name
(`torch.multiply`, `x.clip`...), a few compositions of them (`dot`, `mv`, `outer`, `square`, `all`, `any`,
`allclose`...),
`alpha=` on add/sub, and the Variable methods that place, convert or relate Variables
(`.to()`, `.cpu()`, `.cuda()`, `.type_as()`, `.view_as()`, `.new_zeros()`, `.is_floating_point()`...).

No new math: everything here calls registry ops. `engine.surface.install` puts the methods on
both Variable classes and the functions in both packages.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy

from engine import compat, grad_fn_names, linalg_functions, tensor_arith, tensor_ops
from engine.devices import Device
from engine.factory import as_dtype
from engine.grad_fn_names import renamed
from engine.promotion import check_subtraction, type_name
from engine.views import KNOWN, LAID, VIEW_SIZE, kept_layout, strided, view_of


def numpy_keywords(name, dim, keepdim, aliases):
    """(dim, keepdim) of a call that spelled them NumPy's way too (`axis=`, `keepdims=`)."""
    unknown = set(aliases) - {"axis", "keepdims"}
    if unknown:
        raise TypeError(f"{name}() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    if "axis" in aliases:
        if dim is not None:
            raise TypeError(f"{name}() got multiple values for argument 'dim' (dim and axis)")
        dim = aliases["axis"]
    return dim, aliases.get("keepdims", keepdim)


if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import DeviceLike, DTypeLike, Operand, V, VariableSurface

# PyTorch name -> registry op, as a torch.* function and a Tensor method alike
ALIASES: dict[str, str] = {
    "multiply": "mul",
    "subtract": "sub",
    "true_divide": "div",
    "negative": "neg",
    "absolute": "abs",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arctan2": "atan2",
    "inverse": "inv",
    "swapaxes": "transpose",
    "swapdims": "transpose",
}
FUNCTION_ALIASES = {"concat": "cat", "concatenate": "cat"}  # torch.* functions only


def _clone(clone):
    def fn(input: Operand, *, memory_format: Any = None) -> VariableSurface:
        """a copy of input (a strided view's keeps its layout unless `memory_format` is torch.contiguous_format)"""
        out = clone(input)
        if id(input) not in KNOWN and id(input) not in LAID:  # (neither a view nor a copy keeping one's strides)
            return out
        keep = getattr(memory_format, "name", "preserve_format") == "preserve_format" and strided(input)
        return kept_layout(out, input) if keep else out

    return fn


def _with_alpha(name, base, mul, cast):
    def fn(input: Operand, other: Operand, *, alpha: float = 1) -> VariableSurface:
        if alpha != 1 and name == "sub":  # (scaled, a bool operand would no longer be one)
            check_subtraction([getattr(v, "dtype", v) for v in (input, other)])
        if alpha == 1:
            return base(input, other)
        number = type(other) in (int, float)
        if getattr(input, "dtype", None) == numpy.float32 and (
            number or getattr(other, "dtype", None) == numpy.float32
        ):
            # PyTorch's float32 kernel rounds input + other * alpha once (a fused multiply-add): a product of two
            # float32s is exact in float64, so the float64 sum rounded to float32 is the fused result
            alpha = float(numpy.float32(alpha))
            scaled = float(numpy.float32(other)) * alpha if number else mul(cast(other, dtype="float64"), alpha)
            out = cast(base(cast(input, dtype="float64"), scaled), dtype="float32")
            return tensor_arith.swap_named(out, f"{name.capitalize()}Backward0")
        return base(input, mul(other, alpha))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{base.__doc__}; `alpha=` scales `other` first (PyTorch's `{name}(input, other, alpha=a)`)"
    return fn


def _fmod(base):
    def fmod(input: Operand, other: Operand) -> VariableSurface:
        if isinstance(input, (bool, int, float)):  # (PyTorch's fmod takes no number first; remainder does)
            raise TypeError(
                f"fmod() received an invalid combination of arguments - got ({type(input).__name__}, "
                f"{'Tensor' if hasattr(other, 'shape') else type(other).__name__}), but expected one of:\n"
                " * (Tensor input, Tensor other, *, Tensor out = None)\n * (Tensor input, Number other, *, Tensor out = None)\n"
            )
        return base(input, other)

    fmod.__doc__ = base.__doc__
    return fmod


def _with_dtype(name, base, cast):
    def fn(input: Operand, *args: Any, dtype: DTypeLike | None = None, **kwargs: Any) -> VariableSurface:
        if dtype is not None:
            input = cast(input, dtype=numpy.dtype(as_dtype(dtype)).name)
        return base(input, *args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{base.__doc__}; `dtype=` casts the input first (PyTorch's `{name}(input, ..., dtype=d)`)"
    return fn


def _reduction_with_dtype(name, base, cast):
    """sum or mean with `dtype=` (the input cast first); a mean of integers is refused, as PyTorch's."""

    def fn(
        input: VariableSurface,
        dim: int | Sequence[int] | None = None,
        keepdim: bool = False,
        *,
        dtype: DTypeLike | None = None,
        **aliases: Any,
    ) -> VariableSurface:
        if dtype is not None:
            input = cast(input, dtype=numpy.dtype(as_dtype(dtype)).name)
        if name == "mean" and dtype is not None and numpy.dtype(input.dtype).kind != "f":  # (else: the shape rule's)
            raise RuntimeError(
                "mean(): could not infer output dtype. Optional dtype must be either a floating point or complex "
                f"dtype. Got: {type_name(input.dtype)}"
            )
        if aliases:
            dim, keepdim = numpy_keywords(name, dim, keepdim, aliases)
        return base(input) if dim is None and not keepdim else base(input, dim, keepdim)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{base.__doc__}; `dtype=` casts the input first (PyTorch's `{name}(input, ..., dtype=d)`)"
    return fn


def _dims(name, *expected):
    def check(*variables):
        if tuple(v.ndim for v in variables) != expected:
            got = " and ".join(f"{v.ndim}D" for v in variables)
            raise RuntimeError(f"{name}: expected {' and '.join(f'{d}D' for d in expected)} tensors, but got {got}")

    return check


def functions(ops) -> dict:
    """The functions (each also a method) that `ops`, the side's registry functions, compose."""
    matmul, mul, unsqueeze = ops["matmul"], ops["mul"], ops["unsqueeze"]
    check_dot, check_mv, check_outer = _dims("dot", 1, 1), _dims("mv", 2, 1), _dims("outer", 1, 1)

    def dot(input: Operand, tensor: Operand) -> VariableSurface:
        """The inner product of two 1-D Variables."""
        check_dot(input, tensor)
        return matmul(input, tensor)

    def inner(input: VariableSurface, other: VariableSurface) -> VariableSurface:
        """The products summed over the last dimension of both (PyTorch's `inner`; a product when one is 0-d)."""
        if input.ndim == 0 or other.ndim == 0:
            return mul(input, other)
        shapes = list(input.shape), list(other.shape)
        if shapes[0][-1] != shapes[1][-1]:
            raise RuntimeError(
                f"inner() the last dimension must match on both input tensors but got shapes {shapes[0]} and {shapes[1]}"
            )
        rows, cols = (ops["reshape"](v, (-1, v.shape[-1])) for v in (input, other))
        return ops["reshape"](matmul(rows, ops["t"](cols)), (*shapes[0][:-1], *shapes[1][:-1]))

    def mv(input: Operand, vec: Operand) -> VariableSurface:
        """Matrix times vector."""
        check_mv(input, vec)
        return matmul(input, vec)

    def outer(input: Operand, vec2: Operand) -> VariableSurface:
        """The outer product of two 1-D Variables."""
        check_outer(input, vec2)
        return mul(unsqueeze(input, 1), unsqueeze(vec2, 0))

    def square(input: Operand) -> VariableSurface:
        return mul(input, input)

    def reciprocal(input: Operand) -> VariableSurface:
        return ops["div"](1.0, input)

    def rsqrt(input: Operand) -> VariableSurface:
        return ops["div"](1.0, ops["sqrt"](input))

    def all(
        input: Operand, dim: int | Sequence[int] | None = None, keepdim: bool = False, **numpy_spelling: Any
    ) -> VariableSurface:
        """Whether every element (along `dim`) is nonzero, as a bool Variable."""
        dim, keepdim = numpy_keywords("all", dim, keepdim, numpy_spelling)
        return ops["amin"](ops["cast"](input, dtype="bool"), dim, keepdim)

    def any(
        input: Operand, dim: int | Sequence[int] | None = None, keepdim: bool = False, **numpy_spelling: Any
    ) -> VariableSurface:
        """Whether some element (along `dim`) is nonzero, as a bool Variable."""
        dim, keepdim = numpy_keywords("any", dim, keepdim, numpy_spelling)
        return ops["amax"](ops["cast"](input, dtype="bool"), dim, keepdim)

    def count_nonzero(input: Operand, dim: int | Sequence[int] | None = None, **numpy_spelling: Any) -> VariableSurface:
        """How many elements (along `dim`) are nonzero, as an int64 Variable."""
        dim, _ = numpy_keywords("count_nonzero", dim, False, numpy_spelling)
        return ops["sum"](ops["ne"](input, 0), dim)

    def index_put(
        input: VariableSurface, indices: Sequence[Any], values: Operand, accumulate: bool = False
    ) -> VariableSurface:
        """A copy of `input` with `input[indices] = values`; with `accumulate=True`, `values` are added
        there instead, repeated indices adding up (PyTorch's `index_put`)."""
        if not accumulate:
            return ops["setitem"](input, values, tuple(indices))
        spec = tuple({"tensor": i} for i in range(len(indices)))
        added = ops["index_add"]([_as(input, values), *indices], index=spec, shape=tuple(input.shape))
        return ops["add"](input, added)

    def index_add(
        input: VariableSurface, dim: int, index: Operand, source: Operand, *, alpha: float = 1
    ) -> VariableSurface:
        """A copy of `input` with `alpha * source` added along `dim` at the positions `index` names
        (repeated positions add up): PyTorch's `index_add`."""
        if not -max(input.ndim, 1) <= dim < max(input.ndim, 1):
            raise IndexError(f"index_add: dimension {dim} is out of range for a {input.ndim}-d input")
        if (index_dtype := numpy.dtype(getattr(index, "dtype", numpy.int64))).kind not in "iu":  # (else truncated)
            raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: {type_name(index_dtype)}")
        spec = ({"slice": [None, None, None]},) * (dim % max(input.ndim, 1)) + ({"tensor": 0},)
        source = source if alpha == 1 else mul(source, alpha)
        added = ops["index_add"]([_as(input, source), index], index=spec, shape=tuple(input.shape))
        return renamed(ops["add"](input, added), "IndexAddBackward0", (input.grad_fn,))

    def index_put_(self: V, indices: Sequence[Any], values: Operand, accumulate: bool = False) -> V:
        """In place: `index_put` (a leaf that requires grad refuses in grad mode, as in PyTorch)."""
        if not accumulate:
            self[tuple(indices)] = values
        else:
            self.copy_(index_put(self, indices, values, accumulate=True))
        return self

    def index_add_(self: V, dim: int, index: Operand, source: Operand, *, alpha: float = 1) -> V:
        """In place: `index_add`."""
        self.copy_(index_add(self, dim, index, source, alpha=alpha))
        return self

    def _as(input, value):
        """`value` in `input`'s dtype (PyTorch's index_put and index_add want them equal)."""
        if getattr(value, "dtype", None) == input.dtype:
            return value
        return ops["cast"](value, dtype=numpy.dtype(input.dtype).name)

    def isclose(input: Operand, other: Operand, rtol: float = 1e-05, atol: float = 1e-08) -> VariableSurface:
        return ops["le"](ops["abs"](ops["sub"](input, other)), ops["add"](ops["mul"](ops["abs"](other), rtol), atol))

    def allclose(input: Operand, other: Operand, rtol: float = 1e-05, atol: float = 1e-08) -> bool:
        return bool(all(isclose(input, other, rtol, atol)))

    def equal(input: VariableSurface, other: VariableSurface) -> bool:
        return tuple(input.shape) == tuple(other.shape) and bool(all(ops["eq"](input, other)))

    def isnan(input: Operand) -> VariableSurface:
        """Whether each element is NaN, as a bool Variable."""
        return ops["ne"](input, input)

    def isinf(input: Operand) -> VariableSurface:
        """Whether each element is +inf or -inf, as a bool Variable."""
        return ops["eq"](ops["abs"](input), math.inf)

    def isposinf(input: Operand) -> VariableSurface:
        return ops["eq"](input, math.inf)

    def isneginf(input: Operand) -> VariableSurface:
        return ops["eq"](input, -math.inf)

    def isfinite(input: Operand) -> VariableSurface:
        """Whether each element is neither NaN nor infinite, as a bool Variable."""
        return ops["lt"](ops["abs"](input), math.inf)

    def nan_to_num(
        input: VariableSurface, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None
    ) -> VariableSurface:
        """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default the dtype's largest and
        smallest finite values); the gradient flows where the input was finite."""
        if input.dtype.kind != "f":
            return ops["clone"](input)
        info = numpy.finfo(input.dtype)
        high = float(info.max) if posinf is None else posinf
        low = float(info.min) if neginf is None else neginf
        where = ops["where"]
        finite = where(isposinf(input), high, where(isneginf(input), low, input))
        return where(isnan(input), nan, finite)

    def logical_not(input: Operand) -> VariableSurface:
        return ops["eq"](input, 0)

    def logical_and(input: Operand, other: Operand) -> VariableSurface:
        return ops["bitwise_and"](ops["ne"](input, 0), ops["ne"](other, 0))

    def logical_or(input: Operand, other: Operand) -> VariableSurface:
        return ops["bitwise_or"](ops["ne"](input, 0), ops["ne"](other, 0))

    def logical_xor(input: Operand, other: Operand) -> VariableSurface:
        return ops["ne"](ops["ne"](input, 0), ops["ne"](other, 0))

    out = {
        f.__name__: f
        for f in (
            dot,
            inner,
            mv,
            outer,
            square,
            reciprocal,
            rsqrt,
            all,
            any,
            count_nonzero,
            index_put,
            index_add,
            index_put_,
            index_add_,
            isclose,
            allclose,
            equal,
            isnan,
            isinf,
            isposinf,
            isneginf,
            isfinite,
            nan_to_num,
            logical_not,
            logical_and,
            logical_or,
            logical_xor,
        )
    }
    out.update(ger=outer)
    out["clone"] = _clone(ops["clone"])
    out["add"] = _with_alpha("add", ops["add"], mul, ops["cast"])
    out["sub"] = _with_alpha("sub", ops["sub"], mul, ops["cast"])
    out["fmod"] = _fmod(ops["fmod"])
    for name in ("cumsum", "cumprod", "prod", "softmax", "log_softmax"):
        out[name] = _with_dtype(name, ops[name], ops["cast"])
    for name in ("sum", "mean"):
        out[name] = _reduction_with_dtype(name, ops[name], ops["cast"])
    out.update({alias: ops[name] for alias, name in ALIASES.items()})
    out.update(tensor_arith.functions(ops))
    out.update(tensor_ops.functions(ops))
    out.update(linalg_functions.functions(ops))
    return grad_fn_names.named_composed(out)


def view(self: V, *shape: Any, **kwargs: Any) -> V:
    """view(self, shape: Sequence[int]) -> Self
    view(self, *shape: int) -> Self

    the same values in a new shape (one size may be -1); refused, as PyTorch's, where a strided view's elements
    can't be addressed in it (`engine.surface` puts it in place of the generated `SurfaceMethods.view`: a name
    more in a Variable class's own dict costs every attribute lookup)."""
    out = self._ops.reshape(self, *shape, **kwargs)  # type: ignore[attr-defined]
    if strided(self) and view_of(out) is None:
        raise RuntimeError(VIEW_SIZE)
    return out


def methods(variable, ops, constructors) -> dict:
    """Placement, conversion and relation methods; `ops` holds the side's functions."""
    cast, reshape, expand = ops["cast"], ops["reshape"], ops["expand"]
    placement = constructors.placement

    def _converted(self, dtype, device):
        placement.check(device)
        if dtype is None or numpy.dtype(dtype) == self.dtype:
            return self
        return compat.converted(self, numpy.dtype(dtype).name, lambda v, name: cast(v, dtype=name))

    def to(
        self,
        *args: Any,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        non_blocking: bool = False,
        copy: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        """`x.to(dtype)`, `x.to(device)`, `x.to(device, dtype)`, `x.to(other)`, `x.to(dtype=, device=)`:
        this Variable when nothing changes (as in PyTorch), else a differentiable cast."""
        for arg in args:
            if isinstance(arg, variable):
                dtype, device = dtype or arg.dtype, device or arg.device
            elif isinstance(arg, (str, Device, int)) and not isinstance(arg, bool):
                device = arg
            else:
                dtype = arg
        result = _converted(self, as_dtype(dtype), device)
        return result.clone() if copy and result is self else result

    def cpu(self: V) -> V:
        return self

    def cuda(self: V, device: DeviceLike | None = None, non_blocking: bool = False) -> V:
        placement.check("cuda" if device is None else device)
        return self

    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def is_floating_point(self) -> bool:
        return self.dtype.kind == "f"

    def type_as(self, other: VariableSurface) -> VariableSurface:
        return _converted(self, other.dtype, None)

    def reshape_as(self, other: VariableSurface) -> VariableSurface:
        return reshape(self, tuple(other.shape))

    def view_as(self, other: VariableSurface) -> VariableSurface:
        return view(self, tuple(other.shape))

    def expand_as(self, other: VariableSurface) -> VariableSurface:
        return expand(self, tuple(other.shape))

    def contiguous(self: V, memory_format: Any = None) -> V:
        return ops["clone"](self) if strided(self) else self

    def is_contiguous(self, memory_format: Any = None) -> bool:
        return not strided(self)

    def new(name, make):
        def method(
            self,
            *args: Any,
            dtype: DTypeLike | None = None,
            device: DeviceLike | None = None,
            requires_grad: bool = False,
            **keywords: Any,
        ) -> VariableSurface:
            return make(
                *args,
                dtype=self.dtype if dtype is None else dtype,
                device=device,
                requires_grad=requires_grad,
                **keywords,
            )

        method.__name__ = method.__qualname__ = name
        method.__doc__ = f"`{make.__name__}(...)` with this Variable's dtype unless `dtype=` says otherwise."
        return method

    def where(self, condition: Operand, other: Operand) -> VariableSurface:
        """`x.where(condition, y)`: `where(condition, x, y)`."""
        return ops["where"](condition, self, other)

    out: dict[str, Any] = {
        f.__name__: f
        for f in (where, to, cpu, cuda, is_floating_point, type_as, view_as, expand_as, contiguous, is_contiguous)
    }

    def nelement(self) -> int:
        return self.numel()

    def ndimension(self) -> int:
        return self.ndim

    out.update(reshape_as=reshape_as, is_cuda=property(is_cuda), nelement=nelement, ndimension=ndimension)
    for name in ("zeros", "ones", "empty", "full", "tensor"):
        out["new_" + name] = new("new_" + name, getattr(constructors, name))
    return out
