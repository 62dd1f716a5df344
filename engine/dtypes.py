"""PyTorch's dtype constants (`torch.float32`, `torch.float`, `torch.long`...), as the NumPy
dtypes that Variables report, so `x.dtype == torch.float32`, `dtype=torch.float` and
`x.to(torch.double)` all work on the engine and the client alike."""

from __future__ import annotations

import numpy

DEFAULT = numpy.dtype("float32")

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
CONSTANTS = {name: numpy.dtype(dtype) for name, dtype in DTYPES.items()}


def get_default_dtype() -> numpy.dtype:
    """The dtype of floating constructors and Python floats (float32; not settable here)."""
    return DEFAULT


def is_floating_point(v) -> bool:
    return v.dtype.kind == "f"


def names() -> dict:
    """The module-level names: the constants, `get_default_dtype`, `is_floating_point`."""
    return {**CONSTANTS, "get_default_dtype": get_default_dtype, "is_floating_point": is_floating_point}
