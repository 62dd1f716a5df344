"""`torch.save` and `torch.load`: pickle, with a Variable saved as its array, its class and `requires_grad`
(not its graph or `.grad`, as PyTorch saves a tensor). `load` is `weights_only` by default, as PyTorch 2.6+:
it rebuilds only containers, numbers, strings, NumPy arrays and Variables (engine or client, Parameters
included) and refuses any other global before calling it; `weights_only=False` unpickles anything (trusted
files only)."""

from __future__ import annotations

import collections
import io
import os
import pickle
from typing import Any

import numpy

from engine.surface_types import VariableSurface

_SAFE = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("numpy", "ndarray"): numpy.ndarray,
    ("numpy", "dtype"): numpy.dtype,
}
_NUMPY_REBUILDS = {("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct")}
_NUMPY_SCALARS = ("numpy._core.multiarray", "numpy.core.multiarray")


def rebuild(cls, array, requires_grad):
    """A saved Variable: a leaf of `cls` holding `array`."""
    return cls(array, requires_grad=requires_grad)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, VariableSurface):
            return rebuild, (type(obj), numpy.asarray(obj.detach().numpy()), bool(obj.requires_grad))
        return NotImplemented


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if (module, name) in _NUMPY_REBUILDS or (module in _NUMPY_SCALARS and name == "scalar"):
            return super().find_class(module, name)
        if (module, name) == (__name__, "rebuild"):
            return rebuild
        if module.split(".")[0] in ("engine", "client"):
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, VariableSurface):
                return found
        raise pickle.UnpicklingError(
            f"Weights only load failed: unsupported global {module}.{name} (load(..., weights_only=False) "
            "unpickles anything, for a file you trust)"
        )


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2, **_: Any) -> None:
    """Write `obj` to `f` (a path or a binary file)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as file:
            _Pickler(file, protocol=max(pickle_protocol, 4)).dump(obj)
    else:
        _Pickler(f, protocol=max(pickle_protocol, 4)).dump(obj)


def load(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: bool | None = None, **_: Any):
    """Read what `save` wrote from `f` (a path, a binary file or bytes in a BytesIO)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as file:
            return load(file, map_location, weights_only=weights_only)
    if isinstance(f, (bytes, bytearray)):
        f = io.BytesIO(f)
    if weights_only is False:
        return pickle.Unpickler(f).load()
    return _WeightsUnpickler(f).load()
