"""Attribute kinds of the op registry: checking and normalising attribute values.

One checker per kind serves the engine's Python calls and the graph validator alike, so a
bad attribute is described the same way wherever it comes from.
"""

from __future__ import annotations

import math
import operator
import reprlib
from dataclasses import dataclass

REQUIRED = object()
INT64 = (-(2**63), 2**63 - 1)
MAX_DIMS = 64  # NumPy's limit on the number of dimensions
DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")


_SHOWN = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOWN.maxlevel, _SHOWN.maxdict, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxset = 3, 6, 8, 8, 6
_SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 80, 40, 80


def shown(value) -> str:
    """A bounded repr of a value that came from outside, for an error message: a hostile value
    (a megabyte string, lists nested a thousand deep) is shortened, never echoed whole or recursed into."""
    return _SHOWN.repr(value)


class AttrError(ValueError):
    """An attribute value that its kind does not accept."""


@dataclass(frozen=True)
class Attr:
    kind: str
    default: object = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> dict:
        out = {"kind": self.kind, "required": self.required}
        if not self.required:
            out["default"] = self.default
        if self.doc:
            out["doc"] = self.doc
        return out


def _int(value, name):
    if isinstance(value, bool):
        raise AttrError(f"attribute {shown(name)} must be an integer, got a boolean")
    try:
        number = operator.index(value)
    except TypeError:
        raise AttrError(f"attribute {shown(name)} must be an integer, got {shown(value)}") from None
    if not INT64[0] <= number <= INT64[1]:
        raise AttrError(f"attribute {shown(name)}: {number} is out of the 64-bit integer range")
    return number


def _float(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value.item())  # numpy / cupy scalars and 0-d arrays
        except Exception:  # noqa: BLE001
            raise AttrError(f"attribute {shown(name)} must be a number, got {shown(value)}") from None
    return float(value)


def _ints(value, name):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise AttrError(f"attribute {shown(name)} must be a list of integers, got {shown(value)}")
    return tuple(_int(v, name) for v in value)


def _shape(value, name):
    shape = _ints(value, name)
    if len(shape) > MAX_DIMS:
        raise AttrError(f"attribute {shown(name)} has {len(shape)} dimensions, over the limit of {MAX_DIMS}")
    if any(d < -1 for d in shape):
        raise AttrError(f"attribute {shown(name)} has a negative size: {list(shape)}")
    return shape


def _dims(value, name):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return _ints(value, name)
    return _int(value, name)


def _optional_float(value, name):
    return None if value is None else _float(value, name)


def _optional_int(value, name):
    return None if value is None else _int(value, name)


def _bool(value, name):
    if not isinstance(value, bool):
        raise AttrError(f"attribute {shown(name)} must be true or false, got {shown(value)}")
    return value


def _dtype(value, name):
    text = str(getattr(value, "name", value))
    if text not in DTYPES:
        raise AttrError(f"attribute {shown(name)} must be one of {', '.join(DTYPES)}, got {shown(value)}")
    return text


def _p_norm(value, name):
    p = 2.0 if isinstance(value, str) and value == "fro" else _float(value, name)  # (torch.norm's p="fro")
    if not (p > 0) or math.isnan(p):
        raise AttrError(f"attribute {shown(name)} must be a positive number or inf, got {shown(value)}")
    return p


def _sizes(value, name, least):
    """An int, or a non-empty list of ints, each at least `least` (a window's extent per spatial dimension)."""
    if isinstance(value, (list, tuple)):
        if not value or len(value) > MAX_DIMS:
            raise AttrError(f"attribute {shown(name)} must list 1 to {MAX_DIMS} integers, got {shown(value)}")
        numbers = tuple(_int(v, name) for v in value)
    else:
        numbers = (_int(value, name),)
    if any(n < least for n in numbers):
        what = "positive" if least == 1 else "non-negative"
        raise AttrError(f"attribute {shown(name)} must be {what}, got {shown(value)}")
    return numbers if isinstance(value, (list, tuple)) else numbers[0]


def _window(value, name):
    return _sizes(value, name, 1)


def _optional_window(value, name):
    return None if value is None or (isinstance(value, (list, tuple)) and not value) else _sizes(value, name, 1)


def _padding(value, name):
    return _sizes(value, name, 0)


PADDING_WORDS = ("same", "valid")


def _conv_padding(value, name):
    if isinstance(value, str):
        if value not in PADDING_WORDS:
            raise AttrError(f"attribute {shown(name)} must be 'same', 'valid' or integers, got {shown(value)}")
        return value
    return _sizes(value, name, 0)


def _in_range(value) -> bool:
    return INT64[0] <= value <= INT64[1]


def _index(spec, name="index"):
    if not isinstance(spec, (list, tuple)):
        raise AttrError(f"attribute {shown(name)} must be a list of index items, got {shown(spec)}")
    out = []
    for item in spec:
        if item is None or item == "...":
            out.append(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not _in_range(item):
                raise AttrError(f"attribute {shown(name)}: index {item} is out of the 64-bit integer range")
            out.append(item)
        elif isinstance(item, dict) and set(item) == {"slice"}:
            bounds = item["slice"]
            if (
                not isinstance(bounds, (list, tuple))
                or len(bounds) != 3
                or not all(b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds)
            ):
                raise AttrError(
                    f"attribute {shown(name)}: a slice is [start, stop, step] of integers or null, got {shown(bounds)}"
                )
            if not all(b is None or _in_range(b) for b in bounds):
                raise AttrError(
                    f"attribute {shown(name)}: a slice bound is out of the 64-bit integer range: {shown(bounds)}"
                )
            if bounds[2] == 0:
                raise AttrError(f"attribute {shown(name)}: slice step cannot be zero")
            out.append({"slice": list(bounds)})
        elif (
            isinstance(item, dict)
            and set(item) == {"tensor"}
            and isinstance(item["tensor"], int)
            and not isinstance(item["tensor"], bool)
            and item["tensor"] >= 0
        ):
            out.append({"tensor": item["tensor"]})
        else:
            raise AttrError(f"attribute {shown(name)}: unsupported index item {shown(item)}")
    return tuple(out)


def _equation(value, name):
    if not isinstance(value, str) or len(value) > 256 or not set(value) <= EQUATION_CHARACTERS:
        raise AttrError(
            f"attribute {shown(name)} must be an einsum equation (letters , . - > space), got {shown(value)}"
        )
    return value


FFT_NORMS = ("backward", "ortho", "forward")


def _fft_norm(value, name):
    if value not in FFT_NORMS:
        raise AttrError(f"attribute {shown(name)} must be 'backward', 'ortho' or 'forward', got {shown(value)}")
    return value


EQUATION_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.-> ")
CHECKERS = {
    "int": _int,
    "int?": _optional_int,
    "float": _float,
    "float?": _optional_float,
    "bool": _bool,
    "ints": _ints,
    "shape": _shape,
    "dims": _dims,
    "dtype": _dtype,
    "p": _p_norm,
    "index": _index,
    "window": _window,
    "window?": _optional_window,
    "padding": _padding,
    "conv_padding": _conv_padding,
    "equation": _equation,
    "fft_norm": _fft_norm,
}


def check(kind: str, value, name: str):
    return CHECKERS[kind](value, name)
