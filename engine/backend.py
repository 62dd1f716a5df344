"""Array backends: NumPy on the CPU, CuPy on an NVIDIA GPU.

`GRADSERVE_DEVICE` (auto|cpu|cuda) picks the active backend at import; `use()` changes it.
Ops never pick a module themselves: they ask `array_module(array)` for the module of their inputs.
"""

from __future__ import annotations

import os
import weakref

import numpy

try:  # pragma: no cover - exercised only where CuPy is installed
    import cupy
except Exception:  # noqa: BLE001 - any import failure means "no CuPy"
    cupy = None

DEVICES = ("auto", "cpu", "cuda")


def gpu_available() -> bool:
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - a driver error means no usable GPU
        return False


def _resolve(device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if gpu_available() else "cpu"
    if device == "cuda" and not gpu_available():
        raise RuntimeError("device 'cuda' requested but CuPy is not installed or sees no GPU")
    return device


device: str = "cpu"
xp = numpy


def use(requested: str = "auto") -> str:
    """Select the active backend; returns the resolved device name ('cpu' or 'cuda')."""
    global device, xp
    device = _resolve(requested)
    xp = cupy if device == "cuda" else numpy
    return device


if cupy is None:

    def array_module(array):
        return numpy
else:  # pragma: no cover

    def array_module(array):
        return cupy.get_array_module(array)


def is_array(obj) -> bool:
    return isinstance(obj, numpy.ndarray) or (cupy is not None and isinstance(obj, cupy.ndarray))


def to_numpy(array) -> numpy.ndarray:
    """A host copy (or the array itself when it already lives on the host)."""
    if isinstance(array, numpy.ndarray):
        return array
    if cupy is not None and isinstance(array, cupy.ndarray):
        return cupy.asnumpy(array)
    return numpy.asarray(array)


def to_active(array):
    """Move an array to the active backend's device (no copy when it is already there)."""
    if xp is numpy:
        return array if type(array) is numpy.ndarray else to_numpy(array)
    return cupy.asarray(array)  # pragma: no cover


_HOSTS: dict = {}  # id(a device array `constant` made) -> (a weak reference to it, the host array it came from)


def constant(host: numpy.ndarray):
    """`to_active(host)` for a Python number's array (an op's operand); on a device the host array is remembered,
    so that a vjp branching on the number (`x ** 2`) reads it with `host_item`, not from the device."""
    if xp is numpy:
        return host if type(host) is numpy.ndarray else to_numpy(host)
    array = cupy.asarray(host)  # pragma: no cover
    key = id(array)
    _HOSTS[key] = (weakref.ref(array, lambda _: _HOSTS.pop(key, None)), host)
    return array


def host_item(array):
    """`array.item()`, without waiting for the device when `constant` made the array (PyTorch's scalar operands
    stay on the host: `pow_backward` reads its exponent there)."""
    known = _HOSTS.get(id(array)) if _HOSTS else None
    if known is not None and known[0]() is array:
        return known[1].item()
    return array.item()


def memory_in_use() -> int:
    """Bytes held by the backend's allocator (0 for NumPy, which has none of its own)."""
    if xp is numpy:
        return 0
    return int(cupy.get_default_memory_pool().used_bytes())  # pragma: no cover


use(os.environ.get("GRADSERVE_DEVICE", "auto"))
