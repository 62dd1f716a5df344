"""Tensors on the wire: Open Inference Protocol (KServe v2 / Triton) tensor objects.

JSON tensors carry `data` row-major (flat or nested); non-finite floats are spelled "NaN",
"Infinity" and "-Infinity" so the JSON stays valid. Binary tensors follow Triton's binary data
extension: a JSON header, then raw little-endian buffers in header order, each tensor carrying
`parameters.binary_data_size` instead of `data`. No HTTP here: the service and the client
both use this module.
"""

from __future__ import annotations

import math
from array import array as packed

import numpy
import orjson

from engine.api import shown
from wire.errors import TensorError

DATATYPES = {
    "BOOL": numpy.dtype(numpy.bool_),
    "UINT8": numpy.dtype("<u1"),
    "INT8": numpy.dtype("<i1"),
    "INT16": numpy.dtype("<i2"),
    "INT32": numpy.dtype("<i4"),
    "INT64": numpy.dtype("<i8"),
    "FP16": numpy.dtype("<f2"),
    "FP32": numpy.dtype("<f4"),
    "FP64": numpy.dtype("<f8"),
}
DATATYPE_OF = {dtype.newbyteorder("="): name for name, dtype in DATATYPES.items()}
ALIGNMENT = 8  # the JSON header of a binary body is padded with spaces to a multiple of this
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_DIMS = 64  # NumPy's limit on an array's number of dimensions


def content_headers(header_length: int | None) -> dict:
    """The headers of a body from `encode_*`: JSON, or (a header length) the binary data extension's."""
    if header_length is None:
        return {"content-type": "application/json"}
    return {"content-type": "application/octet-stream", HEADER_LENGTH: str(header_length)}


def to_json(value):
    """A value (attribute, scalar, array) as JSON: lists for tuples and arrays, and "NaN",
    "Infinity", "-Infinity" for non-finite floats (as the graph parser and tensor data read them)."""
    if isinstance(value, numpy.ndarray):
        data = value.tolist()
        return data if value.dtype.kind != "f" or numpy.isfinite(value).all() else to_json(data)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return value


def datatype_of(dtype) -> str:
    name = DATATYPE_OF.get(dtype)
    if name is not None:
        return name
    try:
        return DATATYPE_OF[numpy.dtype(dtype).newbyteorder("=")]
    except KeyError:
        raise TensorError(f"dtype {dtype} has no Open Inference Protocol datatype") from None


def check_header(obj, where: str, max_elements: int):
    """(name, shape, dtype, element count) of a tensor object, checked before any allocation."""
    if not isinstance(obj, dict):
        raise TensorError(f"{where}: a tensor must be an object with name, shape, datatype", field=where)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise TensorError(f"{where}: tensor 'name' must be a non-empty string", field=f"{where}.name")
    shape = obj.get("shape")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):  # int: not bool
        raise TensorError(
            f"tensor {shown(name)}: 'shape' must be a list of non-negative integers, got {shown(shape)}",
            field=f"{where}.shape",
        )
    if len(shape) > MAX_DIMS:
        raise TensorError(
            f"tensor {shown(name)}: shape has {len(shape)} dimensions, more than the limit of {MAX_DIMS}",
            field=f"{where}.shape",
        )
    count = _count(shape, max_elements)
    if count is None:  # over the limit: element_count says so (its message is built only now)
        element_count(shape, max_elements, f"tensor {shown(name)}", f"{where}.shape")
    datatype = obj.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise TensorError(
            f"tensor {shown(name)}: unknown datatype {shown(datatype)}; expected one of {', '.join(DATATYPES)}",
            field=f"{where}.datatype",
        )
    return name, tuple(shape), DATATYPES[datatype], count


def element_count(shape, max_elements: int, what: str, field: str) -> int:
    """The element count of `shape`, refused (413) when the product of its non-zero dimensions is
    over `max_elements`: an empty tensor may not carry dimensions no array could have."""
    extent = 1
    for d in shape:
        extent *= d or 1
        if extent > max_elements:
            raise TensorError(
                f"{what}: shape {shape} has more than the limit of {max_elements} elements "
                f"(counting its non-zero dimensions)",
                field=field,
                kind="too_large",
            )
    return 0 if 0 in shape else extent


