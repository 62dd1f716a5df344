"""The pickle `torch.save` writes (protocol 2), written without torch: pickle's own Pickler would import
`torch._utils` to check each GLOBAL it writes. A Variable is `torch._utils._rebuild_tensor_v2` of a storage
(a persistent id `('storage', torch.FloatStorage, key, 'cpu', numel)`), a Parameter `_rebuild_parameter` of one,
as `torch.Tensor.__reduce_ex__` pickles them; Variables whose arrays view one NumPy buffer keep sharing one
storage (tied weights, views), as PyTorch's do. Dicts, OrderedDicts (with their `_metadata`), lists, tuples, sets,
numbers, strings, bytes and None are pickled as pickle's protocol 2 does, with its memo: an object saved twice
loads as one. A NumPy array is saved as a tensor and a NumPy scalar as its Python number, so that
`torch.load(weights_only=True)` reads every file."""

from __future__ import annotations

import io
import pickle
import struct
from collections import OrderedDict
from typing import Any

import numpy

from engine.devices import Device
from engine.dtypes import DType
from engine.surface_types import VariableSurface

STORAGES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int"}
STORAGES.update({"int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"})


class Writer:
    """`Writer().dump(obj)`: the pickle's bytes; then `storages`, each key's array (C-contiguous) in order."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.memo: dict = {}
        self.storages: dict = {}  # key -> the array whose bytes are data/<key>
        self.roots: dict = {}  # id(root array) -> key
        self.keep: list = []  # what the memo's ids name stays alive while pickling

    def dump(self, obj: Any) -> bytes:
        self.out.write(pickle.PROTO + b"\x02")
        self.save(obj)
        self.out.write(pickle.STOP)
        return self.out.getvalue()

    def save(self, obj: Any) -> None:
        write = self.out.write
        if obj is None or isinstance(obj, bool):
            write(pickle.NONE if obj is None else pickle.NEWTRUE if obj else pickle.NEWFALSE)
        elif isinstance(obj, numpy.generic):
            self.save(obj.item())
        elif isinstance(obj, int):
            self.integer(int(obj))
        elif isinstance(obj, float):
            write(pickle.BINFLOAT + struct.pack(">d", obj))
        elif isinstance(obj, str):
            data = obj.encode("utf-8", "surrogatepass")
            write(pickle.BINUNICODE + struct.pack("<I", len(data)) + data)
        elif isinstance(obj, DType):
            self.glob("torch", obj.name)
        elif isinstance(obj, Device):
            self.reduce(("torch", "device"), (str(obj),))
        elif id(obj) in self.memo:
            self.get(self.memo[id(obj)])
        elif isinstance(obj, (VariableSurface, numpy.ndarray)):
            self.tensor(obj)
        elif isinstance(obj, tuple):
            self.items(obj, pickle.EMPTY_TUPLE, pickle.TUPLE)
        elif isinstance(obj, (list, dict)):
            self.container(obj)
        elif isinstance(obj, (bytes, set, frozenset)):
            args = (obj.decode("latin1"), "latin1") if isinstance(obj, bytes) else (list(obj),)
            self.reduce(("_codecs", "encode") if isinstance(obj, bytes) else ("builtins", "set"), args)
        else:
            raise TypeError(
                f"save: cannot save a {type(obj).__name__}: gradserve saves Variables, arrays, numbers, strings and "
                "dicts, lists and tuples of them (a module's or an optimizer's state_dict()), as torch.load(weights_only=True) reads them"
            )

    def container(self, obj: list | dict) -> None:
        """A list or dict, memoized before its items as pickle's are (so it may hold itself); an OrderedDict's
        attributes (a state_dict's `_metadata`) follow with BUILD."""
        if isinstance(obj, OrderedDict):
            self.reduce(("collections", "OrderedDict"), ())
        else:
            self.out.write(pickle.EMPTY_DICT if isinstance(obj, dict) else pickle.EMPTY_LIST)
        self.put(obj)
        if isinstance(obj, dict):
            self.items([x for pair in obj.items() for x in pair], b"", pickle.SETITEMS)
        else:
            self.items(obj, b"", pickle.APPENDS)
        if isinstance(obj, OrderedDict) and vars(obj):
            self.save(dict(vars(obj)))
            self.out.write(pickle.BUILD)

    def integer(self, n: int) -> None:
        if 0 <= n < 256:
            self.out.write(pickle.BININT1 + bytes([n]))
        elif 0 <= n < 65536:
            self.out.write(pickle.BININT2 + struct.pack("<H", n))
        elif -(2**31) <= n < 2**31:
            self.out.write(pickle.BININT + struct.pack("<i", n))
        else:
            data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
            self.out.write(pickle.LONG1 + bytes([len(data)]) + data)

    def items(self, items: Any, empty: bytes, close: bytes) -> None:
        if not items:
            self.out.write(empty)
            return
        self.out.write(pickle.MARK)
        for item in items:
            self.save(item)
        self.out.write(close)

    def glob(self, module: str, name: str) -> None:
        self.out.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())

    def reduce(self, func: tuple, args: tuple) -> None:
        self.glob(*func)
        self.items(args, pickle.EMPTY_TUPLE, pickle.TUPLE)
        self.out.write(pickle.REDUCE)

    def put(self, obj: Any) -> None:
        self.keep.append(obj)
        self.memo[id(obj)] = n = len(self.memo)
        self.out.write(pickle.BINPUT + bytes([n]) if n < 256 else pickle.LONG_BINPUT + struct.pack("<I", n))

    def get(self, n: int) -> None:
        self.out.write(pickle.BINGET + bytes([n]) if n < 256 else pickle.LONG_BINGET + struct.pack("<I", n))

    def tensor(self, obj: Any) -> None:
        variable = isinstance(obj, VariableSurface)
        array = numpy.asarray(obj.detach().numpy() if variable else obj)
        if array.dtype.name not in STORAGES:
            raise TypeError(f"save: cannot save a {array.dtype} tensor: torch's files hold {', '.join(STORAGES)} here")
        key, offset, strides = self.storage(array)
        parameter = variable and type(obj).__name__ == "Parameter"
        if parameter:
            self.glob("torch._utils", "_rebuild_parameter")
            self.out.write(pickle.MARK)
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out.write(pickle.MARK + pickle.MARK)
        self.save("storage")
        self.glob("torch", f"{STORAGES[array.dtype.name]}Storage")
        for item in (key, "cpu", self.storages[key].size):
            self.save(item)
        self.out.write(pickle.TUPLE + pickle.BINPERSID)
        requires_grad = variable and bool(obj.requires_grad)
        for item in (offset, tuple(array.shape), strides, requires_grad and not parameter):
            self.save(item)
        self.reduce(("collections", "OrderedDict"), ())
        self.out.write(pickle.TUPLE + pickle.REDUCE)
        if parameter:
            self.save(requires_grad)
            self.reduce(("collections", "OrderedDict"), ())
            self.out.write(pickle.TUPLE + pickle.REDUCE)
        self.put(obj)

    def storage(self, array: numpy.ndarray) -> tuple:
        """The key of the storage `array` views, its offset and its strides in elements: the buffer it views
        when that is one C-contiguous array of its dtype, else a contiguous copy of its own."""
        root = array
        while isinstance(root.base, numpy.ndarray):
            root = root.base
        itemsize = array.itemsize
        offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        shared = root.dtype == array.dtype and root.flags.c_contiguous and offset >= 0 and offset % itemsize == 0
        if not (shared and all(s >= 0 and s % itemsize == 0 for s in array.strides)):
            root = array = numpy.ascontiguousarray(array)
            offset = 0
        if id(root) not in self.roots:
            self.keep.append(root)
            self.roots[id(root)] = key = str(len(self.roots))
            self.storages[key] = root
        return self.roots[id(root)], offset // itemsize, tuple(s // itemsize for s in array.strides)
