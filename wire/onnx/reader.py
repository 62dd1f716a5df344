"""Reading an ONNX model's bytes within bounds, before anything is planned or run.

`read_model` parses the protobuf (bounded in bytes first) and refuses, naming the node or tensor
at fault: an opset outside 13..the newest the installed `onnx` knows, other op domains, more
nodes or initializers than allowed, tensors whose data lives outside the model (external data:
no path from a model is ever opened), sparse tensors, subgraphs, names defined twice, and a node
that reads a value no earlier node defines (a cycle, or nodes out of topological order). Tensors
are decoded here (`tensor_array`), never by `onnx.numpy_helper`, which follows external paths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from engine.api import shown
from wire.errors import GraphError, RequestError

MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class OnnxLimits:
    """The bounds of one model: its bytes, its nodes and initializers, and the elements of any one tensor."""

    max_bytes: int = 16 * 2**20
    max_nodes: int = 10_000
    max_tensor_elements: int = 2**27
    max_graph_nodes: int = 100_000  # of the graph it becomes (the server's max_nodes): an LSTM unrolled within it


def onnx_module():
    """The `onnx` package, or a 422 saying how to install it (the `[onnx]` extra)."""
    try:
        import onnx
    except ImportError:
        raise GraphError(
            "ONNX models need the onnx package on the server: pip install 'gradserve[onnx]'", field="model"
        ) from None
    return onnx


def label(node, index: int) -> str:
    """How an error names an ONNX node: its name, or `#index` when it has none."""
    return node.name or f"#{index}"


def node_error(node, index: int, message: str, field: str = "op", kind: str = "invalid") -> GraphError:
    name = label(node, index)
    return GraphError(f"ONNX node {shown(name)} ({node.op_type}): {message}", node=name, field=field, kind=kind)


def read_model(data: bytes, limits: OnnxLimits):
    """The checked `onnx.ModelProto` of a model's bytes and its default-domain opset version."""
    if len(data) > limits.max_bytes:
        raise RequestError(
            f"the ONNX model is {len(data)} bytes, over the limit of {limits.max_bytes} (max_onnx_model_bytes)",
            field="model",
            kind="too_large",
        )
    onnx = onnx_module()
    _count_before_parsing(data, limits)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError, or a RuntimeWarning-turned-error
        raise RequestError(
            f"not an ONNX model (the protobuf is truncated or malformed): {err}", field="model", kind="malformed"
        ) from None
    if not model.HasField("graph") or not model.graph.node:
        raise GraphError("the ONNX model has no graph, or its graph has no nodes", field="model.graph")
    opset = _opset(model, onnx)
    graph = model.graph
    _check_counts(graph, limits)
    if model.functions:
        raise GraphError("ONNX model-local functions are not supported", field="model.functions")
    if graph.sparse_initializer:
        raise GraphError("sparse initializers are not supported", field="model.graph.sparse_initializer")
    for tensor in graph.initializer:
        _check_tensor(tensor, limits, f"initializer {shown(tensor.name)}", tensor.name)
    _check_nodes(graph, limits, onnx)
    return model, opset


MODEL_GRAPH, GRAPH_NODE, GRAPH_INITIALIZER = 7, 1, 5  # field numbers of onnx.proto


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise RequestError(
                "not an ONNX model (the protobuf is truncated or malformed)", field="model", kind="malformed"
            )
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _fields(data: bytes, start: int, end: int):
    """(field number, start, end of its length-delimited payload or None) of a message's fields."""
    pos = start
    while pos < end:
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
            yield key >> 3, None, None
            continue
        if wire == 2:
            length, pos = _varint(data, pos)
            yield key >> 3, pos, pos + length
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            yield key >> 3, None, None
        else:
            raise RequestError("not an ONNX model (the protobuf is malformed)", field="model", kind="malformed")
        if pos > end:
            raise RequestError("not an ONNX model (the protobuf is truncated)", field="model", kind="malformed")


def _count_before_parsing(data: bytes, limits: OnnxLimits) -> None:
    """Refuse a graph with too many nodes or initializers from the protobuf's wire format, before
    parsing builds them (a million nodes parse in seconds and hundreds of MB); stops at the limit."""
    counts = {GRAPH_NODE: 0, GRAPH_INITIALIZER: 0}  # a field given twice is merged: count them all
    for field, start, end in _fields(data, 0, len(data)):
        if field != MODEL_GRAPH or start is None:
            continue
        for inner, _, _ in _fields(data, start, end):
            if inner in counts:
                counts[inner] += 1
                if counts[inner] > limits.max_nodes:
                    what = "nodes" if inner == GRAPH_NODE else "initializers"
                    raise RequestError(
                        f"the ONNX graph has more than {limits.max_nodes} {what} (max_onnx_nodes)",
                        field=f"model.graph.{'node' if inner == GRAPH_NODE else 'initializer'}",
                        kind="too_large",
                    )


def _opset(model, onnx) -> int:
    newest = onnx.defs.onnx_opset_version()
    versions = {entry.domain: entry.version for entry in model.opset_import}
    opset = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if opset is None:
        raise GraphError("the ONNX model imports no opset of the default domain (ai.onnx)", field="model.opset_import")
    if not MIN_OPSET <= opset <= newest:
        raise GraphError(
            f"the ONNX model's opset {opset} is out of the supported range {MIN_OPSET}..{newest} "
            "(re-export it with a supported opset_version)",
            field="model.opset_import",
        )
    return opset


