"""A stand-in for CuPy on a machine without a GPU: NumPy's functions, with arrays of a NumPy subclass that count
every read of a value back to the host (`item`, `bool`, `float`, `int`, `tolist`) and every upload of a host array.
On a GPU each read is a device-to-host copy that waits for the queued kernels. Used by `test_gpu_syncs.py`, in a
subprocess whose PYTHONPATH puts this folder first, so the engine takes it for CuPy."""

import collections

import numpy
from numpy import *  # noqa: F403 - CuPy's NumPy-like namespace

COUNTS: collections.Counter = collections.Counter()


def _read(name):
    def method(self, *args):
        COUNTS["read"] += 1
        return getattr(numpy.ndarray, name)(self, *args)

    return method


class ndarray(numpy.ndarray):  # noqa: N801 - CuPy's name
    item, __bool__, __float__, __int__, tolist = map(_read, ("item", "__bool__", "__float__", "__int__", "tolist"))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [i.view(numpy.ndarray) if isinstance(i, ndarray) else i for i in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(numpy.ndarray) if isinstance(o, ndarray) else o for o in kwargs["out"])
        out = getattr(ufunc, method)(*plain, **kwargs)
        return numpy.asarray(out).view(ndarray) if isinstance(out, (numpy.ndarray, numpy.generic)) else out


def asarray(a, dtype=None, order=None):
    if isinstance(a, ndarray):
        return a if dtype is None else numpy.asarray(a, dtype).view(ndarray)
    COUNTS["upload"] += 1
    return numpy.array(a, dtype, order=order).view(ndarray)


def asnumpy(a):
    return numpy.array(a).view(numpy.ndarray)


def get_array_module(*arrays):
    import sys

    return sys.modules[__name__]


class _Device:
    def synchronize(self):
        pass


class cuda:  # noqa: N801 - CuPy's name
    Device = _Device

    class runtime:  # noqa: N801
        @staticmethod
        def getDeviceCount():  # noqa: N802
            return 1