def _count(shape, max_elements: int) -> int | None:
    """`element_count` of a shape within the limit, without its error's message; None when over."""
    extent = 1
    for d in shape:
        extent *= d or 1
        if extent > max_elements:
            return None
    return 0 if 0 in shape else extent


MAX_NESTING = 64


def _scan(data):
    """(deepest nesting level, whether any leaf is a string), without recursion."""
    deepest, spelled = 0, False
    stack = [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, list):
            if level > MAX_NESTING:
                return level, spelled
            deepest = max(deepest, level)
            stack.extend((d, level + 1) for d in item)
        elif isinstance(item, str):
            spelled = True
    return deepest, spelled


def _unspell(data):
    """A copy of nested `data` with "NaN"/"Infinity"/"-Infinity" as floats (depth already bounded)."""
    if isinstance(data, list):
        return [_unspell(d) for d in data]
    if isinstance(data, str):
        if data not in NONFINITE:
            raise TensorError(f"unknown number spelling {shown(data)}; use NaN, Infinity or -Infinity")
        return NONFINITE[data]
    return data


FLAT_CODES = {"f": "d", "i": "q"}  # a flat list of a float or signed-integer tensor, packed as C doubles or int64s


def _flat(data, dtype):
    """A flat list of Python numbers as an array, packed by `array.array` (~25 ns an element, where
    `numpy.asarray` first discovers the list's dtype and shape, ~55 ns); None when it holds anything
    else (nested lists, spelled non-finite floats, None, strings; floats for an integer tensor, or
    integers past int64), which `_from_list` then reads the general way. Integers in a float tensor
    are read as floats whatever their size, as JSON means them."""
    code = FLAT_CODES.get(dtype.kind)
    if code is None or type(data) is not list:
        return None
    try:
        return numpy.frombuffer(packed(code, data), numpy.float64 if code == "d" else numpy.int64)
    except (TypeError, OverflowError):
        return None


def _from_list(name, data, dtype, shape, count, where):
    array = _flat(data, dtype)
    if array is not None and array.size == count and dtype.kind == "f":
        return array.astype(dtype, copy=False).reshape(shape)
    try:
        if array is None:
            array = numpy.asarray(data)
    except (ValueError, TypeError, OverflowError, RecursionError):
        array = None
    try:
        if array is None or array.dtype.kind not in "biuf":
            depth, spelled = _scan(data)
            if depth > MAX_NESTING:
                raise ValueError(f"nested deeper than {MAX_NESTING} levels")
            if not spelled or dtype.kind != "f":
                raise ValueError("values must be numbers (or NaN, Infinity, -Infinity in float tensors)")
            array = numpy.asarray(_unspell(data))
        kind = array.dtype.kind
        if kind not in "biuf" or (
            array.size and ((kind == "f" and dtype.kind != "f") or (dtype.kind == "b" and kind != "b"))
        ):
            raise ValueError(f"values of kind {array.dtype} for a {dtype.name} tensor")
        if dtype.kind in "iu" and array.size:
            info = numpy.iinfo(dtype)
            if array.min() < info.min or array.max() > info.max:
                raise ValueError(f"values outside the range of {dtype.name} [{info.min}, {info.max}]")
    except (TensorError, ValueError, TypeError, OverflowError) as err:
        raise TensorError(
            f"tensor {shown(name)}: data is not a (nested) list of {dtype.name} values: {err}", field=f"{where}.data"
        ) from None
    if array.size != count:
        raise TensorError(
            f"tensor {shown(name)}: data has {array.size} elements but shape {list(shape)} needs {count}",
            field=f"{where}.data",
        )
    return array.astype(dtype, copy=False).reshape(shape)


def decode_json(obj, where: str, max_elements: int):
    """(name, array) from a JSON tensor object."""
    return _decode_json(obj, check_header(obj, where, max_elements), where)


def _decode_json(obj, checked, where: str):
    name, shape, dtype, count = checked
    if "data" not in obj:
        raise TensorError(
            f"tensor {shown(name)}: missing 'data' (or parameters.binary_data_size for a binary tensor)",
            field=f"{where}.data",
        )
    data = obj["data"]
    if not isinstance(data, (list, numpy.ndarray)):  # an ndarray: an in-process caller's (`wire.handler.run_arrays`)
        data = [data]
    return name, _from_list(name, data, dtype, shape, count, where)


