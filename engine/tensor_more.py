"""More of PyTorch's Tensor methods and functions, composed of the ops before them: `var`/`std`/`var_mean`/`std_mean`
with `correction=`,
elementwise ones (`sgn`, `signbit`, `positive`, `fix`, `erfc`, `sinc`, `logit`, `float_power`, `fmax`/`fmin`,
`copysign`, `ldexp`, `gcd`/`lcm`, `mvlgamma`, `addcmul`/`addcdiv`, `hardshrink`, `renorm`), `aminmax`, `msort`, `diagflat`,
`cov`/`corrcoef`, `vdot`, splits (`hsplit`/`vsplit`/`dsplit`, `split_with_sizes`), `sum_to_size`,
`slice_scatter`/`select_scatter`/`diagonal_scatter`, `bincount`, and what a real CPU tensor answers about itself (`is_complex()`
False, `conj()` itself, `get_device()` -1, `apply_(f)`...).

Gradients are those of the ops they call, PyTorch's: `fmax` gives a tie to its first input, `copysign` gives its
second none. `engine.surface` installs them; `FUNCTIONS_ONLY` are no Tensor methods, `METHODS_ONLY` no torch.*
functions."""

from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING, Any

import numpy

from engine.grad_fn_names import renamed
from engine.modern import numpy_keywords
from engine.tensor_ops import _dim
from engine.user_warnings import warn

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import Operand, VariableSurface

FUNCTIONS_ONLY = ("std_mean", "var_mean", "gradient")
METHODS_ONLY = ("is_complex is_cpu is_pinned get_device data_ptr pin_memory apply_ map_ sum_to_size").split()
AMINMAX = namedtuple("aminmax", ["min", "max"])  # type: ignore[name-match]  # (torch.return_types.aminmax)
EVERY = slice(None)
NO_DOF = "Correction should be strictly less than the reduction factor (input numel divided by output numel)."


