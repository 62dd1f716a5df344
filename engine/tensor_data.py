"""`TensorData`: what `.data` hands out. A NumPy array (a view sharing the Variable's memory)
that also answers the `Tensor` methods PyTorch-0.3 programs call on `.data`:
`loss.data[0]`, `w.grad.data.zero_()`, `y.data.norm()`, `p.data.add_(-lr, p.grad.data)`, and the ones today's
tutorials still call on it: `p.data.add_(p.grad.data, alpha=-lr)`, `x.grad.data.sign()`, `.abs()`, `w.data.uniform_(-r, r)`,
`w.data.normal_(0, 0.02)`, `p.data.clamp_(-c, c)`, `x.data.cpu().numpy()`, and the examples' prediction
`output.data.max(1, keepdim=True)[1]` with `pred.eq(target.data.view_as(pred))`.

It is an `ndarray` subclass, so NumPy code keeps working on it; arrays stored inside Variables
are always plain `ndarray`s (`plain()` strips the subclass on the way in). Every other `Tensor` method
(`x.data.unsqueeze(0)`, `.float()`, `.t()`, `.masked_fill_(m, 0)`, `.topk(2)`) is the engine's, run on a
Variable sharing this memory; where NumPy has a method of the same name that PyTorch calls otherwise
(`size`, `view`, `repeat`, `transpose`, `flatten`, `sort`, `std`/`var`, `dim=`/`keepdim=`), the call
PyTorch's programs make means PyTorch's and the one NumPy's functions make means NumPy's.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any

import numpy

_MaxMin = namedtuple("_MaxMin", ["values", "indices"])  # (`return_types.max`: engine.surface_types.MaxMin is generic)


def _values(other):
    """`other`'s values when it is a Variable (whose `__array_ufunc__ = None` refuses NumPy's in-place operators)."""
    if isinstance(other, numpy.ndarray):
        return other
    return other.numpy() if hasattr(other, "_array") and hasattr(other, "requires_grad") else other


def _inplace(name):
    operator = getattr(numpy.ndarray, name)

    def method(self, other):
        return operator(self, _values(other))

    method.__name__ = name
    return method


class TensorData(numpy.ndarray):
    """A NumPy array with PyTorch-0.3 `Tensor` methods (in-place ones end in `_` and return self).

    As PyTorch's `.data`, it is outside autograd (`requires_grad` False, no `grad_fn`) and its
    in-place operators take Variables too: `p.data += -lr * p.grad` updates p's memory."""

    requires_grad = False
    grad = None
    grad_fn = None
    is_leaf = True

    __iadd__ = _inplace("__iadd__")
    __isub__ = _inplace("__isub__")
    __imul__ = _inplace("__imul__")
    __itruediv__ = _inplace("__itruediv__")
    __ifloordiv__ = _inplace("__ifloordiv__")
    __imod__ = _inplace("__imod__")
    __ipow__ = _inplace("__ipow__")

    def __getitem__(self, key):
        # PyTorch 0.3 had no 0-d tensors: a reduction gave shape (1,), so `loss.data[0]` read it
        if self.ndim == 0 and isinstance(key, int) and not isinstance(key, bool) and key in (0, -1):
            key = ()
        return super().__getitem__(key)

    def zero_(self):
        self[...] = 0
        return self

    def fill_(self, value):
        self[...] = value
        return self

    def copy_(self, source):
        self[...] = numpy.asarray(_values(source))
        return self

    def _update(self, ufunc, args, alpha=1):
        # PyTorch 0.3's two-argument form: `add_(value, other)` adds value * other
        other = _values(args[0]) if len(args) == 1 else args[0] * numpy.asarray(_values(args[1]))
        ufunc(self, other if alpha == 1 else alpha * numpy.asarray(other), out=self, casting="same_kind")
        return self

    def add_(self, *args, alpha=1):
        return self._update(numpy.add, args, alpha)

    def sub_(self, *args, alpha=1):
        return self._update(numpy.subtract, args, alpha)

    def mul_(self, other):
        return self._update(numpy.multiply, (other,))

    def div_(self, other):
        return self._update(numpy.true_divide, (other,))

    def clamp_(self, min=None, max=None):
        numpy.clip(self, min, max, out=self, casting="unsafe")
        return self

    owner: Any = None  # the client's Variable class for a client's `.data` (nn.init draws from its package)
    uniform_: Any  # `uniform_(a, b)` and `normal_(mean, std)`: engine.nn.init's, set on this class there
    normal_: Any

    def sign(self):
        return numpy.sign(self)

    def abs(self):  # saliency maps' `torch.max(x.grad.data.abs(), dim=1)`
        return numpy.abs(self)

    def max(self, dim=None, keepdim=False, **numpys):
        """PyTorch's: over `dim`, (values, indices) (`output.data.max(1, keepdim=True)[1]` is the prediction);
        without, the largest entry; NumPy's with its keywords (`axis=`, `out=`: NumPy's own functions call it so)."""
        return self._extreme(numpy.ndarray.max, numpy.argmax, dim, keepdim, numpys)

    def min(self, dim=None, keepdim=False, **numpys):
        return self._extreme(numpy.ndarray.min, numpy.argmin, dim, keepdim, numpys)

    def _extreme(self, values, indices, dim, keepdim, numpys):
        if numpys or dim is None:
            return values(self, **({} if dim is None else {"axis": dim}), **numpys)
        found = values(self, dim, keepdims=keepdim), indices(self, dim, keepdims=keepdim).view(TensorData)
        return _MaxMin(*found)

    def eq(self, other):  # `pred.eq(target.data.view_as(pred)).cpu().sum()` of the PyTorch-0.3 examples
        return numpy.equal(self, _values(other))

    def view_as(self, other):
        return self.reshape(other.shape)

    def norm(self, p=2):
        """The p-norm of all elements, as a Python float (PyTorch 0.3's `Tensor.norm()`)."""
        flat = numpy.asarray(self, dtype=numpy.float64).reshape(-1)
        return float(numpy.linalg.norm(flat, ord=p))

    def clone(self):
        return self.copy()

    def cpu(self):  # `loss.data.cpu().numpy()`: a `.data` TensorData is on the host already
        return self

    def __float__(self):  # PyTorch's float() of any one-element tensor (NumPy's: of a 0-d array only)
        return float(self.item())

    def __int__(self):
        return int(self.item())

    variable: Any = None  # engine.variable.Variable (set there: this module is below it)

    def __repr__(self):  # as PyTorch prints a `.data`: `tensor([1.5000, 2.0000])`
        return repr(TensorData.variable._leaf(_ndarray(self)))

    __str__ = __repr__

    def __getattr__(self, name):
        """A `Tensor` attribute NumPy's arrays lack: the engine's, of a Variable sharing this memory;
        a Variable it gives is a `.data` again, and an in-place method's, this one."""
        if name.startswith("_") or TensorData.variable is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        shared = TensorData.variable._leaf(_ndarray(self))
        found = getattr(shared, name)
        if not callable(found):
            return found

        @functools.wraps(found)
        def method(*args, **kwargs):
            return self._as_data(found(*map(plain, args), **{k: plain(v) for k, v in kwargs.items()}), shared)

        return method

    def _as_data(self, result, shared):
        if result is shared:  # in place; `requires_grad_()` gives the Variable that requires grad, as PyTorch's
            return shared if shared.requires_grad else self
        if isinstance(result, TensorData.variable):
            return tensor_data(result._array(), self.owner)
        if isinstance(result, tuple):  # (values, indices) and the like
            items = [self._as_data(r, shared) for r in result]
            return type(result)(*items) if hasattr(result, "_fields") else type(result)(items)
        return result

    @property
    def size(self):  # NumPy's element count, which `x.data.size(0)` and `x.data.size()` call as PyTorch's
        return _Size(self)

    def numpy(self, *, force: bool = False) -> numpy.ndarray:
        """The plain array (`force` is PyTorch's keyword: `.data` never requires grad, so it changes nothing)."""
        return _ndarray(self)


