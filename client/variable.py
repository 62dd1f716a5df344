"""The client's `Variable`: the engine's Variable API over a lazily computed value.

A Variable is either a *data leaf* (a host NumPy array held here: what you construct, what
`.grad` holds) or a handle on a recorded `Value` (an op's result, computed by the service when
its value is first needed and then cached). Operators and most methods are installed from the
engine's op registry by `client.ops`; this file holds what is not an op.

Leaves' arrays are snapshotted copy-on-write: once a leaf has been used in a recorded op,
the next access to its `.data` copies the array first, so `w.data -= lr * w.grad.data` after
recording `w @ x` does not change the value that `w @ x` will be computed from (the engine
computes eagerly, so there the value was already fixed too).
"""

from __future__ import annotations

import builtins
import weakref

import numpy

from client.errors import TracingError
from client.grad_mode import current_phase, is_grad_enabled, no_grad
from client.graph import CUT, LEAF, Value
from engine.compat import accept_volatile
from engine.tensor_data import plain, same_array, tensor_data
from engine.variable import format_variable

FLOAT_KINDS = ("f",)


def as_host_array(data, dtype=None) -> numpy.ndarray:
    """A host NumPy array from a Variable, array, list or scalar (the engine's `as_array` rules:
    Python floats become float32 and Python ints int64; arrays keep their dtype)."""
    from engine.variable import Variable as EngineVariable

    if isinstance(data, Variable):
        data = data.data
    elif isinstance(data, EngineVariable):
        data = data.data
    if isinstance(data, numpy.ndarray):
        array = plain(data)
    elif hasattr(data, "__cuda_array_interface__") and hasattr(data, "get"):
        array = data.get()  # a CuPy array
    else:
        array = numpy.asarray(data)
        if dtype is None and array.dtype == numpy.float64 and not isinstance(data, (numpy.generic, numpy.ndarray)):
            array = array.astype(numpy.float32)
    if dtype is not None and array.dtype != numpy.dtype(dtype):
        array = array.astype(dtype)
    return array


def _session():
    from client.session import current_session

    return current_session()


