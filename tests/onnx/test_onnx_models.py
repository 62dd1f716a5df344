"""Exported PyTorch models imported in-process: outputs equal to onnxruntime's and PyTorch's,
input and parameter gradients equal to PyTorch's, and a batch's per-example input gradients
(one backward) equal to each example's alone."""

from __future__ import annotations

import numpy as np
import pytest

from tests.onnx.onnx_testkit import onnxruntime_output, run_in_process, sample, torch_grads
from wire.onnx import import_model

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

NAMES = ["mlp", "lenet", "encoder"]
TOL = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(params=NAMES)
def model(request, exported):
    if request.param == "lenet":
        request.getfixturevalue("needs_conv")
    return request.param, *exported[request.param]


def test_outputs_and_input_gradients_match_onnxruntime_and_pytorch(model):
    name, module, example, data = model
    imported = import_model(data)
    x = sample(example, batch=3)
    seed = np.random.default_rng(2).standard_normal(onnxruntime_output(data, x).shape).astype(np.float32)
    outputs, grads = run_in_process(imported, x, seed)
    expected, grad_x, _ = torch_grads(module, x, seed)
    np.testing.assert_allclose(outputs["y"], onnxruntime_output(data, x), **TOL)
    np.testing.assert_allclose(outputs["y"], expected, **TOL)
    assert set(grads) == {"x"}  # initializers are constants unless parameter gradients are asked for
    np.testing.assert_allclose(grads["x"], grad_x, **TOL)


def test_parameter_gradients_match_pytorch(model):
    name, module, example, data = model
    imported = import_model(data, parameter_gradients=True)
    x = sample(example, batch=2)
    seed = np.ones(onnxruntime_output(data, x).shape, np.float32)
    _, grads = run_in_process(imported, x, seed)
    _, _, expected = torch_grads(module, x, seed)
    compared = [n for n in expected if n in imported.parameters]
    assert len(compared) >= len(expected) // 2, (sorted(imported.parameters), sorted(expected))
    for n in compared:
        np.testing.assert_allclose(grads[n], expected[n], err_msg=n, **TOL)


def test_batch_saliency_is_per_example_in_one_backward(model):
    """The sum over a batch is separable: one backward over 4 examples gives each example the
    gradient it gets alone."""
    name, module, example, data = model
    imported = import_model(data)
    x = sample(example, batch=4, seed=7)
    out_shape = onnxruntime_output(data, x).shape
    seed = np.zeros(out_shape, np.float32)
    seed[:, 0] = 1  # the first output (class score) of each example
    _, batch_grads = run_in_process(imported, x, seed)
    for i in range(4):
        _, alone = run_in_process(imported, x[i : i + 1], seed[i : i + 1])
        np.testing.assert_allclose(batch_grads["x"][i : i + 1], alone["x"], **TOL)


def test_published_inputs_and_outputs_keep_the_dynamic_batch(exported):
    imported = import_model(exported["encoder"][2])
    assert [(t.name, t.datatype, t.shape) for t in imported.inputs] == [("x", "FP32", (-1, 5, 8))]
    assert [(t.name, t.datatype, t.shape) for t in imported.outputs] == [("y", "FP32", (-1, 5, 8))]


def test_weights_are_held_by_the_model_not_written_into_the_graph(exported):
    module, _, data = exported["encoder"]
    imported = import_model(data)
    constants = [n for n in imported.graph["nodes"] if n["op"] == "constant"]
    assert all(np.size(n["attrs"]["value"]) <= 16 for n in constants)
    held = {n["id"] for n in imported.graph["nodes"] if n["op"] == "input"} - {"x"}
    assert held == set(imported.parameters) and "layer.linear1.bias" in held
    assert not any(n.get("requires_grad") for n in imported.graph["nodes"] if n["id"] in held)
    np.testing.assert_array_equal(imported.parameters["layer.linear1.bias"], module.layer.linear1.bias.detach().numpy())


def test_the_dynamo_exporter_model_too(exported):
    """torch.onnx's default exporter (torch.export + onnxscript; about 4 s for this model) writes
    other op patterns than the TorchScript one (Shape arithmetic, opset 18 forms): same answers."""
    pytest.importorskip("onnxscript")
    import torch

    module, example, _ = exported["encoder"]
    program = torch.onnx.export(
        module,
        (example,),
        None,
        dynamo=True,
        dynamic_shapes=({0: torch.export.Dim("batch")},),
        input_names=["x"],
        output_names=["y"],
    )
    data = program.model_proto.SerializeToString()
    x = sample(example, batch=3)
    seed = np.random.default_rng(3).standard_normal((3, 5, 8)).astype(np.float32)
    outputs, grads = run_in_process(import_model(data), x, seed)
    expected, grad_x, _ = torch_grads(module, x, seed)
    np.testing.assert_allclose(outputs["y"], expected, **TOL)
    np.testing.assert_allclose(grads["x"], grad_x, **TOL)