def binary_size(obj, where: str = "tensor"):
    """parameters.binary_data_size of a tensor object (None: a JSON tensor)."""
    params = obj.get("parameters") if isinstance(obj, dict) else None
    if isinstance(params, dict) and "binary_data_size" in params:
        size = params["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise TensorError(
                f"parameters.binary_data_size must be a non-negative integer, got {shown(size)}",
                field=f"{where}.parameters.binary_data_size",
            )
        if "data" in obj:
            raise TensorError(
                f"tensor {shown(obj.get('name'))} has both 'data' and parameters.binary_data_size; send one or the other",
                field=f"{where}.data",
            )
        return size
    return None


def check_headers(objs, where: str, max_elements: int) -> list:
    """[(name, shape, dtype, element count)] of a list of tensor objects (None: none), each
    checked by `check_header` before anything is allocated."""
    if objs is None:
        return []
    if not isinstance(objs, list):
        raise TensorError(f"'{where}' must be a list of tensor objects", field=where)
    return [check_header(obj, f"{where}[{i}]", max_elements) for i, obj in enumerate(objs)]


def decode_tensors(
    objs, where: str, tail: memoryview | bytes | None, offset: int, max_elements: int, checked=None, aligned=True
):
    """[(name, array)] from a list of tensor objects whose binary ones read from `tail` at `offset`.

    Returns (tensors, new offset). `checked` is `check_headers`' answer when the caller already
    has it. Binary arrays are zero-copy, read-only views of `tail`, except that one whose bytes
    are not aligned for its dtype is copied (NumPy's fast paths, BLAS included, need alignment)
    unless `aligned` is False (`wire.handler.align` copies it later, e.g. off an event loop).
    """
    if objs is None:  # the key is absent
        return [], offset
    if checked is None:
        checked = check_headers(objs, where, max_elements)
    out = []
    for i, (obj, header) in enumerate(zip(objs or (), checked)):
        size = binary_size(obj, f"{where}[{i}]")
        if size is None:
            out.append(_decode_json(obj, header, f"{where}[{i}]"))
            continue
        out.append(_binary_view(header, size, f"{where}[{i}]", tail, offset, aligned))
        offset += size
    return out, offset


def _binary_view(checked, size: int, where: str, tail, offset: int, aligned: bool = True):
    """(name, array) of a binary tensor whose `size` bytes start at `offset` in `tail`."""
    name, shape, dtype, count = checked
    if size != count * dtype.itemsize:
        raise TensorError(
            f"tensor {shown(name)}: binary_data_size {size} does not match shape {list(shape)} of {dtype.name} "
            f"({count * dtype.itemsize} bytes)",
            field=f"{where}.parameters.binary_data_size",
        )
    if tail is None or offset + size > len(tail):
        raise TensorError(
            f"tensor {shown(name)}: the body ends before its {size} bytes of binary data",
            field=f"{where}.parameters.binary_data_size",
            kind="malformed",
        )
    array = numpy.frombuffer(tail, dtype=dtype, count=count, offset=offset).reshape(shape)
    return name, (array if not aligned or array.flags.aligned else array.copy())


SPELLINGS = (b'"NaN"', b'"Infinity"', b'"-Infinity"')
_SPELLING_LENGTHS = numpy.array([len(s) for s in SPELLINGS])
_NULL = b"null"
_CHUNK = 1 << 17  # elements written at a time: ~10 ms of orjson, index arrays of a few MB
_ORJSON_DTYPES = tuple(numpy.dtype(t) for t in ("f4", "f8", "i1", "i2", "i4", "i8", "u1", "?"))


def _json_array(flat) -> orjson.Fragment:
    """The JSON array of a flat array, written by orjson a chunk of _CHUNK elements at a time, so
    that another thread (the event loop) may take the GIL between chunks. Non-finite floats,
    which orjson writes as null (the only "n" among its numbers), are spelled "NaN", "Infinity",
    "-Infinity" (`_respell`): no Python object per element, whatever the values."""
    if flat.dtype == numpy.float16:
        flat = flat.astype(numpy.float32)
    floats = flat.dtype.kind == "f"
    if flat.size <= _CHUNK:
        text = dumps(flat)
        if not floats or b"n" not in text:  # nothing to respell: orjson's text as it is
            return orjson.Fragment(text)
    pieces = []
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        text = dumps(chunk)
        raw = memoryview(text)[1:-1]
        if floats and b"n" in text:
            raw = _respell(raw, chunk[~numpy.isfinite(chunk)])
        pieces += raw, b","
    return orjson.Fragment(b"".join([b"[", *pieces[:-1], b"]"]))


