"""PyTorch's dtypes (`torch.float32`, `torch.float`, `torch.long`...) and the default dtype.

A `DType` stands for one NumPy dtype and prints as PyTorch's (`torch.float32`), while it still
compares and hashes equal to the NumPy dtype (`x.dtype == numpy.float32`, dict keys) and NumPy takes
it wherever it takes a dtype (`numpy.dtype(d)`, `a.astype(d)`, `numpy.finfo(d)`: through its `dtype`
attribute). It answers NumPy's dtype attributes (`kind`, `name`, `itemsize`...) and PyTorch's
(`is_floating_point`, `is_signed`). `Variable.dtype` returns one on the engine and the client alike
(`engine.surface.install`); arrays keep their NumPy dtypes, so code below the surface (the wire
format, the ops) reads `array.dtype`.

`set_default_dtype(d)` sets the dtype of floating constructors (`zeros`, `randn`, `tensor([1.0])`...)
and of Python floats with no Variable beside them, as PyTorch's does; integer data stays int64.
"""

from __future__ import annotations

from typing import Any

import numpy

DTYPES = {
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "float16": "float16",
    "half": "float16",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "short": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}

# PyTorch's scalar type names, as its messages give them ("Got: Long")
SCALAR_NAMES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def scalar_name(dtype) -> str:
    """PyTorch's name of `dtype` in its messages: `Long` for int64."""
    return SCALAR_NAMES.get(numpy.dtype(dtype).name, str(dtype))


class DType:
    """One dtype in PyTorch's spelling over a NumPy dtype (see the module docstring)."""

    __slots__ = ("dtype", "kind", "name", "itemsize", "char", "str", "type", "is_floating_point", "is_signed")

    def __init__(self, dtype):
        dtype = numpy.dtype(dtype)
        self.dtype = dtype
        self.kind, self.name, self.itemsize, self.char, self.str, self.type = (
            dtype.kind,
            dtype.name,
            dtype.itemsize,
            dtype.char,
            dtype.str,
            dtype.type,
        )
        self.is_floating_point = dtype.kind == "f"
        self.is_signed = dtype.kind in "fic"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "dtype"), name)  # NumPy's other dtype attributes

    def __eq__(self, other):
        if isinstance(other, DType):
            return self.dtype == other.dtype
        if isinstance(other, str) and other.startswith("torch."):
            other = DTYPES.get(other[len("torch.") :], other)
        try:
            return self.dtype == numpy.dtype(other)
        except TypeError:
            return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        return hash(self.dtype)

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__

    def __reduce__(self):
        return (of, (self.name,))


_BY_NUMPY: dict = {}


def of(dtype) -> DType:
    """The DType of a NumPy dtype (or anything `numpy.dtype` accepts); one object per dtype."""
    found = _BY_NUMPY.get(dtype)
    if found is None:
        found = DType(dtype)
        _BY_NUMPY[dtype] = _BY_NUMPY[found.dtype] = found
    return found


CONSTANTS = {name: of(dtype) for name, dtype in DTYPES.items()}
_default = [CONSTANTS["float32"]]


def get_default_dtype() -> DType:
    """The dtype of floating constructors and of Python floats with no Variable beside them."""
    return _default[0]


def default() -> numpy.dtype:
    """The default dtype as a NumPy dtype (for the constructors)."""
    return _default[0].dtype


def set_default_dtype(d) -> None:
    """Set the default floating dtype (float16, float32 or float64), as PyTorch's does."""
    dtype = numpy.dtype(d)
    if dtype.kind != "f":
        raise TypeError(f"only floating-point types are supported as the default type (got {of(dtype)})")
    _default[0] = of(dtype)


def is_floating_point(v) -> bool:
    return v.dtype.kind == "f"


class FloatInfo:
    """`finfo`'s answer, as PyTorch's: Python floats `eps`, `max`, `min`, `tiny`..., `bits` and the dtype's name
    (NumPy's are scalars of the dtype)."""

    LIMITS = ("resolution", "min", "max", "eps", "smallest_normal", "tiny")

    def __init__(self, type=None):
        info = numpy.finfo(numpy.dtype(default() if type is None else type))
        self.bits, self.dtype = info.bits, info.dtype.name
        for name in self.LIMITS:
            setattr(self, name, float(getattr(info, name)))
        self.resolution = 10.0**-info.precision

    def __repr__(self):
        return f"finfo({', '.join(f'{name}={getattr(self, name):g}' for name in self.LIMITS)}, dtype={self.dtype})"


def finfo(type=None) -> Any:  # (a `FloatInfo`)
    """Machine limits of a floating dtype (the default one when None): `eps`, `max`, `min`, `tiny`, `bits`..."""
    return FloatInfo(type)


def iinfo(type) -> numpy.iinfo:
    """Machine limits of an integer dtype: `max`, `min`, `bits`."""
    return numpy.iinfo(numpy.dtype(type))


def names() -> dict:
    """The module-level names: the constants, the default dtype's getter and setter, `is_floating_point`,
    `finfo` and `iinfo`."""
    return {
        **CONSTANTS,
        "get_default_dtype": get_default_dtype,
        "set_default_dtype": set_default_dtype,
        "is_floating_point": is_floating_point,
        "finfo": finfo,
        "iinfo": iinfo,
    }
