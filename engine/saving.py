"""`torch.save` and `torch.load` for what a training program checkpoints: state_dicts, optimizer states and
any nesting of dicts, lists and tuples of Variables, NumPy arrays, numbers, strings and None. The file is a
NumPy `.npz` archive (a zip): the arrays, and the structure as JSON; nothing is pickled, so `load` rebuilds
data and never runs code (`weights_only` is accepted: every load is weights-only). A Variable is saved as its
array, `requires_grad` and whether it is a Parameter, not its graph or `.grad`, as PyTorch saves a tensor.
`loader(namespace)` is one side's `load`: it makes that side's Variables."""

from __future__ import annotations

import io
import json
import os
from collections import OrderedDict
from typing import Any

import numpy

from engine.surface_types import VariableSurface


def _encode(obj, arrays: list):
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, VariableSurface):
        arrays.append(numpy.asarray(obj.detach().numpy()))
        kind = "parameter" if type(obj).__name__ == "Parameter" else "tensor"
        return {kind: len(arrays) - 1, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, (numpy.ndarray, numpy.generic)):
        arrays.append(numpy.asarray(obj))
        return {"array" if isinstance(obj, numpy.ndarray) else "scalar": len(arrays) - 1}
    if isinstance(obj, dict):
        pairs = [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]
        return {"odict" if isinstance(obj, OrderedDict) else "dict": pairs}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__ if type(obj) in (list, tuple) else "list": [_encode(v, arrays) for v in obj]}
    raise TypeError(
        f"save: cannot save a {type(obj).__name__}: gradserve saves Variables, arrays, numbers, strings and "
        "dicts, lists and tuples of them (a module's or an optimizer's state_dict()), and pickles nothing"
    )


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2, **_: Any) -> None:
    """Write `obj` to `f` (a path or a binary file)."""
    arrays: list = []
    tree = json.dumps(_encode(obj, arrays)).encode()
    entries = {f"a{i}": a for i, a in enumerate(arrays)}
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as file:
            numpy.savez(file, tree=numpy.frombuffer(tree, numpy.uint8), **entries)
    else:
        numpy.savez(f, tree=numpy.frombuffer(tree, numpy.uint8), **entries)


def loader(ns: Any) -> Any:
    """`ns`'s `load(f, map_location=None, *, weights_only=None)`: what `save` wrote, with `ns`'s Variables."""

    def decode(node, archive):
        if not isinstance(node, dict):
            return node
        (kind, value), *rest = node.items()
        if kind in ("tensor", "parameter"):
            variable = ns.tensor(archive[f"a{value}"], requires_grad=rest[0][1] if kind == "tensor" else False)
            return ns.nn.Parameter(variable, requires_grad=rest[0][1]) if kind == "parameter" else variable
        if kind in ("array", "scalar"):
            array = archive[f"a{value}"]
            return array if kind == "array" else array[()]
        if kind in ("dict", "odict"):
            pairs = ((decode(k, archive), decode(v, archive)) for k, v in value)
            return OrderedDict(pairs) if kind == "odict" else dict(pairs)
        items = [decode(v, archive) for v in value]
        return tuple(items) if kind == "tuple" else items

    def load(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: Any = None, **_: Any):
        """Read what `save` wrote from `f` (a path, a binary file, or bytes)."""
        if isinstance(f, (bytes, bytearray)):
            f = io.BytesIO(f)
        try:
            with numpy.load(f, allow_pickle=False) as archive:
                return decode(json.loads(bytes(archive["tree"])), archive)
        except (ValueError, KeyError, OSError) as error:
            raise RuntimeError(f"load: not a file gradserve's save wrote ({error})") from error

    return load