def functions(ops, make) -> dict:
    """The functions (each also a method, but FUNCTIONS_ONLY) over `ops`, the side's op functions, and
    `make`, its constructors."""
    where, cast, abs_, lt = ops["where"], ops["cast"], ops["abs"], ops["lt"]

    def _spread(name, with_mean=False):
        def fn(
            input: VariableSurface,
            dim: Any = None,
            unbiased: bool = True,
            keepdim: bool = False,
            *,
            correction: float | None = None,
            **numpy_spelling: Any,
        ) -> Any:
            if isinstance(dim, bool):
                dim, unbiased = None, dim
            dim, keepdim = numpy_keywords(name, dim, keepdim, numpy_spelling)
            if input.dtype.kind not in "fc":
                raise RuntimeError(
                    f"{'std and var' if not with_mean else fn.__name__} only support floating point and complex dtypes"
                )
            shift = (1 if unbiased else 0) if correction is None else correction
            dims = () if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
            count = math.prod(input.shape[_dim(input, d)] for d in dims) if dims and input.ndim else input.numel()
            if count <= shift:
                warn(f"{fn.__name__}(): degrees of freedom is <= 0. {NO_DOF}")
            if name == "std" and count > shift:  # (a norm's gradient is 0 where the std is 0, as PyTorch's)
                spread = ops["norm"](input - ops["mean"](input, dim, True), 2.0, dim, keepdim) / math.sqrt(
                    count - shift
                )
            elif shift in (0, 1):
                spread = ops["var"](input, dim, bool(shift), keepdim)
            else:
                spread = ops["var"](input, dim, False, keepdim) * (
                    count / max(count - shift, 0) if count > shift else math.inf
                )
            if name == "std" and count <= shift:
                spread = ops["sqrt"](spread)
            node = f"{name.capitalize()}{'Mean' * with_mean}Backward0"  # (PyTorch's, where the last op is this call's)
            spread = renamed(spread, node, (getattr(input, "grad_fn", None),))
            return (spread, ops["mean"](input, dim, keepdim)) if with_mean else spread

        fn.__name__ = fn.__qualname__ = name + "_mean" * with_mean
        fn.__doc__ = f"PyTorch's {fn.__name__} over `dim` (all when None), by n - correction (1: unbiased=True)."
        return fn

    def gradient(input: VariableSurface, *, spacing: Any = 1, dim: Any = None, edge_order: int = 1) -> tuple[Any, ...]:
        """PyTorch's estimate of the derivative along each of `dim` (all when None): central differences inside,
        one-sided ones of `edge_order` (1 or 2) at the ends, `spacing` a number or one a dim (not coordinates)."""
        dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
        steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
        if any(hasattr(h, "shape") for h in steps):
            raise NotImplementedError("torch.gradient with coordinates as spacing is not supported: a number a dim")
        if any(input.shape[d] < edge_order + 1 for d in dims):
            raise RuntimeError("torch.gradient expected each dimension size to be at least edge_order+1")
        x, out = (input if input.is_floating_point() else input.float()), []
        for d, h in zip(dims, steps, strict=True):
            at = lambda a, b, d=d: x[(EVERY,) * (d % x.ndim) + (slice(a, b),)]  # noqa: E731
            if edge_order == 1:
                ends = [(at(1, 2) - at(0, 1)) / h, (at(-1, None) - at(-2, -1)) / h]
            else:
                ends = [(at(1, 2) * 4 - at(0, 1) * 3 - at(2, 3)) / (2 * h)]
                ends.append((at(-1, None) * 3 - at(-2, -1) * 4 + at(-3, -2)) / (2 * h))
            out.append(ops["cat"]([ends[0], (at(2, None) - at(None, -2)) / (2 * h), ends[1]], d))
        return tuple(out)

    def positive(input: VariableSurface) -> VariableSurface:
        if input.dtype == numpy.bool_:
            raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
        return input

    def signbit(input: Any) -> VariableSurface:
        """True where the sign bit is set (-0.0 included)."""
        if numpy.dtype(input.dtype).kind != "f":
            return lt(input, 0)
        with numpy.errstate(divide="ignore"):
            return where(ops["eq"](input, 0), lt(ops["div"](1.0, input), 0), lt(input, 0))

    def copysign(input: Operand, other: Any) -> VariableSurface:
        """|input| with other's sign (a float)."""
        other = other if hasattr(other, "dtype") else make.tensor(float(other))
        sign = where(
            signbit(other), -1.0, 1.0
        )  # (and other's gradient zeros, as PyTorch's: other in a branch never taken)
        out = ops["mul"](abs_(input), where(ops["lt"](other, -math.inf), other, sign))
        return renamed(out, "CopysignBackward0", (getattr(input, "grad_fn", None),))

    def ldexp(input: Operand, other: Operand) -> VariableSurface:
        return renamed(ops["mul"](input, ops["exp2"](other)), "LdexpBackward0", (getattr(input, "grad_fn", None),))

    def float_power(input: Operand, exponent: Operand) -> VariableSurface:
        """input ** exponent in float64."""
        as_double = [cast(v, dtype="float64") if hasattr(v, "dtype") else v for v in (input, exponent)]
        return ops["pow"](*as_double)

    def fmax(input: Operand, other: Operand) -> VariableSurface:
        """The elementwise maximum, a NaN ignored where the other is a number."""
        out = where(ops["bitwise_or"](ops["ge"](input, other), ops["isnan"](other)), input, other)
        return renamed(out, "FmaxBackward0", (getattr(input, "grad_fn", None), getattr(other, "grad_fn", None)))

    def fmin(input: Operand, other: Operand) -> VariableSurface:
        out = where(ops["bitwise_or"](ops["le"](input, other), ops["isnan"](other)), input, other)
        return renamed(out, "FminBackward0", (getattr(input, "grad_fn", None), getattr(other, "grad_fn", None)))

    def gcd(input: VariableSurface, other: Operand) -> VariableSurface:
        """The greatest common divisor (integers; Euclid's, elementwise)."""
        a, b = ops["broadcast_tensors"](abs_(input), abs_(other))
        while bool(ops["any"](b != 0)):
            nonzero = b != 0
            a, b = where(nonzero, b, a), where(nonzero, ops["remainder"](a, where(nonzero, b, 1)), 0)
        return a

    def lcm(input: VariableSurface, other: Operand) -> VariableSurface:
        divisor = gcd(input, other)
        return abs_(ops["mul"](ops["floor_divide"](input, where(divisor == 0, 1, divisor)), other))

    def addcmul(input: Operand, tensor1: Operand, tensor2: Operand, *, value: float = 1) -> VariableSurface:
        """input + value * tensor1 * tensor2."""
        product = ops["mul"](tensor1, tensor2)
        return ops["add"](input, product if value == 1 else ops["mul"](product, value))

    def addcdiv(input: Operand, tensor1: Operand, tensor2: Operand, *, value: float = 1) -> VariableSurface:
        """input + value * tensor1 / tensor2."""
        if all(numpy.dtype(getattr(t, "dtype", numpy.float64)).kind in "biu" for t in (tensor1, tensor2)):
            raise RuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
                "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the "
                "latter implementation: (input + value * tensor1 / tensor2), for all dtypes."
            )
        quotient = ops["div"](tensor1, tensor2)
        return ops["add"](input, quotient if value == 1 else ops["mul"](quotient, value))

    def erfc(input: Operand) -> VariableSurface:
        return ops["sub"](1, ops["erf"](input))

    def logit(input: VariableSurface, eps: float | None = None) -> VariableSurface:
        """log(x / (1 - x)), x clamped to [eps, 1 - eps] first when eps is given."""
        x = input if eps is None else ops["clamp"](input, eps, 1 - eps)
        return ops["log"](ops["div"](x, ops["sub"](1, x)))

    def sinc(input: VariableSurface) -> VariableSurface:
        """sin(pi x) / (pi x), 1 at 0."""
        zero = ops["eq"](input, 0)
        safe = where(zero, 1.0, ops["mul"](input, math.pi))
        return where(zero, 1.0, ops["div"](ops["sin"](safe), safe))

    def hardshrink(input: VariableSurface, lambd: float = 0.5) -> VariableSurface:
        """x where |x| > lambd, else 0."""
        return where(ops["gt"](abs_(input), lambd), input, 0.0)

    def prelu(input: VariableSurface, weight: VariableSurface) -> VariableSurface:
        """x where x > 0, else weight * x; weight [1] or one slope per channel (dimension 1)."""
        channels = input.shape[1] if input.ndim >= 2 else 1
        if weight.numel() != 1 and weight.numel() != channels:
            raise RuntimeError(
                "Mismatch of parameter numbers and input channel size. "
                f"Found parameter numbers = {weight.numel()} and channel size = {channels}."
            )
        if weight.numel() != 1:
            weight = ops["reshape"](weight, (channels,) + (1,) * (input.ndim - 2))
        return where(ops["gt"](input, 0), input, ops["mul"](input, weight))

    def mvlgamma(input: VariableSurface, p: int) -> VariableSurface:
        """The log of the multivariate gamma function of dimension p."""
        if p < 1:
            raise RuntimeError("p has to be greater than or equal to 1")
        terms = [ops["lgamma"](ops["sub"](input, i / 2)) for i in range(p)]
        return ops["add"](ops["sum"](ops["stack"](terms), 0), p * (p - 1) / 4 * math.log(math.pi))

    def renorm(input: VariableSurface, p: float, dim: int, maxnorm: float) -> VariableSurface:
        """Each slice along `dim` scaled to p-norm at most `maxnorm`."""
        others = tuple(d for d in range(input.ndim) if d != _dim(input, dim))
        norm = ops["norm"](input, p, others, keepdim=True)
        return ops["mul"](input, where(ops["gt"](norm, maxnorm), maxnorm / (norm + 1e-7), 1.0))

    def aminmax(input: VariableSurface, *, dim: int | None = None, keepdim: bool = False) -> Any:
        if dim is None:
            low, high = ops["amin"](input), ops["amax"](input)
            low, high = (ops["reshape"](v, (1,) * input.ndim) for v in (low, high)) if keepdim else (low, high)
        else:
            low, high = ops["amin"](input, dim, keepdim), ops["amax"](input, dim, keepdim)
        return AMINMAX(*(renamed(v, "AminmaxBackward0", (input.grad_fn,)) for v in (low, high)))

    def msort(input: VariableSurface) -> VariableSurface:
        return ops["sort"](input, 0)[0]

    def diagflat(input: VariableSurface, offset: int = 0) -> VariableSurface:
        return ops["diag"](ops["reshape"](input, (-1,)), offset)

    def vdot(input: VariableSurface, other: VariableSurface) -> VariableSurface:
        return ops["dot"](input, other)

    def cov(
        input: VariableSurface, *, correction: int = 1, fweights: Any = None, aweights: Any = None
    ) -> VariableSurface:
        """The covariance of the rows (variables) over the columns (observations)."""
        if fweights is not None or aweights is not None:
            raise NotImplementedError("cov(): fweights and aweights are not supported")
        if input.ndim > 2:
            raise RuntimeError(
                f"cov(): expected input to have two or fewer dimensions but got an input with {input.ndim} dimensions"
            )
        x = input if input.ndim == 2 else ops["reshape"](input, (1, -1))
        x = x if numpy.dtype(x.dtype).kind == "f" else cast(x, dtype=numpy.dtype(make.get_default_dtype()).name)
        centred = ops["sub"](x, ops["mean"](x, 1, keepdim=True))
        out = ops["div"](ops["mm"](centred, ops["t"](centred)), max(x.shape[1] - correction, 0))
        return ops["reshape"](out, ()) if input.ndim < 2 else out

    def corrcoef(input: VariableSurface) -> VariableSurface:
        c = cov(input)
        if c.ndim == 0:
            return ops["div"](c, c)
        d = ops["sqrt"](ops["diagonal"](c))
        return ops["clamp"](ops["div"](ops["div"](c, ops["unsqueeze"](d, 1)), ops["unsqueeze"](d, 0)), -1, 1)

    def _split_along(name, dim, least):
        def fn(input: VariableSurface, indices_or_sections: Any) -> tuple[VariableSurface, ...]:
            d = 1 if name == "hsplit" and input.ndim >= 2 else dim
            if input.ndim < least:
                raise RuntimeError(
                    f"torch.{name} requires a tensor with at least {least} dimension, but got a tensor with "
                    f"{input.ndim} dimensions!"
                )
            if isinstance(indices_or_sections, int) and input.shape[d] % indices_or_sections:
                raise RuntimeError(
                    f"torch.{name} attempted to split along dimension {d}, but the size of the dimension "
                    f"{input.shape[d]} is not divisible by the split_size {indices_or_sections}!"
                )
            return ops["tensor_split"](input, indices_or_sections, d)

        fn.__name__ = fn.__qualname__ = name
        return fn

    def split_with_sizes(input: VariableSurface, split_sizes: Sequence[int], dim: int = 0) -> Any:
        return ops["split"](input, list(split_sizes), dim)

    def sum_to_size(self: VariableSurface, *size: Any) -> VariableSurface:
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else size
        return ops["sum_to"](self, shape=shape)

    def slice_scatter(
        input: VariableSurface,
        src: VariableSurface,
        dim: int = 0,
        start: int | None = None,
        end: int | None = None,
        step: int = 1,
    ) -> VariableSurface:
        """A copy of input with src written into input[..., start:end:step, ...] (at `dim`)."""
        key = (EVERY,) * _dim(input, dim) + (slice(start, end, step),)
        return ops["setitem"](input, src, key)

    def select_scatter(input: VariableSurface, src: VariableSurface, dim: int, index: int) -> VariableSurface:
        return ops["setitem"](input, src, (EVERY,) * _dim(input, dim) + (index,))

    def diagonal_scatter(
        input: VariableSurface, src: VariableSurface, offset: int = 0, dim1: int = 0, dim2: int = 1
    ) -> VariableSurface:
        """A copy of input with src written into input.diagonal(offset, dim1, dim2)."""
        moved = ops["movedim"](input, (_dim(input, dim1), _dim(input, dim2)), (-2, -1))
        rows, columns = moved.shape[-2:]
        length = max(0, min(rows + min(offset, 0), columns - max(offset, 0)))
        at = (numpy.arange(length) - min(offset, 0), numpy.arange(length) + max(offset, 0))
        out = ops["setitem"](moved, src, (EVERY,) * (input.ndim - 2) + at)
        return ops["movedim"](out, (-2, -1), (_dim(input, dim1), _dim(input, dim2)))

    def bincount(input: VariableSurface, weights: VariableSurface | None = None, minlength: int = 0) -> VariableSurface:
        """How often each value 0..max occurs (weighted: the sum of its weights)."""
        values = numpy.asarray(input.tolist(), dtype=numpy.int64)
        if values.ndim != 1 or (values < 0).any():
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        size = max(int(values.max()) + 1 if values.size else 0, minlength)
        if weights is None:
            return make.tensor(numpy.bincount(values, minlength=size))
        dtype = weights.dtype if numpy.dtype(weights.dtype).kind == "f" else numpy.float64
        return make.zeros(size, dtype=dtype).index_add(0, input, cast(weights, dtype=numpy.dtype(dtype).name))

    def get_device(self: VariableSurface) -> int:
        return -1 if self.device.type == "cpu" else 0

    def data_ptr(self: VariableSurface) -> int:
        array = self.data
        return array.data.ptr if hasattr(array.data, "ptr") else array.__array_interface__["data"][0]

    def pin_memory(self: VariableSurface, device: Any = None) -> VariableSurface:
        if self.device.type == "cpu":
            raise RuntimeError("Cannot access accelerator device when none is available.")
        return self.clone()

    def apply_(self: VariableSurface, callable: Any) -> VariableSurface:
        """PyTorch's apply_: a Python callable applied to each element, in place (no gradient)."""
        return _apply(self, callable, (), "apply_")

    def map_(self: VariableSurface, tensor: VariableSurface, callable: Any) -> VariableSurface:
        """PyTorch's map_: callable(a, b) of each element and tensor's (broadcast), in place (no gradient)."""
        return _apply(self, callable, (tensor,), "map_")

    def _apply(self, callable, others, name):
        if self.requires_grad:
            raise RuntimeError(
                f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() instead."
            )
        arrays = numpy.broadcast_arrays(numpy.asarray(self.tolist()), *(numpy.asarray(o.tolist()) for o in others))
        values = [callable(*items) for items in zip(*(a.ravel().tolist() for a in arrays))]
        self.copy_(make.tensor(numpy.asarray(values).reshape(self.shape), dtype=self.dtype))
        return self

    def _answer(name, value):
        def fn(self: VariableSurface, *args: Any) -> bool:
            return value

        fn.__name__ = fn.__qualname__ = name
        return fn

    def is_signed(self: VariableSurface) -> bool:
        return numpy.dtype(self.dtype) not in (numpy.uint8, numpy.bool_)

    def is_inference(self: VariableSurface) -> bool:
        """Made in inference mode (by a factory or an op), or a view of such, as PyTorch's inference tensors."""
        base = self._base
        return getattr(self, "_inference", False) or base is not None and getattr(base, "_inference", False)

    def is_same_size(self: VariableSurface, other: VariableSurface) -> bool:
        return tuple(self.shape) == tuple(other.shape)

    def is_cpu(self: VariableSurface) -> bool:
        return self.device.type == "cpu"

    def isreal(input: VariableSurface) -> VariableSurface:
        """True everywhere (a real tensor)."""
        return make.ones_like(input, dtype="bool")

    def identity(self: VariableSurface) -> VariableSurface:
        return self

    def is_nonzero(self: VariableSurface) -> bool:
        if self.numel() != 1:
            more = "no values" if self.numel() == 0 else "more than one value"
            raise RuntimeError(f"Boolean value of Tensor with {more} is ambiguous")
        return bool(self.item())

    out: dict[str, Any] = {
        f.__name__: f for f in (positive, signbit, copysign, ldexp, float_power, fmax, fmin, gcd, lcm, addcmul)
    }
    out.update(
        {
            f.__name__: f
            for f in (addcdiv, erfc, logit, sinc, hardshrink, prelu, mvlgamma, renorm, aminmax, msort, diagflat)
        }
    )
    out.update({f.__name__: f for f in (vdot, cov, corrcoef, split_with_sizes, sum_to_size, slice_scatter, gradient)})
    out.update(
        {
            f.__name__: f
            for f in (select_scatter, diagonal_scatter, bincount, get_device, data_ptr, pin_memory, is_nonzero)
        }
    )
    out.update(var_mean=_spread("var", True), std_mean=_spread("std", True))
    out.update(var=_spread("var"), std=_spread("std"), sgn=ops["sign"], fix=ops["trunc"], conj=identity)
    out.update(resolve_conj=identity, resolve_neg=identity, apply_=apply_, map_=map_)
    out.update(
        hsplit=_split_along("hsplit", 0, 1), vsplit=_split_along("vsplit", 0, 2), dsplit=_split_along("dsplit", 2, 3)
    )
    out.update({f.__name__: f for f in (is_signed, is_inference, is_same_size, isreal)})
    out.update({name: _answer(name, False) for name in ("is_complex", "is_conj", "is_neg", "is_pinned")})
    out.update(is_cpu=property(is_cpu))
    return out