def _check_counts(graph, limits: OnnxLimits) -> None:
    for what, count in (("nodes", len(graph.node)), ("initializers", len(graph.initializer))):
        if count > limits.max_nodes:
            raise RequestError(
                f"the ONNX graph has {count} {what}, over the limit of {limits.max_nodes} (max_onnx_nodes)",
                field=f"model.graph.{'node' if what == 'nodes' else 'initializer'}",
                kind="too_large",
            )


def _check_tensor(tensor, limits: OnnxLimits, what: str, node=None) -> None:
    onnx_external = 1  # TensorProto.EXTERNAL
    if tensor.data_location == onnx_external or len(tensor.external_data):
        raise GraphError(
            f"{what} refers to external data: models must carry their tensors inline (no file is opened)",
            node=node,
            field="external_data",
        )
    if any(d < 0 for d in tensor.dims) or math.prod(tensor.dims) > limits.max_tensor_elements:
        raise RequestError(
            f"{what} declares dims {list(tensor.dims)}, over the limit of {limits.max_tensor_elements} elements",
            node=node,
            field="dims",
            kind="too_large",
        )


def _check_nodes(graph, limits: OnnxLimits, onnx) -> None:
    defined = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    attribute = onnx.AttributeProto
    for index, node in enumerate(graph.node):
        if node.domain not in DEFAULT_DOMAINS:
            raise node_error(node, index, f"op domain {shown(node.domain)} is not supported (only ai.onnx)")
        for attr in node.attribute:
            if attr.type in (attribute.GRAPH, attribute.GRAPHS):
                raise node_error(node, index, "ops with subgraphs (If, Loop, Scan) are not supported")
            if attr.type in (attribute.SPARSE_TENSOR, attribute.SPARSE_TENSORS):
                raise node_error(node, index, "sparse tensor attributes are not supported", field=attr.name)
            tensors = [attr.t] if attr.type == attribute.TENSOR else list(attr.tensors)
            for tensor in tensors:
                try:
                    _check_tensor(tensor, limits, f"attribute {shown(attr.name)}")
                except GraphError as err:
                    raise node_error(node, index, str(err), field=attr.name, kind=err.kind) from None
        for name in node.input:
            if name and name not in defined:
                raise node_error(
                    node,
                    index,
                    f"input {shown(name)} is not defined by any earlier node, graph input or initializer "
                    "(a cycle, or nodes out of topological order)",
                    field="input",
                )
        for name in node.output:
            if name in defined:
                raise node_error(node, index, f"output {shown(name)} is defined twice", field="output")
            if name:
                defined.add(name)
    for out in graph.output:
        if out.name not in defined:
            raise GraphError(f"graph output {shown(out.name)} is not defined by any node", field="model.graph.output")


# TensorProto data types -> NumPy dtypes (what gradserve computes with; others are refused)
DTYPES = {
    1: numpy.dtype(numpy.float32),
    2: numpy.dtype(numpy.uint8),
    3: numpy.dtype(numpy.int8),
    5: numpy.dtype(numpy.int16),
    6: numpy.dtype(numpy.int32),
    7: numpy.dtype(numpy.int64),
    9: numpy.dtype(numpy.bool_),
    10: numpy.dtype(numpy.float16),
    11: numpy.dtype(numpy.float64),
}
TYPED_FIELDS = {"f": "float_data", "d": "double_data", "i8": "int64_data"}


def dtype_of(elem_type: int, what: str, node=None) -> numpy.dtype:
    dtype = DTYPES.get(elem_type)
    if dtype is None:
        raise GraphError(f"{what}: ONNX element type {elem_type} is not supported", node=node, field="dtype")
    return dtype


def tensor_array(tensor, what: str, node=None) -> numpy.ndarray:
    """A TensorProto's values (checked by `read_model`: inline, within the element bound)."""
    dtype = dtype_of(tensor.data_type, what, node)
    shape = tuple(tensor.dims)
    count = math.prod(shape)
    if tensor.raw_data:
        if len(tensor.raw_data) != count * dtype.itemsize:
            raise GraphError(
                f"{what}: raw_data holds {len(tensor.raw_data)} bytes, not the {count * dtype.itemsize} of dims {list(shape)}",
                node=node,
                field="raw_data",
            )
        return numpy.frombuffer(tensor.raw_data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
    if dtype.kind == "f" and dtype.itemsize == 4:
        values = tensor.float_data
    elif dtype.kind == "f" and dtype.itemsize == 8:
        values = tensor.double_data
    elif dtype == numpy.int64:
        values = tensor.int64_data
    elif dtype == numpy.float16:
        values = numpy.asarray(tensor.int32_data, dtype=numpy.uint16).view(numpy.float16)
    else:  # int32, int16, int8, uint8, bool travel in int32_data
        values = tensor.int32_data
    if len(values) != count:
        raise GraphError(
            f"{what}: holds {len(values)} values, not the {count} of dims {list(shape)}", node=node, field="dims"
        )
    return numpy.asarray(values).astype(dtype).reshape(shape)
