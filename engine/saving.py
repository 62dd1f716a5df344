"""`torch.save` and `torch.load` in PyTorch's own file format (torch >= 1.6), with no torch installed: a zip of
`<name>/data.pkl` (the pickle, protocol 2), `<name>/data/<key>` (each storage's bytes), `<name>/byteorder`,
`<name>/version`... A checkpoint PyTorch wrote (`torch.save(model.state_dict(), "m.pt")`) loads here, and PyTorch's
`torch.load(f, weights_only=True)` loads what `save` writes (engine/pickle_writer.py).

Every load is weights-only, whatever `weights_only` says: the pickle is read by engine/pickle_reader.py, whose
GLOBALs are what torch's weights-only unpickler allows by default, mapped to this side's objects (`_rebuild_tensor_v2`
makes a Variable viewing its storage's array, so views of one storage stay views of one buffer); a file naming
anything else (`os.system`...) raises torch's `pickle.UnpicklingError`. float16/32/64, int8/16/32/64, uint8 and bool
load as themselves; bfloat16, which NumPy lacks, loads as float32 (exactly) with a warning; complex, quantized,
sparse and other tensors are refused by name. Files of gradserve's earlier `save` (a NumPy `.npz` archive holding
the arrays and the structure as JSON) still load. `loader(namespace)` is one side's `load`."""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import warnings
import zipfile
from collections import Counter, OrderedDict
from typing import Any

import numpy

from engine.pickle_reader import Unpickler
from engine.pickle_writer import Writer
from engine.surface_types import VariableSurface

STORAGE_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64"}
STORAGE_DTYPES.update({"Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"})
# What torch's weights-only unpickler also allows and gradserve cannot build: named, then refused when used.
ALSO_ALLOWED = (
    "ComplexFloatStorage ComplexDoubleStorage QInt8Storage QInt32Storage QUInt8Storage QUInt4x2Storage QUInt2x4Storage "
    "complex32 complex64 complex128 uint16 uint32 uint64 qint8 qint32 quint8 quint4x2 quint2x4 float8_e4m3fn "
    "float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 bits8 bits16 bits1x8 bits2x4 bits4x2 "
    "per_tensor_affine per_tensor_symmetric per_channel_affine per_channel_symmetric per_channel_affine_float_qparams "
    "serialization._get_layout _utils._rebuild_qtensor _utils._rebuild_sparse_tensor _utils._rebuild_nested_tensor "
    "_utils._rebuild_meta_tensor_no_storage _utils._rebuild_wrapper_subclass _utils._rebuild_device_tensor_from_numpy "
    "_utils._rebuild_device_tensor_from_cpu_tensor storage.TypedStorage"
).split()
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
WEIGHTS_ONLY = (
    "Weights only load failed. gradserve's load is always weights-only (weights_only=False changes nothing): it "
    "builds tensors, containers and numbers and never runs a file's code.\n\nWeightsUnpickler error: "
)
CPU_ONLY = (
    "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are running "
    "on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your storages to the CPU."
)


class StorageType:
    """A storage class named in a file (`torch.FloatStorage`): the dtype of its bytes."""

    def __init__(self, dtype: str):
        self.dtype = dtype


