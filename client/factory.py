"""Constructors in PyTorch's spelling (float32 by default), as in `engine.factory`: host arrays,
made here (random numbers too: `manual_seed(s)` gives the same draws as `engine.manual_seed(s)`)."""

from __future__ import annotations

import numpy

from client.variable import Variable, as_host_array

DEFAULT_DTYPE = "float32"
_rng = numpy.random.default_rng()


def manual_seed(seed: int) -> None:
    global _rng
    _rng = numpy.random.default_rng(seed)


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _make(array, dtype, requires_grad):
    return Variable(array.astype(dtype or DEFAULT_DTYPE, copy=False), requires_grad=requires_grad)


def tensor(data, dtype=None, requires_grad=False):
    return Variable(as_host_array(data, dtype), requires_grad=requires_grad)


def zeros(*size, dtype=None, requires_grad=False):
    return _make(numpy.zeros(_size(size)), dtype, requires_grad)


def ones(*size, dtype=None, requires_grad=False):
    return _make(numpy.ones(_size(size)), dtype, requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False):
    return _make(numpy.full(_size((size,)), fill_value), dtype, requires_grad)


def randn(*size, dtype=None, requires_grad=False):
    return _make(_rng.standard_normal(_size(size)), dtype, requires_grad)


def rand(*size, dtype=None, requires_grad=False):
    return _make(_rng.random(_size(size)), dtype, requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    values = numpy.arange(start, end, step) if end is not None else numpy.arange(start)
    return Variable(values if dtype is None else values.astype(dtype), requires_grad=requires_grad)


def zeros_like(v, dtype=None, requires_grad=False):
    return _make(numpy.zeros(v.shape), dtype or v.dtype, requires_grad)


def ones_like(v, dtype=None, requires_grad=False):
    return _make(numpy.ones(v.shape), dtype or v.dtype, requires_grad)
