"""Constructors in PyTorch's spelling (float32 by default).

`Constructors` is parameterised by the Variable class and the function that turns data into
that class's arrays, so the engine (arrays on the active backend) and the client (host NumPy
arrays) share one implementation; `engine.surface.install` makes one per side. Random draws come from NumPy on the host, so the same seed
gives the same values in both.
"""

from __future__ import annotations

import numpy

from engine import backend

DEFAULT_DTYPE = "float32"
NAMES = ("tensor", "zeros", "ones", "full", "randn", "rand", "arange", "zeros_like", "ones_like", "manual_seed")


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


class Constructors:
    def __init__(self, variable, to_array):
        self.variable = variable
        self.to_array = to_array
        self.rng = numpy.random.default_rng()

    def manual_seed(self, seed: int) -> None:
        self.rng = numpy.random.default_rng(seed)
        if backend.xp is not numpy:  # pragma: no cover
            backend.xp.random.seed(seed)

    def names(self) -> dict:
        """The package-level constructor functions."""
        return {name: getattr(self, name) for name in NAMES}

    def _make(self, array, dtype, requires_grad):
        return self.variable(self.to_array(array.astype(dtype or DEFAULT_DTYPE, copy=False)), requires_grad=requires_grad)

    def tensor(self, data, dtype=None, requires_grad=False):
        return self.variable(self.to_array(data, dtype), requires_grad=requires_grad)

    def zeros(self, *size, dtype=None, requires_grad=False):
        return self._make(numpy.zeros(_size(size)), dtype, requires_grad)

    def ones(self, *size, dtype=None, requires_grad=False):
        return self._make(numpy.ones(_size(size)), dtype, requires_grad)

    def full(self, size, fill_value, dtype=None, requires_grad=False):
        return self._make(numpy.full(_size((size,)), fill_value), dtype, requires_grad)

    def randn(self, *size, dtype=None, requires_grad=False):
        return self._make(self.rng.standard_normal(_size(size)), dtype, requires_grad)

    def rand(self, *size, dtype=None, requires_grad=False):
        return self._make(self.rng.random(_size(size)), dtype, requires_grad)

    def arange(self, start, end=None, step=1, dtype=None, requires_grad=False):
        values = numpy.arange(start, end, step) if end is not None else numpy.arange(start)
        return self.variable(self.to_array(values if dtype is None else values.astype(dtype)), requires_grad=requires_grad)

    def zeros_like(self, v, dtype=None, requires_grad=False):
        return self._make(numpy.zeros(v.shape), dtype or v.dtype, requires_grad)

    def ones_like(self, v, dtype=None, requires_grad=False):
        return self._make(numpy.ones(v.shape), dtype or v.dtype, requires_grad)