class Refused:
    """What torch allows and gradserve cannot build (a quantized storage, a sparse tensor): refused when used."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args: Any) -> Any:
        raise RuntimeError(
            f"load: this file holds {self.name}, which gradserve cannot load: it loads dense tensors of float16/32/64, "
            "bfloat16 (as float32), int8/16/32/64, uint8 and bool"
        )


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2, **_: Any) -> None:
    """Write `obj` to `f` (a path or a binary file) as `torch.save` does."""
    writer = Writer()
    pickled = writer.dump(obj)
    path = isinstance(f, (str, os.PathLike))
    name = os.path.splitext(os.path.basename(os.fspath(f)))[0] if path else "archive"
    records = [("data.pkl", pickled), (".format_version", b"1"), (".storage_alignment", b"64")]
    records += [("byteorder", sys.byteorder.encode())]
    records += [(f"data/{key}", array.reshape(-1).view(numpy.uint8)) for key, array in writer.storages.items()]
    records += [
        ("version", b"3\n"),
        (".data/serialization_id", b"%040d" % (int(hashlib.sha1(pickled).hexdigest(), 16) % 10**40)),
    ]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for record, data in records:
            info = zipfile.ZipInfo(f"{name}/{record}", date_time=(1980, 1, 1, 0, 0, 0))
            pad = -(buffer.tell() + 30 + len(info.filename) + 4) % 64  # each record's data 64-byte aligned, as torch's
            info.extra = b"FB" + pad.to_bytes(2, "little") + b"Z" * pad
            archive.writestr(info, data)
    if path:
        with open(f, "wb") as file:
            file.write(buffer.getbuffer())
    else:
        f.write(buffer.getbuffer())


def allowlist(ns: Any) -> dict:
    """The GLOBALs a file may name (torch's weights-only defaults), each as `ns`'s object."""

    def rebuild(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None, dtype=None):
        array = storage if dtype is None else storage.view(numpy.uint8).view(numpy.dtype(dtype))
        size, stride, itemsize = tuple(size), tuple(stride), array.itemsize
        needed = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
        if len(size) != len(stride) or min((offset, *size, *stride)) < 0 or needed > array.size:
            raise RuntimeError(
                f"Trying to resize storage that is not resizable: sizes {list(size)}, strides {list(stride)} and "
                f"storage offset {offset} need {needed} elements of a storage of {array.size}"
            )
        view = numpy.lib.stride_tricks.as_strided(array[offset:], size, [s * itemsize for s in stride])
        variable = ns.from_numpy(view)
        return variable.requires_grad_(True) if requires_grad else variable

    def rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
        return (
            dtype()
            if isinstance(dtype, Refused)
            else rebuild(storage, offset, size, stride, requires_grad, dtype=dtype.dtype)
        )

    def attributes(variable, state):  # a tensor's Python attributes (`t.note = 1`), where the Variable takes them
        dropped = []
        for name, value in (state if isinstance(state, dict) else {}).items():
            try:
                setattr(variable, name, value)
            except AttributeError:
                dropped.append(name)
        if dropped:
            warnings.warn(
                f"load: a Variable takes no attribute {', '.join(dropped)}: not set", UserWarning, stacklevel=7
            )
        return variable

    def parameter(data, requires_grad, hooks, state=None):
        return attributes(ns.nn.Parameter(data, requires_grad=requires_grad), state)

    def from_type(func, new_type, args, state):
        result = func(*args)
        if new_type is ns.nn.Parameter and not isinstance(result, ns.nn.Parameter):
            result = ns.nn.Parameter(result, requires_grad=result.requires_grad)
        return attributes(result, state)

    allowed: dict[str, Any] = {f"torch.{name}": Refused(f"torch.{name}") for name in ALSO_ALLOWED}
    allowed.update({f"torch.{kind}Storage": StorageType(dtype) for kind, dtype in STORAGE_DTYPES.items()})
    allowed.update({f"torch.cuda.{kind}Storage": StorageType(dtype) for kind, dtype in STORAGE_DTYPES.items()})
    allowed.update({f"torch.{dtype}": getattr(ns, dtype) for dtype in STORAGE_DTYPES.values()})
    allowed.update(
        {"torch.storage.UntypedStorage": StorageType("uint8"), "torch.Size": ns.Size, "torch.device": ns.device}
    )
    allowed.update({"torch.Tensor": ns.Tensor, "torch.nn.parameter.Parameter": ns.nn.Parameter})
    allowed.update({"collections.OrderedDict": OrderedDict, "collections.Counter": Counter, "builtins.set": set})
    allowed.update({"builtins.bytearray": bytearray, "builtins.complex": complex, "_codecs.encode": codecs.encode})
    rebuilds = {"_rebuild_tensor": rebuild, "_rebuild_tensor_v2": rebuild, "_rebuild_tensor_v3": rebuild_v3}
    rebuilds.update({"_rebuild_parameter": parameter, "_rebuild_parameter_with_state": parameter})
    allowed.update({f"torch._utils.{name}": f for name, f in rebuilds.items()})
    allowed["torch._tensor._rebuild_from_type_v2"] = from_type
    return allowed


def read_storage(archive: zipfile.ZipFile, name: str, dtype: str, numel: int, order: str) -> numpy.ndarray:
    """A storage's bytes as a writable array of `dtype` in this machine's byte order (bfloat16 as float32)."""
    stored = numpy.dtype("uint16" if dtype == "bfloat16" else dtype).newbyteorder("<" if order == "little" else ">")
    data = bytearray(archive.read(name))
    if len(data) != numel * stored.itemsize:
        raise RuntimeError(
            f"record size ({len(data)} bytes) does not match expected size ({numel * stored.itemsize} bytes)"
        )
    array = numpy.frombuffer(data, stored)
    array = array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))
    if dtype != "bfloat16":
        return array
    warnings.warn(
        "load: a bfloat16 tensor loads as float32 (exactly): NumPy has no bfloat16", UserWarning, stacklevel=7
    )
    return (array.astype(numpy.uint32) << 16).view(numpy.float32)


def storages(archive: zipfile.ZipFile, prefix: str, map_location: Any) -> Any:
    """The persistent_load of a file's storages: each key's bytes once, as an array of its dtype, on the CPU
    (a storage of a CUDA device needs a `map_location`, as in torch without CUDA)."""
    loaded: dict = {}
    order = archive.read(f"{prefix}byteorder").decode() if f"{prefix}byteorder" in archive.namelist() else "little"

    def persistent_load(pid: tuple) -> numpy.ndarray:
        storage_type, key, location = pid[1], str(pid[2]), str(pid[3])
        if isinstance(storage_type, Refused):
            storage_type()
        if not isinstance(storage_type, StorageType):
            raise pickle.UnpicklingError(f"persistent_load: {storage_type!r:.80} is not a storage type")
        if key not in loaded:
            loaded[key] = read_storage(archive, f"{prefix}data/{key}", storage_type.dtype, int(pid[4]), order)
        mapped = map_location(loaded[key], location) if callable(map_location) else None
        if mapped is not None:
            return mapped
        if isinstance(map_location, dict):
            location = str(map_location.get(location, location))
        elif map_location is not None and not callable(map_location):
            location = str(map_location)
        if location.startswith("cuda"):
            raise RuntimeError(CPU_ONLY)
        return loaded[key]

    return persistent_load


def refuse_persistent_id(pid: Any) -> None:
    raise pickle.UnpicklingError("unsupported persistent id encountered")


def loader(ns: Any) -> Any:
    """`ns`'s `load(f, map_location=None, *, weights_only=None)`: what `torch.save` or `save` wrote, with `ns`'s Variables."""

    def decode(node, archive):  # gradserve's earlier .npz files
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

    def read(file: Any, map_location: Any) -> Any:
        start = file.tell()
        if not zipfile.is_zipfile(file):  # torch's legacy format starts with a pickled magic number
            file.seek(start)
            if Unpickler(file, {}, refuse_persistent_id).load() == LEGACY_MAGIC:
                raise RuntimeError(
                    "load: PyTorch's legacy format (torch < 1.6, or _use_new_zipfile_serialization=False) is not supported: save it again with torch.save"
                )
            raise RuntimeError("Invalid magic number; corrupt file?")
        file.seek(start)
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            if "tree.npy" in names:
                file.seek(start)
                with numpy.load(file, allow_pickle=False) as npz:
                    return decode(json.loads(bytes(npz["tree"])), npz)
            prefix = names[0].split("/")[0] + "/" if names and "/" in names[0] else ""
            if f"{prefix}constants.pkl" in names:
                raise RuntimeError(
                    "Cannot use ``weights_only=True`` with TorchScript archives passed to ``torch.load``: gradserve cannot run TorchScript"
                )
            if f"{prefix}data.pkl" not in names:
                raise RuntimeError("PytorchStreamReader failed locating file data.pkl: file not found")
            pickled = io.BytesIO(archive.read(f"{prefix}data.pkl"))
            return Unpickler(pickled, allowlist(ns), storages(archive, prefix, map_location), (VariableSurface,)).load()

    def load(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: Any = None, **_: Any):
        """Read what `torch.save` or `save` wrote from `f` (a path, a binary file, or bytes)."""
        if isinstance(f, (bytes, bytearray)):
            f = io.BytesIO(f)
        try:
            if isinstance(f, (str, os.PathLike)):
                with open(f, "rb") as file:
                    return read(file, map_location)
            return read(f if f.seekable() else io.BytesIO(f.read()), map_location)
        except pickle.UnpicklingError as error:
            raise pickle.UnpicklingError(WEIGHTS_ONLY + str(error)) from None
        except (ValueError, KeyError, IndexError, OSError, EOFError, struct.error) as error:
            raise RuntimeError(
                f"load: not a file torch.save or gradserve's save wrote ({type(error).__name__}: {error})"
            ) from error

    return load
