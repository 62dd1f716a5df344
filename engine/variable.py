"""`Variable`: an array of the active backend plus what autograd needs to know about it.

Operators and most methods are installed from the op registry (`engine.registry`), so this
file holds only what is not an op: construction, attributes, conversion and in-place updates.
"""

from __future__ import annotations

import builtins

import numpy

from engine import backend
from engine.compat import accept_volatile
from engine.grad_mode import is_grad_enabled
from engine.tensor_data import plain, same_array, tensor_data

FLOAT_KINDS = ("f",)


def as_array(data, dtype=None):
    """An array of the active backend from a Variable, array, list or scalar.

    Python floats become float32 and Python ints int64, as in PyTorch; arrays keep their dtype.
    """
    if isinstance(data, Variable):
        data = data._data
    if backend.is_array(data):
        array = backend.to_active(plain(data))
    else:
        array = numpy.asarray(data)
        if dtype is None and array.dtype == numpy.float64 and not isinstance(data, (numpy.generic, numpy.ndarray)):
            array = array.astype(numpy.float32)
        array = backend.to_active(array)
    if dtype is not None and array.dtype != numpy.dtype(dtype):
        array = array.astype(dtype)
    return array


def format_variable(array, node, requires_grad, device="cpu") -> str:
    """PyTorch-style repr: the values, then dtype (when not a default one), device and grad_fn."""
    prefix = "Variable("
    body = numpy.array2string(array, separator=", ", prefix=prefix)
    extras = []
    if device != "cpu":
        extras.append(f"device='{device}'")
    if array.dtype not in (numpy.float32, numpy.int64, numpy.bool_):
        extras.append(f"dtype={array.dtype}")
    if node is not None:
        extras.append(f"grad_fn=<{node.name}>")
    elif requires_grad:
        extras.append("requires_grad=True")
    return prefix + body + "".join(", " + e for e in extras) + ")"


class Variable:
    """A node value in a define-by-run graph, with PyTorch's Variable semantics."""

    __slots__ = ("_data", "grad", "_node", "_requires_grad", "_version", "__weakref__")
    __array_ufunc__ = None  # make `ndarray <op> Variable` defer to Variable's reflected operators
    __hash__ = object.__hash__

    def __init__(self, data, requires_grad=False, **pytorch03):
        if pytorch03:
            accept_volatile(pytorch03)
        self._data = as_array(data)
        self.grad = None
        self._node = None
        self._version = 0
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _result(cls, data, node):
        v = object.__new__(cls)
        v._data = data
        v.grad = None
        v._node = node
        v._requires_grad = node is not None
        v._version = 0
        return v

    @property
    def data(self):
        """The values, sharing this Variable's memory and outside autograd (as in PyTorch): a NumPy
        array with PyTorch-0.3 Tensor methods (`engine.tensor_data.TensorData`) on the CPU."""
        return tensor_data(self._data)

    @data.setter
    def data(self, value):
        array = as_array(value)
        if not same_array(array, self._data):
            self._data = array

    # --- autograd attributes -------------------------------------------------------------
    @property
    def grad_fn(self):
        return self._node

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if self._node is not None:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach()."
            )
        if flag and self._data.dtype.kind not in FLOAT_KINDS:
            raise RuntimeError(
                f"only Variables of floating point dtype can require gradients (got {self._data.dtype})"
            )
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        from engine.autograd import backward

        backward([self], None if gradient is None else [gradient], retain_graph=retain_graph, create_graph=create_graph)

    def retain_grad(self):
        """Keep this non-leaf's gradient in `.grad` after backward (a no-op on leaves)."""
        if self._node is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on Variable that has requires_grad=False")
            return
        import weakref

        self._node.retained = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        node = self._node
        return node is not None and node.retained is not None and node.retained() is self

    def detach(self):
        """A new leaf sharing this Variable's data, cut from the graph."""
        return Variable._result(self._data, None)

    def detach_(self):
        self._node = None
        self._requires_grad = False
        return self

    # --- array attributes ----------------------------------------------------------------
    @property
    def shape(self):
        return tuple(self._data.shape)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> str:
        return "cpu" if isinstance(self._data, numpy.ndarray) else "cuda"

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d Variable")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d Variable")
        return (self[i] for i in range(self._data.shape[0]))

    # --- conversion ----------------------------------------------------------------------
    def item(self):
        if self._data.size != 1:
            raise ValueError(f"only one element Variables can be converted to Python scalars (this one has {self._data.size})")
        return self._data.item()

    def numpy(self) -> numpy.ndarray:
        return backend.to_numpy(self._data)

    def tolist(self):
        return backend.to_numpy(self._data).tolist()

    def __array__(self, dtype=None, copy=None):
        array = backend.to_numpy(self._data)
        return array if dtype is None else array.astype(dtype)

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError("Boolean value of a Variable with more than one value is ambiguous")
        return builtins.bool(self._data.item())

    def __float__(self):
        return builtins.float(self.item())

    def __int__(self):
        return builtins.int(self.item())

    def __index__(self):
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer Variables of a single element can be converted to an index")
        return builtins.int(self._data.item())

    def __format__(self, spec):
        if self._data.ndim == 0:
            return format(self._data.item(), spec)  # f"{loss:.4f}", as PyTorch formats a 0-d tensor
        return object.__format__(self, spec)

    def __repr__(self):
        return format_variable(backend.to_numpy(self._data), self._node, self._requires_grad, self.device)

    __str__ = __repr__

    # --- in-place updates ----------------------------------------------------------------
    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        # the rules of __setitem__: a leaf that requires grad refuses under grad mode, and a
        # Variable in a graph records the fill (its gradient is zero), as PyTorch does
        self[...] = value
        return self

    def __setitem__(self, key, value):
        """In-place assignment. Recorded in the graph as a `setitem` node when grad mode needs it."""
        from engine.ops.indexing import setitem

        value_var = value if isinstance(value, Variable) else None
        if is_grad_enabled():
            if self._node is None and self._requires_grad:
                raise RuntimeError(
                    "a leaf Variable that requires grad is being used in an in-place operation."
                )
            if self._requires_grad or (value_var is not None and value_var._requires_grad):
                snapshot = Variable._result(self._data, self._node)
                snapshot._requires_grad = self._requires_grad
                result = setitem(snapshot, value, key)
                self._data, self._node, self._requires_grad = result._data, result._node, True
                self._version += 1
                return
        from engine.indexing import from_key, to_key

        spec, arrays = from_key(key, lambda a: as_array(a))
        raw = value._data if value_var is not None else value
        self._data[to_key(spec, arrays)] = raw
        self._version += 1
