"""Constructors in PyTorch's spelling (float32 by default), each with `dtype=`, `device=` and
`requires_grad=` keywords, and sizes given as `zeros(2, 3)`, `zeros((2, 3))` or `zeros(size=(2, 3))`.

`Constructors` is parameterised by the Variable class, the function that turns data into that
class's arrays, and the side's `engine.devices.Placement`, so the engine (arrays on the active
backend) and the client (host NumPy arrays) share one implementation; `engine.surface.install`
makes one per side. Random draws come from the `generator=` given, else the side's default
`engine.random.Generator` (NumPy on the host), so the same seed gives the same values in both;
`engine.sampling` has the other random functions (`normal`, `randperm`, `multinomial`, `bernoulli`...).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import numpy
from numpy import ndarray

from engine import backend
from engine.compat import dtype_of
from engine.dtypes import default as default_dtype
from engine.random import Generator, bits_of
from engine.shapes import ShapeMismatch
from engine.user_warnings import warn

COPY_CONSTRUCT = (  # PyTorch's warning for `torch.tensor(t)` of a tensor
    "To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
    "sourceTensor.detach().clone().requires_grad_(True), rather than torch.tensor(sourceTensor)."
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.surface_types import ArrayLike, DeviceLike, DTypeLike, VariableSurface

NAMES = (
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "randn",
    "rand",
    "randint",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "manual_seed",
)


def _size(size, keywords=None):
    """The shape from `f(2, 3)`, `f((2, 3))` or `f(size=(2, 3))` (`keywords`: the call's other keywords)."""
    if keywords:
        unknown = set(keywords) - {"size"}
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        if size:
            raise TypeError("give the size either positionally or as size=, not both")
        size = (keywords["size"],)
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    if shape and min(shape) < 0:  # PyTorch's RuntimeError (a ValueError as NumPy's was)
        raise ShapeMismatch(f"Trying to create tensor with negative dimension {min(shape)}: {list(shape)}")
    return shape


def as_dtype(dtype):
    """A NumPy dtype from a dtype constant, a NumPy dtype (name) or a tensor type (None stays None)."""
    return None if dtype is None else numpy.dtype(dtype_of(dtype))


def _is_float(value) -> bool:
    return isinstance(value, float) or (isinstance(value, numpy.generic) and value.dtype.kind == "f")


def _python_floats(data) -> bool:
    """Whether `data` is Python floats (a float, or lists of numbers with a float in them), not an array."""
    if isinstance(data, (list, tuple, float)):
        return numpy.asarray(data).dtype == numpy.float64
    return False


BOUNDS_AND_STEP = "upper bound and lower bound inconsistent with step sign"


def _ragged(data) -> str | None:
    """PyTorch's words for nested sequences that are not a tensor's: lengths other than the first elements'."""
    shape, first = [], data
    while isinstance(first, (list, tuple)):
        shape.append(len(first))
        first = first[0] if first else None

    def walk(item, dim):
        if dim < len(shape) and isinstance(item, (list, tuple)):
            if len(item) != shape[dim]:
                return f"expected sequence of length {shape[dim]} at dim {dim} (got {len(item)})"
            return next(filter(None, (walk(x, dim + 1) for x in item)), None)
        return None

    return walk(data, 0)


class Constructors:
    def __init__(self, variable, to_array, placement):
        self.variable = variable
        self.to_array = to_array
        self.placement = placement
        self.default_generator = Generator()
        self.default_generator.seed()  # a fresh package starts from a non-deterministic seed, as PyTorch's

    def bits(self, generator: Generator | None = None) -> numpy.random.Generator:
        """The NumPy stream to draw from: `generator`'s, else the package's default generator's."""
        return bits_of(generator, self.default_generator)

    def manual_seed(self, seed: int) -> Generator:
        """Reseed the package's default generator (returned, as PyTorch's `torch.manual_seed`)."""
        self.default_generator.manual_seed(seed)
        if backend.xp is not numpy:  # pragma: no cover
            backend.xp.random.seed(self.default_generator.initial_seed())
        return self.default_generator

    def names(self) -> dict:
        """The package-level constructor functions."""
        return {name: getattr(self, name) for name in NAMES}

    def _new(self, array, dtype, device, requires_grad):
        """A Variable of `array` as `dtype` (a default when None), checked for `device`."""
        self.placement.check(device)
        if dtype is not None:
            array = array.astype(as_dtype(dtype), copy=False)
        return self.variable(self.to_array(array), requires_grad=requires_grad)

    def _floating(self, array, dtype, device, requires_grad):
        return self._new(array, default_dtype() if dtype is None else dtype, device, requires_grad)

    def tensor(
        self,
        data: ArrayLike,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """A copy of `data` (as PyTorch's: in-place updates of it leave `data` alone)."""
        if isinstance(data, numpy.ndarray):
            data = data.copy()
        elif isinstance(data, self.variable):
            warn(COPY_CONSTRUCT)
        try:
            return self._from(data, dtype, device, requires_grad)
        except ValueError as error:
            raise ValueError(_ragged(data) or str(error)) from None

    def as_tensor(
        self,
        data: ArrayLike,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """`data` itself when it is an array of the right dtype (sharing its memory), else a copy."""
        if isinstance(data, self.variable):  # (the tensor itself, its graph kept, as PyTorch's; `to` another dtype)
            return data if dtype is None and device is None else data.to(device=device, dtype=dtype)
        return self._from(data, dtype, device, requires_grad)

    def _from(self, data, dtype, device, requires_grad):
        self.placement.check(device)
        if dtype is None and default_dtype() != numpy.float32 and _python_floats(data):
            dtype = default_dtype()  # `tensor([1.0])` takes the default dtype (set_default_dtype), as in PyTorch
        return self.variable(self.to_array(data, as_dtype(dtype)), requires_grad=requires_grad)

    def zeros(
        self,
        *size: int | Sequence[int],
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        **keywords: Any,
    ) -> VariableSurface:
        return self._floating(numpy.zeros(_size(size, keywords)), dtype, device, requires_grad)

    def ones(
        self,
        *size: int | Sequence[int],
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        **keywords: Any,
    ) -> VariableSurface:
        return self._floating(numpy.ones(_size(size, keywords)), dtype, device, requires_grad)

    def empty(
        self,
        *size: int | Sequence[int],
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        **keywords: Any,
    ) -> VariableSurface:
        """Zeros (PyTorch leaves them uninitialised; a program must not read them before writing)."""
        return self._floating(numpy.zeros(_size(size, keywords)), dtype, device, requires_grad)

    def full(
        self,
        size: int | Sequence[int],
        fill_value: float,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        given: Any = fill_value  # (a 0-d Tensor is a Number to PyTorch's parser; an array is not)
        if not isinstance(given, numbers.Number) and (getattr(given, "ndim", None) != 0 or type(given) is ndarray):
            kind = type(given)
            named = "Tensor" if hasattr(given, "grad_fn") else "numpy." * (kind is ndarray) + kind.__name__
            raise TypeError(f"full(): argument 'fill_value' (position 2) must be Number, not {named}")
        if dtype is None and not _is_float(fill_value):
            dtype = numpy.asarray(fill_value).dtype  # full((2,), 3) is int64, full((2,), True) bool
        return self._floating(numpy.full(_size((size,)), fill_value), dtype, device, requires_grad)

    def randn(
        self,
        *size: int | Sequence[int],
        generator: Generator | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        **keywords: Any,
    ) -> VariableSurface:
        """Draws from N(0, 1) of shape `size`, from `generator` (else the package's default generator)."""
        values = self.bits(generator).standard_normal(_size(size, keywords))
        return self._floating(values, dtype, device, requires_grad)

    def rand(
        self,
        *size: int | Sequence[int],
        generator: Generator | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        **keywords: Any,
    ) -> VariableSurface:
        """Draws from U[0, 1) of shape `size`, from `generator` (else the package's default generator)."""
        return self._floating(self.bits(generator).random(_size(size, keywords)), dtype, device, requires_grad)

    def randint(
        self,
        low: int = 0,
        high: int | None = None,
        size: int | Sequence[int] | None = None,
        *,
        generator: Generator | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """`randint(high, size)` or `randint(low, high, size)` (also `size=`, `low=`, `high=`): integers in
        [low, high), int64 unless `dtype=` says otherwise, from `generator` (else the default generator)."""
        if size is None:  # randint(high, size)
            low, high, size = 0, low, high
        elif high is None:  # randint(high, size=...)
            low, high = 0, low
        if size is None or high is None:
            raise TypeError("randint() needs high and size: randint(high, size) or randint(low, high, size)")
        if low >= high:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        values = self.bits(generator).integers(low, high, _size((size,)))
        return self._new(values, numpy.int64 if dtype is None else dtype, device, requires_grad)

    def arange(
        self,
        start: float,
        end: float | None = None,
        step: float = 1,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        """int64 values from integer arguments, float32 when any is a float (as PyTorch infers)."""
        low, high = (0, start) if end is None else (start, end)
        if step == 0 or (high - low) * step < 0:  # PyTorch's refusals
            raise RuntimeError("step must be nonzero" if step == 0 else BOUNDS_AND_STEP)
        values = numpy.arange(low, high, step)
        if dtype is None:
            dtype = default_dtype() if any(_is_float(a) for a in (start, end, step)) else numpy.int64
        return self._new(values, dtype, device, requires_grad)

    def linspace(
        self,
        start: float,
        end: float,
        steps: int,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        return self._floating(numpy.linspace(start, end, steps), dtype, device, requires_grad)

    def eye(
        self,
        n: int,
        m: int | None = None,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
    ) -> VariableSurface:
        return self._floating(numpy.eye(n, m), dtype, device, requires_grad)

    def _like(self, v, values, dtype, device, requires_grad):
        return self._new(values, v.dtype if dtype is None else dtype, device, requires_grad)

    def zeros_like(
        self,
        v: VariableSurface,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, numpy.zeros(v.shape), dtype, device, requires_grad)

    def ones_like(
        self,
        v: VariableSurface,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, numpy.ones(v.shape), dtype, device, requires_grad)

    def empty_like(
        self,
        v: VariableSurface,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, numpy.zeros(v.shape), dtype, device, requires_grad)

    def full_like(
        self,
        v: VariableSurface,
        fill_value: float,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, numpy.full(v.shape, fill_value), dtype, device, requires_grad)

    def rand_like(
        self,
        v: VariableSurface,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, self.bits().random(v.shape), dtype, device, requires_grad)

    def randn_like(
        self,
        v: VariableSurface,
        dtype: DTypeLike | None = None,
        device: DeviceLike | None = None,
        requires_grad: bool = False,
        memory_format: Any = None,
    ) -> VariableSurface:
        return self._like(v, self.bits().standard_normal(v.shape), dtype, device, requires_grad)