def _either(name, numpys):
    """The method `name` of NumPy and of PyTorch: NumPy's where `numpys(args, kwargs)` says the call is
    NumPy's (as its functions make it: `numpy.std(a)` passes `ddof=`), else PyTorch's."""
    numpy_method = getattr(numpy.ndarray, name)

    def method(self, *args, **kwargs):
        return numpy_method(self, *args, **kwargs) if numpys(args, kwargs) else self.__getattr__(name)(*args, **kwargs)

    method.__name__ = name
    return method


def _ints(args):
    return all(isinstance(d, int) for d in (args[0] if len(args) == 1 and isinstance(args[0], tuple) else args))


_CALLED_BY_NUMPY = {
    "view": lambda args, kwargs: bool(kwargs) or not args or not _ints(args),  # NumPy's `view(dtype)`
    "repeat": lambda args, kwargs: bool(kwargs),  # PyTorch's tiles (`numpy.repeat` passes `axis=`)
    "transpose": lambda args, kwargs: len(args) != 2 or not _ints(args),  # PyTorch's swaps two dims
    "flatten": lambda args, kwargs: "order" in kwargs or bool(args) and isinstance(args[0], str),
    "sort": lambda args, kwargs: bool({"axis", "kind", "order"} & kwargs.keys()),  # PyTorch's: (values, indices)
    "std": lambda args, kwargs: "ddof" in kwargs or "axis" in kwargs,  # PyTorch's unbiased by default
    "var": lambda args, kwargs: "ddof" in kwargs or "axis" in kwargs,
    **dict.fromkeys(  # `x.data.sum(dim=1)`
        ("sum", "mean", "prod", "argmax", "argmin", "cumsum", "all", "any"),
        lambda args, kwargs: not {"dim", "keepdim"} & kwargs.keys(),
    ),
}
for _name, _numpys in _CALLED_BY_NUMPY.items():
    setattr(TensorData, _name, _either(_name, _numpys))


class _Size(int):
    """NumPy's `size` (the element count) that PyTorch's `size()`/`size(dim)` also call."""

    def __new__(cls, data):
        size = super().__new__(cls, numpy.ndarray.size.__get__(data))
        size.data = data
        return size

    def __call__(self, *dim):
        return self.data.__getattr__("size")(*dim)


_ndarray = functools.partial(numpy.ndarray.view, type=numpy.ndarray)  # (not the `view` PyTorch's calls take)


def plain(array):
    """`array` without the `TensorData` (or any other ndarray subclass) wrapper."""
    if type(array) is not numpy.ndarray and isinstance(array, numpy.ndarray):
        return _ndarray(array)
    return array


def same_array(a, b) -> bool:
    """Whether two arrays are the same values in the same memory and layout (`x.data -= d`
    assigns back a view of the array it updated in place)."""
    if a is b:
        return True
    if not (isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray)):
        return False
    if a.shape != b.shape or a.strides != b.strides or a.dtype != b.dtype:
        return False
    return b.base is a or a.base is b or a.__array_interface__["data"] == b.__array_interface__["data"]


def tensor_data(array, owner=None):
    """The `.data` of a Variable (of class `owner`, when not the engine's) holding `array`: a TensorData view for
    NumPy, the array itself otherwise."""
    if type(array) is numpy.ndarray:
        data = array.view(TensorData)
        if owner is not None:
            data.owner = owner
        return data
    return array
