"""Malformed and hostile ONNX models, built with onnx.helper (cheaply: the million-node model is
one node's bytes repeated in the protobuf's wire format)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

OPSET = 20


def _model(nodes, inputs, outputs, initializers=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vector(name, n=3):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [n])


def tiny() -> onnx.ModelProto:
    """y = relu(x) * w, w an initializer."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mul", ["r", "w"], ["y"])]
    return _model(nodes, [_vector("x")], [_vector("y")], [w])


def truncated() -> bytes:
    data = tiny().SerializeToString()
    return data[: len(data) - 5]


def huge_dims() -> bytes:
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10**6, 10**6])  # declared, with no data
    nodes = [helper.make_node("Mul", ["x", "w"], ["y"])]
    return _model(nodes, [_vector("x")], [_vector("y")], [w]).SerializeToString()


def huge_input() -> bytes:
    """A graph input declared with 10^12 elements: its planned cost is over any budget."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10**6, 10**6])
    nodes = [helper.make_node("Exp", ["x"], ["y"], name="exp")]
    return _model(
        nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10**6, 10**6])]
    ).SerializeToString()


def external_data() -> bytes:
    model = tiny()
    w = model.graph.initializer[0]
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"
    return model.SerializeToString()


def cycle() -> bytes:
    nodes = [
        helper.make_node("Relu", ["b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Add", ["x", "a"], ["y"], name="out"),
    ]
    return _model(nodes, [_vector("x")], [_vector("y")]).SerializeToString()


def unknown_op() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("FancyNewOp", ["r"], ["y"])]
    return _model(nodes, [_vector("x")], [_vector("y")]).SerializeToString()


def old_opset() -> bytes:
    return _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vector("x")], [_vector("y")], opset=9
    ).SerializeToString()


def dynamic_reshape() -> bytes:
    """Reshape to a shape computed from the input's values: known only when running."""
    shape_input = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_by_value")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    return _model(nodes, [x, shape_input], [y]).SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def many_nodes(count: int = 10**6) -> bytes:
    """`count` Identity nodes (about 18 bytes each), written straight in the wire format."""
    node = helper.make_node("Identity", ["x"], ["x"]).SerializeToString()
    graph = helper.make_graph([], "g", [_vector("x")], [_vector("x")]).SerializeToString()
    graph += (b"\x0a" + _varint(len(node)) + node) * count  # GraphProto field 1: node
    model = _model([], [], [])
    model.ClearField("graph")
    return model.SerializeToString() + b"\x3a" + _varint(len(graph)) + graph  # ModelProto field 7: graph
