"""Import cost of models with a dynamic batch (session 26): what the importer no longer does.

- A node's output whose unknown dims ONNX's whole-model inference named after a graph input's dim (a
  `batch`) takes its Dims from those names: since session 25 every node of such a model was inferred a
  second time on its own (half the import of the benchmark's 0.1 MiB MLP).
- ONNX's shape inference is given the weights as typed graph inputs, not their values: it serialized
  every weight in and out (90% of the import of a 16 MiB MLP).

Both keep what the import makes: the same graph and held parameters, the same served values.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from wire.onnx import import_model, importer  # noqa: E402


def _mlp(width=40, layers=3, ir_version=None, reshape=False) -> bytes:
    """Gemm + Relu layers over x [batch, width] (weights > importer.SHAPE_ONLY elements), optionally
    ending in a Reshape to [0, 2, -1] (a dynamic batch kept by name); weights listed as graph inputs
    too when `ir_version` is 3 (the old exporters)."""
    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / width**0.5).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(width).astype("f4"), f"b{i}"),
        ]
        nodes += [
            helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [f"g{i}"], transB=1),
            helper.make_node("Relu", [f"g{i}"], [f"h{i}"]),
        ]
        last = f"h{i}"
    out_shape = ["batch", width]
    if reshape:
        inits.append(numpy_helper.from_array(np.array([0, 2, -1], np.int64), "target"))
        nodes.append(helper.make_node("Reshape", [last, "target"], ["r"]))
        last, out_shape = "r", ["batch", 2, width // 2]
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])]
    if ir_version == 3:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits]
    graph = helper.make_graph(
        nodes, "mlp", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model.SerializeToString()


def _numpy_mlp(data: bytes, x: np.ndarray) -> np.ndarray:
    model = onnx.load_model_from_string(data)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    h = x
    for i in range(sum(n.op_type == "Gemm" for n in model.graph.node)):
        h = np.maximum(h @ weights[f"w{i}"].T + weights[f"b{i}"], 0)
    return h.reshape(len(x), 2, -1) if "target" in weights else h


def _forward(imported, x):
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request

    return (
        Executor(Limits()).forward(Request(graph=imported.graph, inputs={"x": x, **imported.parameters})).outputs["y"]
    )


@pytest.mark.parametrize("reshape", [False, True])
def test_a_dynamic_batch_named_by_the_model_needs_no_nodes_own_inference(monkeypatch, reshape):
    """No node of an MLP (and a Reshape to [0, 2, -1]) over x [batch, 40] is inferred a second time,
    and the model serves every batch as NumPy computes it."""
    calls = []
    original = importer._node_types
    monkeypatch.setattr(importer, "_node_types", lambda *a: calls.append(a[1].op_type) or original(*a))
    data = _mlp(reshape=reshape)
    imported = import_model(data)
    assert calls == []
    assert imported.inputs[0].shape == (-1, 40)
    for batch in (1, 3, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 40)).astype(np.float32)
        np.testing.assert_allclose(_forward(imported, x), _numpy_mlp(data, x), rtol=1e-5, atol=1e-5)


def test_a_dim_the_model_does_not_name_is_still_inferred_node_by_node(monkeypatch):
    """x's batch left unnamed (no dim_param): the model's inference cannot say which size the outputs'
    first dim is, so each node's own inference still runs, and the model serves every batch."""
    calls = []
    original = importer._node_types
    monkeypatch.setattr(importer, "_node_types", lambda *a: calls.append(a[1].op_type) or original(*a))
    model = onnx.load_model_from_string(_mlp(reshape=True))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].Clear()
    data = model.SerializeToString()
    imported = import_model(data)
    assert calls[:2] == ["Gemm", "Relu"]
    x = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32)
    np.testing.assert_allclose(_forward(imported, x), _numpy_mlp(data, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ir_version", [None, 3])
def test_onnx_inference_gets_no_weight_and_the_import_is_the_same(monkeypatch, ir_version):
    """ONNX's shape inference sees no initializer over SHAPE_ONLY elements (a Reshape's target stays
    one); the graph and parameters are those of an import that hands it every weight, weights listed
    as graph inputs (IR 3) or not."""
    data = _mlp(reshape=True, ir_version=ir_version)
    seen = []
    infer = onnx.shape_inference.infer_shapes

    def recording(model, *args, **kwargs):
        seen.append({t.name: int(np.prod(t.dims)) for t in model.graph.initializer})
        return infer(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", recording)
    light = import_model(data)
    assert seen == [{"b0": 40, "b1": 40, "b2": 40, "target": 3}]
    monkeypatch.setattr(importer, "SHAPE_ONLY", 2**40)
    full = import_model(data)
    assert seen[1].keys() >= {"w0", "w1", "w2"}
    assert light.graph == full.graph
    assert light.inputs == full.inputs and light.outputs == full.outputs
    assert light.parameters.keys() == full.parameters.keys()
    for name, array in light.parameters.items():
        np.testing.assert_array_equal(array, full.parameters[name])
    x = np.random.default_rng(3).standard_normal((4, 40)).astype(np.float32)
    np.testing.assert_allclose(_forward(light, x), _numpy_mlp(data, x), rtol=1e-5, atol=1e-5)


def test_the_test_models_import_the_same_without_weights_in_onnx_inference(monkeypatch, exported):
    """The ONNX tests' MLP, LeNet and encoder (TorchScript exporter, dynamic batch; their weights are
    under SHAPE_ONLY, so it is lowered to 16 here): the same graph, parameters and published shapes
    whether ONNX's inference sees the weights or not."""
    for name, (_module, _example, data) in exported.items():
        monkeypatch.setattr(importer, "SHAPE_ONLY", 16)
        light = import_model(data)
        monkeypatch.setattr(importer, "SHAPE_ONLY", 2**40)
        full = import_model(data)
        assert light.graph == full.graph, name
        assert (light.inputs, light.outputs) == (full.inputs, full.outputs), name
        assert light.parameters.keys() == full.parameters.keys(), name
