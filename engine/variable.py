"""`Variable`: an array of the active backend plus what autograd needs to know about it.

This file holds only what is the engine's own: how a Variable stores its value and graph
node. Its methods, operators and properties are declared once in `engine.surface` (shared
with the client's lazy Variable) and installed when `engine` is imported. It imports nothing
above the bottom of the engine.

The interface the surface relies on (the client's Variable has the same): `_store(data)`, `shape`, `dtype`,
`ndim`, `device`, `_computes_on()`, `requires_grad` (read), `_node`, `_array()` (the value), `_leaf(array)`, `_store_requires_grad`,
`_snapshot()`, `_assign_recorded(result, run)` and `_assign_values(key, value, setitem)` (in-place updates),
`data`, `detach()`, `detach_()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy

from engine import backend, views
from engine.devices import Device
from engine.dtypes import DType
from engine.dtypes import of as dtype_of
from engine.grad_mode import INFERENCE
from engine.grad_mode import state as grad_state
from engine.indexing import from_key, to_key
from engine.surface_types import Size, VariableSurface
from engine.tensor_data import TensorData, plain, same_array, tensor_data

NUMPY_OF_GRAD = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
SCALAR_OF_GRAD = (
    "Converting a tensor with requires_grad=True to a scalar may lead to unexpected behavior.\n"
    "Consider using tensor.detach() first."
)


def host_array(data, dtype=None) -> numpy.ndarray:
    """A NumPy array from an array, list or scalar, by PyTorch's rules: Python floats become
    float32 and Python ints int64; arrays (and NumPy scalars) keep their dtype."""
    if isinstance(data, numpy.ndarray):
        array = plain(data)
    else:
        try:
            array = numpy.asarray(data)
        except RuntimeError as error:  # a list of Variables that require grad: `torch.tensor` reads them all the same
            if str(error) != NUMPY_OF_GRAD:
                raise
            array = numpy.asarray(_values(data))
        if (
            dtype is None
            and array.dtype == numpy.float64
            and not isinstance(data, numpy.generic)
            and not _doubles(data)
        ):
            array = array.astype(numpy.float32)
    if dtype is not None and array.dtype != numpy.dtype(dtype):
        array = array.astype(dtype)
    return array


def _doubles(data) -> bool:
    """Whether lists hold a float64 NumPy scalar, array or Variable: PyTorch's `tensor([np.float64(1.0), 2.0])`
    promotes the items' dtypes, Python floats counting as float32."""
    if isinstance(data, (list, tuple)):
        if set(map(type, data)) <= _NUMBERS:  # (one pass in C: a list of a million Python floats costs ~10 ms)
            return False
        return any([_doubles(item) for item in data if type(item) not in _NUMBERS])
    return getattr(data, "dtype", None) == numpy.float64


_NUMBERS = {float, int, bool}


def _values(data):
    """`data` with each Variable in it (in nested lists and tuples) replaced by its values."""
    if isinstance(data, VariableSurface):
        return data.numpy(force=True)
    return [_values(item) for item in data] if isinstance(data, (list, tuple)) else data


def as_array(data, dtype=None):
    """An array of the active backend from a Variable, array, list or scalar (`host_array`'s rules)."""
    if isinstance(data, Variable):
        data = data._data
    if backend.is_array(data):
        array = backend.to_active(plain(data))
        if dtype is not None and array.dtype != numpy.dtype(dtype):
            array = array.astype(dtype)
        return array
    return backend.to_active(host_array(data, dtype))


CPU, CUDA = Device("cpu"), Device("cuda")
_new = object.__new__


class Variable(VariableSurface):
    """A node value in a define-by-run graph, with PyTorch's Variable semantics (computed now)."""

    __slots__ = ("_data", "_grad", "_node", "_requires_grad", "_version", "_inference", "__weakref__")

    def _store(self, data):
        """`Variable(data)`'s storage (the constructor itself is engine.surface's)."""
        self._data = as_array(data)
        self._grad = None  # `.grad` (engine.surface: a property that warns on a non-leaf, as PyTorch does)
        self._node = None
        self._version = 0
        self._requires_grad = False
        if (
            INFERENCE and grad_state.inference
        ):  # made in inference mode (`is_inference()`; unset otherwise), as apply_op's results
            self._inference = True

    @classmethod
    def _result(cls, data, node):
        v = _new(cls)  # (a global: `object.__new__` is a lookup on a type, which CPython 3.11 does not specialize)
        v._data = data
        v._grad = None
        v._node = node
        v._requires_grad = node is not None
        v._version = 0
        return v

    @classmethod
    def _leaf(cls, array):
        return cls._result(array, None)

    @property
    def data(self) -> Any:
        """The values, sharing this Variable's memory and outside autograd (as in PyTorch): a NumPy
        array with PyTorch-0.3 Tensor methods (`engine.tensor_data.TensorData`) on the CPU."""
        return tensor_data(self._data)

    @data.setter
    def data(self, value: Any) -> None:
        array = as_array(value)
        if not same_array(array, self._data):
            self._data = array

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    if TYPE_CHECKING:  # the setter is engine.surface's (its checks, then _store_requires_grad), installed on import

        @requires_grad.setter
        def requires_grad(self, flag: bool) -> None: ...

    def _store_requires_grad(self, flag: bool):
        self._requires_grad = flag

    def detach(self) -> Variable:
        """A new leaf sharing this Variable's data and version counter, cut from the graph."""
        return views.alias(self, Variable._result(self._data, None))

    def detach_(self) -> Variable:
        if views.base_of(self) is not None:
            raise RuntimeError(views.DETACH_VIEW)
        self._node = None
        self._requires_grad = False
        return self

    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    @property
    def dtype(self) -> DType:
        """The dtype, in PyTorch's spelling (`torch.float32`); it equals the array's NumPy dtype."""
        return dtype_of(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> Device:
        return CPU if isinstance(self._data, numpy.ndarray) else CUDA

    @staticmethod
    def _computes_on() -> str:
        """Where this side's ops run: the active backend's device ('cpu' or 'cuda')."""
        return backend.device

    def _array(self):
        return self._data

    # --- in-place updates (the rules are engine.surface's __setitem__) -----------------
    # a view, and a base of views, are written in place and share a version counter (engine.views)
    def _snapshot(self):
        snapshot = Variable._result(views.snapshot_data(self), self._node)
        snapshot._requires_grad = self._requires_grad
        return snapshot

    def _assign_recorded(self, result, run=None):
        kept = None if self._node is None else self._node.retained
        if not views.assign_recorded(self, result):
            self._data, self._node, self._requires_grad = result._data, result._node, True
            self._version += 1
        if kept is not None and kept.retains and kept() is self:  # (retain_grad moves to the new version, as PyTorch's)
            moved = self._node.retained = type(kept)(self)  # (a fresh Watch: the hooks stay with the old node)
            kept.retains, moved.retains = False, True

    def _assign_values(self, key, value, setitem=None):
        members = views.live(self)
        if members:
            views.check_unrecorded(self)
        spec, arrays = from_key(key, as_array)
        self._data[to_key(spec, arrays)] = value._data if isinstance(value, Variable) else value
        if members:
            views.bump(members)
        else:
            self._version += 1


TensorData.variable = Variable  # `.data`'s other Tensor methods are a Variable's
