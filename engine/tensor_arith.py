"""PyTorch's arithmetic spellings whose arguments a registry op's attributes can't take: `div` with
`rounding_mode=` (the `div_rounded` op), `clamp`/`clip` with tensor bounds (composed of `where`, so each bound
gets the gradient where it binds, as PyTorch's), and `heaviside`. `engine.modern` adds them to the surface."""

from __future__ import annotations

import math
import numbers
from collections import namedtuple
from typing import TYPE_CHECKING, Any

import numpy

from engine.grad_fn_names import swap

if TYPE_CHECKING:
    from engine.surface_types import Operand, VariableSurface

ROUNDING_MODES = (None, "trunc", "floor")
FREXP = namedtuple("frexp", "mantissa exponent")  # type: ignore[name-match]


def swap_named(out, name: str):
    """`out`, its grad_fn (if any) named PyTorch's `name`."""
    if getattr(out, "grad_fn", None) is not None:
        swap(out.grad_fn, name)
    return out


def _is_tensor(bound) -> bool:
    return (
        bound is not None
        and type(bound) is not float
        and type(bound) is not int
        and not isinstance(bound, numbers.Number)
    )


def functions(ops) -> dict:
    """div, clamp and their PyTorch aliases, and heaviside, over `ops`, the side's op functions."""
    where = ops["where"]

    def div(input: Operand, other: Operand, *, rounding_mode: str | None = None) -> VariableSurface:
        """input / other: true division, or rounded down (`rounding_mode="floor"`) or toward zero ("trunc"), where
        integers stay integers and the gradient is zero (PyTorch's)."""
        if rounding_mode not in ROUNDING_MODES:
            raise RuntimeError(
                f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
            )
        if rounding_mode is None:
            return ops["div"](input, other)
        return ops["div_rounded"](input, other, floor=rounding_mode == "floor")

    def clamp(input: Operand, min: Any = None, max: Any = None) -> VariableSurface:
        """input limited to [min, max], each bound a number or a tensor (broadcast; NaN where a bound is NaN); the
        gradient goes to the input inside the bounds and to a tensor bound where it binds (PyTorch's)."""
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        if not (_is_tensor(min) or _is_tensor(max)):
            return ops["clamp"](input, min=min, max=max)
        if (min is not None and not _is_tensor(min)) or (max is not None and not _is_tensor(max)):
            raise TypeError(
                "clamp() received an invalid combination of arguments: min and max are both tensors or both numbers"
            )
        out: Any = input if min is None else where(ops["lt"](input, min), min, input)
        out = out if max is None else where(ops["gt"](out, max), max, out)
        for bound in (min, max):  # a NaN bound gives NaN, as PyTorch's max/min propagate it (no gradient)
            if bound is not None and numpy.dtype(bound.dtype).kind == "f":
                out = where(ops["ne"](bound, bound), math.nan, out)
        return out

    def clamp_min(input: Operand, min: Any) -> VariableSurface:
        return clamp(input, min=min)

    def clamp_max(input: Operand, max: Any) -> VariableSurface:
        return clamp(input, max=max)

    def heaviside(input: VariableSurface, values: VariableSurface) -> VariableSurface:
        """0 where input < 0, `values` where it is 0, 1 where it is > 0 (no gradient)."""
        if input.dtype != values.dtype:
            raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
        input, values = input.detach(), values.detach()
        above = ops["cast"](ops["gt"](input, 0), dtype=numpy.dtype(input.dtype).name)
        return where(ops["eq"](input, 0), values, above)

    def frexp(input: VariableSurface) -> tuple[VariableSurface, VariableSurface]:
        """(mantissa, exponent): input = mantissa * 2 ** exponent, |mantissa| in [0.5, 1); the mantissa's gradient
        is the input's divided by 2 ** exponent."""
        if numpy.dtype(input.dtype).kind != "f":
            raise RuntimeError("torch.frexp() only supports floating-point dtypes")
        exponent = numpy.frexp(input.detach().numpy())[1].astype(numpy.int32)
        one, half = numpy.ones((), input.dtype), -exponent // 2  # (2 ** -exponent in two factors: each is finite)
        scales = (input.new_tensor(numpy.ldexp(one, half)), input.new_tensor(numpy.ldexp(one, -exponent - half)))
        mantissa = swap_named(ops["mul"](ops["mul"](input, scales[0]), scales[1]), "FrexpBackward0")
        return FREXP(mantissa, input.new_tensor(exponent, dtype=numpy.int32))

    return {
        "frexp": frexp,
        "div": div,
        "divide": div,
        "clamp": clamp,
        "clip": clamp,
        "clamp_min": clamp_min,
        "clamp_max": clamp_max,
        "heaviside": heaviside,
    }
