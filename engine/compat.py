"""PyTorch 0.3 spellings the seed tutorials use, shared by the engine and the client:
casts (`x.float()`, `x.long()`), typed constructors (`FloatTensor(2, 3)`, `Tensor([1, 2])`, `from_numpy(a)`), `x.type(FloatTensor)`
and `x.type()`, and the `volatile=` flag (accepted; it has no effect since
PyTorch 0.4, and none here: use `no_grad()`).

`spellings(constructors, cast)` makes them for `engine.surface` to install (on the engine's and
the client's Variable alike); `constructors` is the package's `engine.factory.Constructors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy

from engine.user_warnings import warn

if TYPE_CHECKING:
    from engine.surface_types import ArrayLike, VariableSurface

DTYPE_OF = {
    "FloatTensor": "float32",
    "DoubleTensor": "float64",
    "HalfTensor": "float16",
    "LongTensor": "int64",
    "IntTensor": "int32",
    "BoolTensor": "bool",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "ByteTensor": "uint8",
}
NAME_OF = {dtype: name for name, dtype in DTYPE_OF.items()}


def type_name(dtype) -> str:
    """PyTorch's legacy name of a tensor type ('torch.FloatTensor'): `x.type()`'s, and a hook error's."""
    name = numpy.dtype(dtype).name
    return "torch." + NAME_OF.get(name, name)


CAST_METHODS = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
}
VOLATILE_MESSAGE = "volatile was removed (PyTorch 0.4) and has no effect; use `with no_grad():` instead"


class TensorType:
    """A typed constructor, usable as a dtype: `FloatTensor(2, 3)` (zeros of that shape),
    `FloatTensor([[1, 2]])` (from data), `x.type(FloatTensor)` (a cast)."""

    def __init__(self, name: str, constructors, dtype=None):
        self.__name__ = self.__qualname__ = name
        self.dtype = dtype or DTYPE_OF[name]
        self._constructors = constructors

    def __instancecheck__(self, obj) -> bool:
        """`isinstance(x, torch.Tensor)`: any Variable; `isinstance(x, torch.FloatTensor)`: a float32 one."""
        return isinstance(obj, self._constructors.variable) and (
            self.__name__ == "Tensor" or numpy.dtype(obj.dtype).name == self.dtype
        )

    def __call__(self, *args):
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return self._constructors.zeros(*(args or (0,)), dtype=self.dtype)  # (`torch.Tensor()`: empty, 1-d)
        if len(args) == 1:  # (of a tensor: sharing its memory, as PyTorch's)
            variable = isinstance(args[0], self._constructors.variable)
            return (self._constructors.as_tensor if variable else self._constructors.tensor)(args[0], dtype=self.dtype)
        raise TypeError(f"{self.__name__}() takes sizes or one sequence of values, got {args!r}")

    def __repr__(self):
        return f"<tensor type {self.__name__} ({self.dtype})>"


def dtype_of(kind) -> str:
    """The dtype name of a TensorType, 'torch.FloatTensor' / 'FloatTensor', or a NumPy dtype (name)."""
    if isinstance(kind, TensorType):
        return kind.dtype
    if isinstance(kind, str):
        name = kind.rsplit(".", 1)[-1]
        if name in DTYPE_OF:
            return DTYPE_OF[name]
    try:
        return numpy.dtype(kind).name
    except TypeError:
        raise TypeError(f"unknown tensor type {kind!r}") from None


def converted(self, dtype: str, cast) -> VariableSurface:
    """`self` cast by `cast(v, dtype)`, or to int16, int8, uint8 (not its dtypes) here, wrapping, with no gradient."""
    if dtype in ("int16", "int8", "uint8"):
        return self.new_tensor(self.detach().numpy().astype(dtype), dtype=dtype)
    return cast(self, dtype)


def _cast_method(dtype, cast):
    def method(self) -> VariableSurface:
        if numpy.dtype(self.dtype).name == dtype:
            return self
        return converted(self, dtype, cast)

    method.__name__ = numpy.dtype(dtype).name
    method.__doc__ = f"This Variable as {numpy.dtype(dtype).name} (differentiable)."
    return method


def spellings(constructors, cast) -> tuple[dict, dict]:
    """(methods, module-level names): `type`, the casts (`float()`, `double()`...) and `volatile`
    (`uniform_` is `engine.sampling`'s); `Tensor`, `FloatTensor`, ..., `from_numpy`. `cast(v, dtype_name)` converts
    differentiably. `engine.surface.install` puts them on a Variable class and its package."""

    def type_(self, dtype: Any = None) -> Any:
        """`x.type()`: the tensor type's name ('torch.FloatTensor'); `x.type(T)`: x converted to T."""
        if dtype is None:
            return type_name(self.dtype)
        target = dtype_of(dtype)
        return self if numpy.dtype(self.dtype).name == target else converted(self, target, cast)

    def volatile(self) -> bool:
        return False

    methods = {name: _cast_method(dtype, cast) for name, dtype in CAST_METHODS.items()}
    methods.update(type=type_, volatile=property(volatile, doc=VOLATILE_MESSAGE))
    names: dict[str, Any] = {name: TensorType(name, constructors) for name in DTYPE_OF}
    names["Tensor"] = TensorType("Tensor", constructors, "float32")  # float32 values; any Variable is one

    def from_numpy(array: ArrayLike) -> VariableSurface:
        """A Variable sharing `array`'s memory (where the backend is NumPy), as PyTorch's."""
        return constructors.as_tensor(numpy.asarray(array))

    names["from_numpy"] = from_numpy
    return methods, names


def accept_volatile(kwargs: dict) -> None:
    """Drop a `volatile=` argument from a Variable() call, with PyTorch 0.4's warning."""
    if kwargs.pop("volatile", None) is not None:
        warn(VOLATILE_MESSAGE, UserWarning)
    if kwargs:
        raise TypeError(f"Variable() got unexpected keyword argument(s): {', '.join(sorted(kwargs))}")
