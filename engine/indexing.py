"""Index specs: `x[...]` keys in a form that a graph can carry.

A spec is a tuple of items, each one of: an int, None (new axis), "..." (Ellipsis),
{"slice": [start, stop, step]}, or {"tensor": k} for the k-th index array, which travels as
an extra input of the node. This is also the graph format's spelling of the `index` attribute.
"""

from __future__ import annotations

import operator

from engine.attrs import INT64, AttrError


def _in_range(value) -> bool:
    return INT64[0] <= value <= INT64[1]


def check_spec(spec, name="index"):
    if not isinstance(spec, (list, tuple)):
        raise AttrError(f"attribute {name!r} must be a list of index items, got {spec!r}")
    out = []
    for item in spec:
        if item is None or item == "...":
            out.append(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not _in_range(item):
                raise AttrError(f"attribute {name!r}: index {item} is out of the 64-bit integer range")
            out.append(item)
        elif isinstance(item, dict) and set(item) == {"slice"}:
            bounds = item["slice"]
            if not isinstance(bounds, (list, tuple)) or len(bounds) != 3 or not all(
                b is None or (isinstance(b, int) and not isinstance(b, bool)) for b in bounds
            ):
                raise AttrError(f"attribute {name!r}: a slice is [start, stop, step] of integers or null, got {bounds!r}")
            if not all(b is None or _in_range(b) for b in bounds):
                raise AttrError(f"attribute {name!r}: a slice bound is out of the 64-bit integer range: {bounds!r}")
            if bounds[2] == 0:
                raise AttrError(f"attribute {name!r}: slice step cannot be zero")
            out.append({"slice": list(bounds)})
        elif isinstance(item, dict) and set(item) == {"tensor"} and isinstance(item["tensor"], int) and not isinstance(item["tensor"], bool) and item["tensor"] >= 0:
            out.append({"tensor": item["tensor"]})
        else:
            raise AttrError(f"attribute {name!r}: unsupported index item {item!r}")
    return tuple(out)


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
            spec.append({"slice": bounds})
        elif isinstance(item, bool):
            spec.append({"tensor": len(arrays)})
            arrays.append(as_array(item))
        elif isinstance(item, int) or (hasattr(item, "__index__") and not _is_index_array(item)):
            spec.append(operator.index(item))
        elif _is_index_array(item) and getattr(item, "ndim", 1) == 0 and "int" in str(item.dtype):
            spec.append(int(item.item() if hasattr(item, "item") else item))
        elif isinstance(item, (list, tuple)) or _is_index_array(item):
            spec.append({"tensor": len(arrays)})
            arrays.append(as_array(item))
        else:
            raise IndexError(f"unsupported index {item!r}: use ints, slices, None, ..., or integer/boolean arrays")
    return tuple(spec), arrays
