"""ONNX models served by a live `python -m service` through tritonclient, as a program that
knows only tritonclient does: loaded with Triton's load API (the file in the request) and from
a model repository directory at start; outputs, `grad:x` saliency (JSON and binary), parameter
gradients on request, and the metadata that says which gradients a model gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.onnx.onnx_testkit import onnxruntime_output, sample, torch_grads
from tests.service.service_testkit import running_server

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _write_repository(root, exported):
    for name in ("mlp", "lenet", "encoder"):
        folder = root / name / "1"
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(exported[name][2])
    (root / "encoder" / "config.pbtxt").write_text(
        'name: "encoder"\nplatform: "onnxruntime_onnx"\n'
        'parameters { key: "parameter_gradients" value { string_value: "true" } }\n'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory, exported):
    root = tmp_path_factory.mktemp("models")
    _write_repository(root, exported)
    log = tmp_path_factory.mktemp("onnx-server") / "server.log"
    with running_server(log, model_repository=str(root), max_nodes=5000) as live:
        yield live


@pytest.fixture
def triton(server):
    client = tritonclient_http.InferenceServerClient(url=server.base_url.removeprefix("http://"))
    yield client
    client.close()


def _infer(triton, name, x, outputs, binary, seed=None):
    tensor = tritonclient_http.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    inputs = [tensor]
    if seed is not None:
        seeded = tritonclient_http.InferInput("grad_output:y", list(seed.shape), "FP32")
        seeded.set_data_from_numpy(seed, binary_data=binary)
        inputs.append(seeded)
    requested = [tritonclient_http.InferRequestedOutput(n, binary_data=binary) for n in outputs]
    return triton.infer(name, inputs, outputs=requested)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_repository_model_serves_outputs_and_saliency(triton, exported, binary):
    module, example, data = exported["mlp"]
    x = sample(example, batch=5)
    seed = np.zeros((5, 3), np.float32)
    seed[np.arange(5), [0, 1, 2, 0, 1]] = 1  # each example's own class score
    result = _infer(triton, "mlp", x, ["y", "grad:x"], binary, seed)
    expected, grad_x, _ = torch_grads(module, x, seed)
    np.testing.assert_allclose(result.as_numpy("y"), onnxruntime_output(data, x), **TOL)
    np.testing.assert_allclose(result.as_numpy("y"), expected, **TOL)
    np.testing.assert_allclose(result.as_numpy("grad:x"), grad_x, **TOL)


def test_cnn_saliency_in_binary(triton, exported):
    module, example, data = exported["lenet"]
    x = sample(example, batch=4)
    seed = np.eye(5, dtype=np.float32)[[0, 3, 1, 4]]
    result = _infer(triton, "lenet", x, ["y", "grad:x"], True, seed)
    expected, grad_x, _ = torch_grads(module, x, seed)
    np.testing.assert_allclose(result.as_numpy("y"), onnxruntime_output(data, x), **TOL)
    np.testing.assert_allclose(result.as_numpy("y"), expected, **TOL)
    np.testing.assert_allclose(result.as_numpy("grad:x"), grad_x, **TOL)
    assert triton.get_model_metadata("lenet")["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 12, 12]}]


def test_metadata_says_which_gradients_a_model_gives(triton):
    metadata = triton.get_model_metadata("mlp")
    assert metadata["platform"] == "gradserve_onnx"
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert metadata["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "grad:x", "datatype": "FP32", "shape": [-1, 4]},
    ]
    encoder = triton.get_model_metadata("encoder")
    grads = [o["name"] for o in encoder["outputs"] if o["name"].startswith("grad:")]
    assert "grad:x" in grads and "grad:layer.linear1.weight" in grads  # config.pbtxt asked for parameter gradients
    assert [i["name"] for i in encoder["inputs"]] == ["x"]  # parameters are held by the model


def test_parameter_gradients_on_request(triton, exported):
    module, example, data = exported["encoder"]
    x = sample(example, batch=2)
    seed = np.ones((2, 5, 8), np.float32)
    names = ["layer.linear1.weight", "layer.norm2.bias"]
    result = _infer(triton, "encoder", x, ["y", *(f"grad:{n}" for n in names)], True, seed)
    expected, _, params = torch_grads(module, x, seed)
    np.testing.assert_allclose(result.as_numpy("y"), expected, **TOL)
    for n in names:
        np.testing.assert_allclose(result.as_numpy(f"grad:{n}"), params[n], err_msg=n, **TOL)


def test_load_api_carries_the_model_file(triton, exported):
    module, example, data = exported["encoder"]
    triton.load_model("enc2", config=json.dumps({"backend": "onnxruntime"}), files={"file:1/model.onnx": data})
    try:
        assert triton.is_model_ready("enc2")
        x = sample(example, batch=3)
        seed = np.ones((3, 5, 8), np.float32)
        result = _infer(triton, "enc2", x, ["y", "grad:x"], False, seed)
        expected, grad_x, _ = torch_grads(module, x, seed)
        np.testing.assert_allclose(result.as_numpy("y"), onnxruntime_output(data, x), **TOL)
        np.testing.assert_allclose(result.as_numpy("grad:x"), grad_x, **TOL)
    finally:
        triton.unload_model("enc2")


def test_a_request_cannot_send_a_parameter_the_model_holds(triton):
    x = tritonclient_http.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    bias = tritonclient_http.InferInput("l1.bias", [16], "FP32")
    bias.set_data_from_numpy(np.zeros(16, np.float32))
    with pytest.raises(InferenceServerException, match="input 'l1.bias' is a parameter that model 'mlp' holds"):
        triton.infer("mlp", [x, bias])


def test_a_wrong_input_shape_names_the_input(triton):
    with pytest.raises(InferenceServerException, match=r"input 'x' has shape \[2, 5\]; model 'mlp' takes \[-1, 4\]"):
        _infer(triton, "mlp", np.zeros((2, 5), np.float32), ["y"], False)
