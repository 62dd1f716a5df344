"""Index specs: `x[...]` keys in a form that a graph can carry.

A spec is a tuple of items, each one of: an int, None (new axis), "..." (Ellipsis),
{"slice": [start, stop, step]}, or {"tensor": k} for the k-th index array, which travels as
an extra input of the node. This is also the graph format's spelling of the `index` attribute
(checked by `engine.attrs`).
"""

from __future__ import annotations

import operator

import numpy


def tensor_count(spec) -> int:
    return sum(1 for item in spec if isinstance(item, dict) and "tensor" in item)


def to_key(spec, arrays):
    """The Python/NumPy index a spec stands for, given its index arrays."""
    key = []
    for item in spec:
        if item == "...":
            key.append(Ellipsis)
        elif isinstance(item, dict):
            if "slice" in item:
                key.append(slice(*item["slice"]))
            else:
                key.append(arrays[item["tensor"]])
        else:
            key.append(item)
    return tuple(key)


REVERSED = slice(None, None, -1)  # `flip`'s own index: the one negative step `from_key` takes


def _is_index_array(obj) -> bool:
    return hasattr(obj, "dtype") and hasattr(obj, "shape")


def from_key(key, as_array):
    """Split a Python index into (spec, index arrays); `as_array` turns lists/arrays into Variables."""
    if not isinstance(key, tuple):
        key = (key,)
    spec, arrays = [], []
    for item in key:
        if item is Ellipsis:
            spec.append("...")
        elif item is None:
            spec.append(None)
        elif isinstance(item, slice):
            bounds = [None if b is None else operator.index(b) for b in (item.start, item.stop, item.step)]
            if bounds[2] is not None and bounds[2] < 0 and item is not REVERSED:  # PyTorch has no negative strides
                raise ValueError("step must be greater than zero")
            spec.append({"slice": bounds})
        elif isinstance(item, bool):
            spec.append({"tensor": len(arrays)})
            arrays.append(as_array(item))
        elif isinstance(item, int) or (hasattr(item, "__index__") and not _is_index_array(item)):
            spec.append(operator.index(item))
        elif _is_index_array(item) and getattr(item, "ndim", 1) == 0 and "int" in str(item.dtype):
            spec.append(int(item.item() if hasattr(item, "item") else item))
        elif isinstance(item, range):  # `x[range(n), y]`: the integers of the range, as PyTorch reads it
            spec.append({"tensor": len(arrays)})
            arrays.append(as_array(list(item)))
        elif isinstance(item, (list, tuple)) or _is_index_array(item):
            if not isinstance(item, (list, tuple, numpy.ndarray)) and item.dtype.kind in "fc":  # a float tensor
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
            spec.append({"tensor": len(arrays)})
            arrays.append(as_array(item))
        else:
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
                f"(got {type(item).__name__})"
            )
    return tuple(spec), arrays