def _respell(raw: memoryview, nonfinite):
    """`raw` (orjson's numbers, without brackets) with its nulls, one per value of `nonfinite` in
    order, replaced by their spellings: one `bytes.replace` when they are all of one kind, else
    a NumPy scatter. Only null has an "n" among orjson's numbers."""
    if not nonfinite.size:
        return raw
    code = numpy.where(numpy.isnan(nonfinite), 0, numpy.where(nonfinite > 0, 1, 2))
    if (code == code[0]).all():
        return bytes(raw).replace(_NULL, SPELLINGS[code[0]])
    raw = numpy.frombuffer(raw, numpy.uint8)
    nulls = numpy.flatnonzero(raw == ord("n"))
    assert nulls.size == nonfinite.size, "every non-finite value is written as null"
    shift = numpy.zeros(nulls.size + 1, numpy.int64)
    numpy.cumsum(_SPELLING_LENGTHS[code] - len(_NULL), out=shift[1:])
    bounds = numpy.concatenate(([0], nulls + 1, [raw.size]))
    out = numpy.empty(raw.size + int(shift[-1]), numpy.uint8)
    out[numpy.arange(raw.size) + numpy.repeat(shift, numpy.diff(bounds))] = raw
    starts = nulls + shift[:-1]
    for kind, spelling in enumerate(SPELLINGS):
        at = starts[code == kind]
        out[at[:, None] + numpy.arange(len(spelling))] = numpy.frombuffer(spelling, numpy.uint8)
    return out.tobytes()


def encode_json(name: str, array) -> dict:
    """A JSON tensor object. `data` may be a flat NumPy array or an orjson.Fragment: serialise
    with `dumps` (orjson's OPT_SERIALIZE_NUMPY)."""
    array = numpy.asarray(array)
    obj = {"name": name, "shape": list(array.shape), "datatype": datatype_of(array.dtype)}
    flat = numpy.ascontiguousarray(array).reshape(-1)
    if array.dtype.kind == "f" or flat.size > _CHUNK:
        obj["data"] = _json_array(flat)
    elif array.dtype in _ORJSON_DTYPES:
        obj["data"] = flat
    else:
        obj["data"] = flat.tolist()
    return obj


def encode_binary(name: str, array, buffers: list) -> dict:
    """A binary tensor object; its little-endian bytes are appended to `buffers`."""
    array = numpy.asarray(array)
    datatype = datatype_of(array.dtype)
    raw = numpy.ascontiguousarray(array, dtype=DATATYPES[datatype])
    buffers.append(memoryview(raw).cast("B") if raw.size else b"")
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype,
        "parameters": {"binary_data_size": raw.nbytes},
    }


def dumps(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def split_body(body: bytes, header_length: int | None):
    """(JSON header bytes, binary tail) of a request or response body."""
    if header_length is None:
        return body, None
    if header_length < 0 or header_length > len(body):
        raise TensorError(
            f"{HEADER_LENGTH} is {header_length} but the body has only {len(body)} bytes",
            field=HEADER_LENGTH,
            kind="malformed",
        )
    view = memoryview(body)
    return view[:header_length], view[header_length:]


def body_parts(header: dict, buffers: list) -> tuple[list, int]:
    """([JSON header bytes, *buffers], header length): a binary body in pieces, for a writer that
    sends them one after the other instead of copying them into one `bytes`. The header is padded
    with spaces to a multiple of ALIGNMENT bytes, so a reader whose body starts aligned gets its
    first buffers aligned too, and can view them in place."""
    head = dumps(header)
    head += b" " * (-len(head) % ALIGNMENT)
    return [head, *buffers], len(head)


def join_body(header: dict, buffers: list) -> tuple[bytes, int]:
    """(body, header length) for a header and its binary buffers."""
    parts, length = body_parts(header, buffers)
    return b"".join(parts), length