class Variable:
    """A node value in a define-by-run graph, with PyTorch's Variable semantics, computed remotely."""

    __slots__ = ("_data", "_value", "grad", "_requires_grad", "_version", "_shared", "__weakref__")
    __array_ufunc__ = None  # make `ndarray <op> Variable` defer to Variable's reflected operators
    __hash__ = object.__hash__

    def __init__(self, data, requires_grad=False, **pytorch03):
        if pytorch03:
            accept_volatile(pytorch03)
        self._data = as_host_array(data)
        self._value = None
        self.grad = None
        self._requires_grad = False
        self._version = 0
        self._shared = False
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _leaf(cls, array, shared=False):
        v = object.__new__(cls)
        v._data = array
        v._value = None
        v.grad = None
        v._requires_grad = False
        v._version = 0
        v._shared = shared
        return v

    @classmethod
    def _lazy(cls, value):
        v = object.__new__(cls)
        v._data = None
        v._value = value
        v.grad = None
        v._requires_grad = False
        v._version = 0
        v._shared = False
        return v

    # --- graph plumbing --------------------------------------------------------------------
    def _graph_value(self) -> Value:
        """The Value this Variable stands for now (a leaf's is made, and cached, on demand)."""
        if self._data is None:
            return self._value
        v = self._value
        if v is None or v.array is not self._data or v.requires_grad != self._requires_grad:
            v = Value(LEAF, self._data.shape, self._data.dtype, array=self._data, requires_grad=self._requires_grad, leaf=self)
            self._value = v
        self._shared = True
        return v

    def _array(self) -> numpy.ndarray:
        """The value, fetched if needed (one /forward); not to be mutated."""
        if self._data is not None:
            return self._data
        value = self._value
        if value.array is None:
            _session().fetch_values([value])
        return value.array

    def _rebind(self, other: "Variable"):
        """Make this Variable stand for `other`'s value (in-place operations)."""
        self._data = None
        self._value = other._value
        self._requires_grad = False
        self._shared = False
        self._version += 1

    def _snapshot(self) -> "Variable":
        """A new handle on the current value (what an in-place op records as its input)."""
        if self._data is not None:
            snap = Variable._leaf(self._data)
            snap._requires_grad = self._requires_grad
            return snap
        return Variable._lazy(self._value)

    @property
    def _node(self):
        return self._value.node if self._data is None else None

    @property
    def _has_value(self) -> bool:
        return self._data is not None or self._value.array is not None

    # --- autograd attributes -------------------------------------------------------------
    @property
    def data(self):
        if self._data is not None:
            if self._shared:  # recorded by some op: copy before the caller can mutate it
                self._data = self._data.copy()
                self._shared = False
                self._value = None
            return tensor_data(self._data)
        return tensor_data(self._array())

    @data.setter
    def data(self, new):
        array = as_host_array(new)
        if self._data is not None:
            if not same_array(array, self._data):
                self._data = array
                self._value = None
                self._shared = False
            return
        if self._value.node is not None:
            raise RuntimeError(
                "assigning .data of a non-leaf Variable (one with a grad_fn) is not supported by the client; "
                "assign to a detach()ed copy instead")
        self._data, self._value, self._shared = array, None, False

    @property
    def grad_fn(self):
        return self._node

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def requires_grad(self) -> bool:
        if self._data is not None:
            return self._requires_grad
        return self._value.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self._node is not None:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach()."
            )
        if flag and self.dtype.kind not in FLOAT_KINDS:
            raise RuntimeError(
                f"only Variables of floating point dtype can require gradients (got {self.dtype})"
            )
        if self._data is None:
            if not flag:
                return
            # a computed value without grad_fn becomes a leaf of its own: its value is needed
            self._data = self._array()
            self._value = None
            self._shared = True
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        """Gradients of this Variable into every leaf's `.grad`: one /backward request."""
        from client.autograd import backward

        backward([self], None if gradient is None else [gradient], retain_graph=retain_graph, create_graph=create_graph)

    def retain_grad(self):
        """Keep this non-leaf's gradient in `.grad` after backward (a no-op on leaves)."""
        node = self._node
        if node is None:
            if not self.requires_grad:
                raise RuntimeError("can't retain_grad on Variable that has requires_grad=False")
            return
        node.retained = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        node = self._node
        return node is not None and node.retained is not None and node.retained() is self

    def detach(self):
        """A new leaf with this Variable's value, cut from the graph."""
        if self._data is not None:
            return Variable._leaf(self._data)
        value = self._value
        if value.array is not None:
            return Variable._leaf(value.array, shared=True)
        return Variable._lazy(Value(CUT, value.shape, value.dtype, inputs=(value,), phase=current_phase()))

    def detach_(self):
        if self._data is not None:
            self._requires_grad = False
        elif self._value.node is not None:
            detached = self.detach()
            self._value = detached._value
            if detached._data is not None:
                self._data, self._value, self._shared = detached._data, None, True
        return self

    # --- array attributes ----------------------------------------------------------------
    @property
    def shape(self):
        return tuple(self._data.shape) if self._data is not None else self._value.shape

    @property
    def dtype(self):
        return self._data.dtype if self._data is not None else self._value.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        return "cpu"  # the client holds host arrays; where the service computes is its business

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d Variable")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d Variable")
        return (self[i] for i in range(self.shape[0]))

    # --- conversion (these need the value: a lazy one is fetched) -------------------------
    def item(self):
        if self.numel() != 1:
            raise ValueError(f"only one element Variables can be converted to Python scalars (this one has {self.numel()})")
        return self._array().item()

    def numpy(self) -> numpy.ndarray:
        return plain(self.data)

    def tolist(self):
        return self._array().tolist()

    def __array__(self, dtype=None, copy=None):
        array = self.data
        return array if dtype is None else array.astype(dtype)

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of a Variable with more than one value is ambiguous")
        return builtins.bool(self._array().item())

    def __float__(self):
        return builtins.float(self.item())

    def __int__(self):
        return builtins.int(self.item())

    def __index__(self):
        if self.dtype.kind not in "iub" or self.numel() != 1:
            raise TypeError("only integer Variables of a single element can be converted to an index")
        return builtins.int(self._array().item())

    def __format__(self, spec):
        if len(self.shape) == 0:
            return format(self.item(), spec)  # f"{loss:.4f}", as PyTorch formats a 0-d tensor
        return object.__format__(self, spec)

    def __repr__(self):
        try:
            array = self._array()
        except TracingError:
            return f"Variable(<traced {list(self.shape)} {self.dtype}>)"
        return format_variable(array, self._node, self.requires_grad)

    __str__ = __repr__

    # --- in-place updates ----------------------------------------------------------------
    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        # the engine's rule: the rules of __setitem__ (a leaf that requires grad refuses under grad
        # mode; a Variable in a graph records the fill)
        self[...] = value
        return self

    def __setitem__(self, key, value):
        """In-place assignment, recorded as a `setitem` node when grad mode needs it (the engine's rules)."""
        from client.ops import setitem

        value_var = value if isinstance(value, Variable) else None
        if is_grad_enabled():
            if self.is_leaf and self.requires_grad:
                raise RuntimeError(
                    "a leaf Variable that requires grad is being used in an in-place operation."
                )
            if self.requires_grad or (value_var is not None and value_var.requires_grad):
                self._rebind(setitem(self._snapshot(), value, key))
                return
        items = [value, *(key if isinstance(key, tuple) else (key,))]
        if self._data is not None and not any(_symbolic(i) for i in items):
            lazy = [i for i in items if isinstance(i, Variable) and not i._has_value]
            if lazy:  # the engine assigns values: fetch the ones not computed yet (one /forward)
                _session().fetch(*lazy)
            from engine.indexing import from_key, to_key

            spec, arrays = from_key(key, _raw_index)
            self.data[to_key(spec, arrays)] = _raw(value)
            self._version += 1
            return
        old = self._value if self._data is None else None
        with no_grad():
            result = setitem(self._snapshot(), value, key)
        if old is not None and old.node is not None:
            # raw assignment keeps the grad_fn, as in the engine
            result._value.node, result._value.requires_grad = old.node, old.requires_grad
        self._rebind(result)


def _symbolic(value) -> bool:
    """A value being traced in a custom Function (it has no value to fetch)."""
    return isinstance(value, Variable) and value._data is None and value._value.phase is not None


def _raw(value):
    return value._array() if isinstance(value, Variable) else value


def _raw_index(item):
    return _raw(item) if isinstance(item, Variable) else numpy.asarray(item) if not isinstance(item, numpy.ndarray) else item
