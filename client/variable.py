"""The client's `Variable`: how it stores its value (its methods are `engine.surface`'s, installed by `client.ops`).

A Variable is either a *data leaf* (a host NumPy array: what you construct, what `.grad` holds)
or a handle on a recorded `Value` (computed by the service when first needed, then cached).
A leaf's array is copy-on-write once a recorded op reads it: `w.data -= lr * w.grad.data` after
recording `w @ x` does not change the value `w @ x` will be computed from (as in the engine,
which computed it at once).
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any

import numpy

from client.graph import CUT, LEAF, Value
from client.residents import WATCHED, touched
from client.state import INFERENCE, current_phase, current_session, enable_grad, mode, no_grad
from client.views import assign_recorded as assign_views
from client.views import bump, written_through
from engine import api, backend
from engine.api import Device, DType, VariableSurface, dtype_of, from_key, host_array, same_array, tensor_data, to_key
from engine.api import Variable as EngineVariable
from engine.api import alias as sharing_version

_COMPUTES_ON: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> the device its server reports
# data leaves whose array the caller shares (numpy(), from_numpy()): an in-place update is written into it at once,
# as PyTorch's Tensors tutorial shows (`n = t.numpy(); t.add_(1)` changes n), and a recorded op gets the copy
LENT: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> Variable (== is elementwise)


def as_host_array(data, dtype=None) -> numpy.ndarray:
    """A host NumPy array from a Variable (client or engine), array, list or scalar (`host_array`'s rules)."""
    if isinstance(data, (Variable, EngineVariable)):
        data = data.data
    if backend.is_array(data):
        data = backend.to_numpy(data)
    return host_array(data, dtype)


class Variable(VariableSurface):
    """A node value in a define-by-run graph, with PyTorch's Variable semantics, computed remotely.
    `_requires_grad` is a data leaf's flag; a handle's stays False (its Value's flag counts)."""

    __slots__ = (
        "__weakref__", "_data", "_requires_grad", "_shared", "_value", "_version", "_grad", "_inference", "_alias"
    )  # fmt: skip

    def _store(self, data):
        """`Variable(data)`'s storage (the constructor itself is engine.surface's)."""
        self._hold(as_host_array(data))

    @classmethod
    def _leaf(cls, array, shared=False, value=None):
        v = object.__new__(cls)
        v._hold(array, shared, value)
        return v

    def _hold(self, array, shared=False, value=None):
        self._data, self._value, self._shared, self._alias = array, value, shared, False
        self._grad, self._requires_grad, self._version = None, False, 0  # `_grad`: `.grad` (engine.surface)
        if INFERENCE and mode.state.inference:  # made in inference mode: `is_inference()` (the slot is unset otherwise)
            self._inference = True

    @classmethod
    def _lazy(cls, value):
        v = object.__new__(cls)
        v._hold(None, False, value)
        value.holder = weakref.ref(v)
        return v

    # --- graph plumbing --------------------------------------------------------------------
    def _graph_value(self) -> Value:
        """The Value this Variable stands for now (a leaf's is made, and cached, on demand)."""
        if self._data is None:
            return self._value
        v = self._value
        if self._alias and not self._requires_grad:  # it shares another Variable's array (`w.detach()`), which
            # may change in place before the record is computed: the record keeps the values of now, as PyTorch's
            return Value(LEAF, self._data.shape, self._data.dtype, array=self._data.copy(), requires_grad=False)
        if v is None or v.array is not self._data or v.requires_grad != self._requires_grad:
            v = self._value = Value(
                LEAF, self._data.shape, self._data.dtype, array=self._data, requires_grad=self._requires_grad, leaf=self
            )
        self._shared = True
        return v

    def _array(self) -> numpy.ndarray:
        """The value, fetched if needed (one /forward); not to be mutated."""
        if self._data is not None:
            return self._data
        value = self._value
        if value.array is None:
            current_session().fetch_values([value])
        return value.array

    @property
    def _node(self):
        return self._value.node if self._data is None else None

    @property
    def _has_value(self) -> bool:
        return self._data is not None or self._value.array is not None

    # --- storage ---------------------------------------------------------------------------
    @property
    def data(self) -> Any:
        if self._shared:  # recorded by some op: copy before the caller can mutate it, unless nothing holds the record
            if sys.getrefcount(self._value) > 2:  # this Variable's slot and the call's argument
                if LENT.get(id(self)) is self:
                    self._value.array, self._value = self._data.copy(), None
                else:
                    self._data, self._value = self._data.copy(), None
            self._shared = False
        data = tensor_data(self._data if self._data is not None else self._array(), type(self))
        if WATCHED:  # a resident parameter (client.residents): its array may be written through this
            touched(self)
        return data

    @data.setter
    def data(self, new: Any) -> None:
        array = as_host_array(new)
        if self._data is None and self._value.node is not None:
            raise RuntimeError(
                "assigning .data of a non-leaf Variable (one with a grad_fn) is not supported by the client; "
                "assign to a detach()ed copy instead"
            )
        if self._data is None or not same_array(array, self._data):
            self._data, self._value, self._shared = array, None, False
        if WATCHED:
            touched(self)

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad if self._data is not None else self._value.requires_grad

    if TYPE_CHECKING:  # the setter is engine.surface's (its checks, then _store_requires_grad), installed on import

        @requires_grad.setter
        def requires_grad(self, flag: bool) -> None: ...

    def _store_requires_grad(self, flag: bool):
        if flag and self._data is None:  # a computed value without grad_fn becomes a leaf: its value is needed
            self._data, self._value, self._shared = self._array(), None, True
        self._requires_grad = flag

    def detach(self) -> Variable:
        """A new leaf with this Variable's value and version counter, cut from the graph."""
        if self._data is not None:
            alias = Variable._leaf(self._data)
            alias._alias = True
            return sharing_version(self, alias)
        value = self._value
        if value.array is not None:
            return sharing_version(self, Variable._leaf(value.array, shared=True))
        return sharing_version(
            self, Variable._lazy(Value(CUT, value.shape, value.dtype, inputs=(value,), phase=current_phase()))
        )

    def detach_(self) -> Variable:
        if self._data is None and self._value.node is not None:
            detached = self.detach()
            self._data, self._value, self._shared = detached._data, detached._value, detached._shared
        self._requires_grad = False
        return self

    @property
    def shape(self) -> api.Size:
        return api.Size(self._data.shape if self._data is not None else self._value.shape)

    @property
    def dtype(self) -> DType:
        """The dtype, in PyTorch's spelling (`torch.float32`); it equals the array's NumPy dtype."""
        return dtype_of(self._data.dtype if self._data is not None else self._value.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> Device:
        """Where the session's executor computes (the client itself holds host arrays)."""
        return Device(self._computes_on())

    @staticmethod
    def _computes_on() -> str:
        """'cpu' or 'cuda': the engine's backend when embedded, the server's (its /info, asked once) when remote."""
        session = current_session()
        if session.embedded:
            return backend.device
        if session not in _COMPUTES_ON:
            _COMPUTES_ON[session] = session.info().get("backend", {}).get("device", "cpu")
        return _COMPUTES_ON[session]

    # --- in-place updates (the rules are engine.surface's __setitem__) -----------------
    def _snapshot(self) -> Variable:
        """A new handle on the current value (what an in-place op records as its input)."""
        snap = Variable._leaf(self._data) if self._data is not None else Variable._lazy(self._value)
        snap._requires_grad = self._requires_grad
        return snap

    _run: Any = None  # `run(op)(inputs, attrs)` records an op (installed by client.ops)

    def _assign_recorded(self, other: Variable, run=None):
        """Make this Variable stand for `other`'s value, and its views or base with it (client.views)."""
        retains = self.retains_grad  # (a retain_grad() moves on to the new version, as PyTorch's)
        if not assign_views(self, other, run or Variable._run):
            self._stand_for(other)
            self._version += 1
        if retains:
            self.retain_grad()

    def _stand_for(self, other: Variable):  # (`other` computed at once, embedded: its array)
        value = other._value
        self._data = None if value is not None else other._data
        self._value, self._requires_grad, self._shared = value, False, False
        if value is not None:
            value.holder = weakref.ref(self)

    def _assign_values(self, key, value, setitem):
        """Assignment outside autograd, written through to its view family as shared memory would be
        (`t[i][0][j] = 1` changes `t`: client.views.written_through)."""
        self._assign_own(key, value, setitem)
        written_through(self, setitem)

    def _assign_own(self, key, value, setitem):
        """Assignment outside autograd: into a leaf's array when every value is at hand, else
        recorded without grad (a value assigned into keeps its grad_fn, as in the engine). A leaf
        that requires grad stays a leaf holding its array: a value not computed yet is fetched
        first (one /forward), unless it is being traced; one that requires no grad records it
        (`w -= lr * g` in a tensor program costs no request)."""
        items = [value, *(key if isinstance(key, tuple) else (key,))]
        lazy = [i for i in items if isinstance(i, Variable) and not i._has_value]
        fetching = self._requires_grad or LENT.get(id(self)) is self
        if self._data is not None and (not lazy or fetching and all(i._value.phase is None for i in lazy)):
            if lazy:
                current_session().fetch(*lazy)
            spec, arrays = from_key(key, lambda item: numpy.asarray(_raw(item)))
            self.data[to_key(spec, arrays)] = _raw(value)
            bump(self)
            return
        node = self._node
        with no_grad() if node is None else enable_grad():  # keeping a grad_fn: recorded, not computed at once
            result = setitem(self._snapshot(), value, key)
        if node is not None:  # its gradient passes the assignment unchanged (`Builder` writes an `assignment`)
            result._value.node = node
        self._stand_for(result)
        bump(self)


def lend(surface: dict) -> None:
    """Make `Variable.numpy()` and `from_numpy()` (in `surface`, the module-level names) lend their arrays (`LENT`)."""
    numpy_of, from_numpy = Variable.numpy, surface["from_numpy"]

    def numpy(self, *, force=False):
        array = numpy_of(self, force=force)
        if self._data is not None:
            LENT[id(self)] = self
        return array

    def shared(array):
        v = from_numpy(array)
        LENT[id(v)] = v
        return v

    numpy.__doc__, shared.__doc__ = numpy_of.__doc__, from_numpy.__doc__
    Variable.numpy = numpy  # type: ignore[method-assign]  # (over the surface's)
    surface["from_numpy"] = shared


def _raw(value):
    return value._array() if isinstance(value, Variable) else value
