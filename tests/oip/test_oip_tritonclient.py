"""tritonclient (HTTP, sync) against a live `python -m service`: the Open Inference Protocol face."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.oip.oip_testkit import (
    MLP,
    TWO_OUTPUTS,
    W,
    X,
    config,
    infer_input,
    mlp_expected,
    requested,
)


def test_liveness_readiness_and_server_metadata(triton):
    assert triton.is_server_live()
    assert triton.is_server_ready()
    metadata = triton.get_server_metadata()
    assert metadata["name"] == "gradserve"
    assert {"binary_tensor_data", "model_repository"} <= set(metadata["extensions"])


def test_load_publishes_metadata_config_readiness_and_index(triton, mlp):
    assert triton.is_model_ready(mlp)
    assert triton.is_model_ready(mlp, model_version="1")
    assert {"name": mlp, "version": "1", "state": "READY", "reason": ""} in triton.get_model_repository_index()
    metadata = triton.get_model_metadata(mlp)
    assert metadata["name"] == mlp and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [2, 3]},
        {"name": "w", "datatype": "FP32", "shape": [3, 1]},
    ]
    assert [o["name"] for o in metadata["outputs"]] == ["loss", "grad:w"]  # x does not require grad
    assert triton.get_model_metadata(mlp, model_version="1") == metadata
    model_config = triton.get_model_config(mlp)
    assert model_config["graph"] == MLP
    assert {"name": "grad_output:loss", "data_type": "TYPE_FP32", "dims": [-1], "optional": True} in model_config[
        "input"
    ]


def test_unload_forgets_the_model(triton):
    triton.load_model("short-lived", config=config(MLP))
    assert triton.is_model_ready("short-lived")
    triton.unload_model("short-lived")
    assert not triton.is_model_ready("short-lived")
    assert all(entry["name"] != "short-lived" for entry in triton.get_model_repository_index())
    with pytest.raises(InferenceServerException) as err:
        triton.unload_model("short-lived")
    assert err.value.status() == "404"


def test_reload_replaces_the_graph(triton):
    triton.load_model("swap", config=config(MLP))
    triton.load_model("swap", config=config(TWO_OUTPUTS))
    try:
        assert [o["name"] for o in triton.get_model_metadata("swap")["outputs"]] == ["y", "z", "grad:a", "grad:b"]
    finally:
        triton.unload_model("swap")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_forward_only(triton, mlp, binary):
    result = triton.infer(
        mlp, [infer_input("x", X, binary), infer_input("w", W, binary)], outputs=requested("loss", binary=binary)
    )
    loss, _ = mlp_expected()
    assert result.as_numpy("loss") == pytest.approx(loss, rel=1e-5)
    assert result.as_numpy("grad:w") is None  # not asked for: no backward ran
    response = result.get_response()
    assert response["model_name"] == mlp and response["model_version"] == "1"
    assert ("data" in response["outputs"][0]) is not binary


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_gradients_as_outputs(triton, mlp, binary):
    result = triton.infer(
        mlp,
        [infer_input("x", X, binary), infer_input("w", W, binary)],
        outputs=requested("loss", "grad:w", binary=binary),
        request_id="req-7",
    )
    loss, grad_w = mlp_expected()
    assert result.as_numpy("loss") == pytest.approx(loss, rel=1e-5)
    got = result.as_numpy("grad:w")
    assert got.shape == (3, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got, grad_w, rtol=1e-5, atol=1e-6)
    assert result.get_response()["id"] == "req-7"


def test_no_outputs_requested_means_every_output_in_binary(triton, mlp):
    """tritonclient sends no `outputs` and `binary_data_output: true`: every output the metadata
    lists comes back (gradients included), binary."""
    result = triton.infer(mlp, [infer_input("x", X, False), infer_input("w", W, False)])
    response = result.get_response()
    assert [o["name"] for o in response["outputs"]] == ["loss", "grad:w"]
    assert all("binary_data_size" in o["parameters"] for o in response["outputs"])
    np.testing.assert_allclose(result.as_numpy("grad:w"), mlp_expected()[1], rtol=1e-5, atol=1e-6)


def test_per_output_binary_data_overrides_the_request_default(triton, mlp):
    outputs = [tritonclient_output("loss", True), tritonclient_output("grad:w", False)]
    result = triton.infer(mlp, [infer_input("x", X, True), infer_input("w", W, True)], outputs=outputs)
    by_name = {o["name"]: o for o in result.get_response()["outputs"]}
    assert "binary_data_size" in by_name["loss"]["parameters"] and "data" not in by_name["loss"]
    assert "data" in by_name["grad:w"]
    np.testing.assert_allclose(result.as_numpy("grad:w"), mlp_expected()[1], rtol=1e-5, atol=1e-6)
    assert result.as_numpy("loss") == pytest.approx(mlp_expected()[0], rel=1e-5)


def tritonclient_output(name, binary):
    from tritonclient.http import InferRequestedOutput

    return InferRequestedOutput(name, binary_data=binary)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_grad_output_seeds_a_non_scalar_output(triton, binary):
    """grad:a of y = a * b (not a scalar) and z = sum(exp(a)): the seed of y is an input
    tensor `grad_output:y`; z, a scalar, is seeded with 1. FP64 in, FP64 out."""
    triton.load_model("two", config=config(TWO_OUTPUTS))
    try:
        rng = np.random.default_rng(3)
        a, b, g = (rng.standard_normal((2, 2)) for _ in range(3))
        inputs = [infer_input("a", a, binary), infer_input("b", b, binary), infer_input("grad_output:y", g, binary)]
        result = triton.infer("two", inputs, outputs=requested("y", "grad:a", "grad:b", binary=binary))
        np.testing.assert_allclose(result.as_numpy("y"), a * b, rtol=1e-12)
        np.testing.assert_allclose(result.as_numpy("grad:a"), g * b + np.exp(a), rtol=1e-12)
        np.testing.assert_allclose(result.as_numpy("grad:b"), g * a, rtol=1e-12)
        assert result.as_numpy("grad:a").dtype == np.float64
        with pytest.raises(InferenceServerException) as err:  # without the seed: the error names it
            triton.infer("two", inputs[:2], outputs=requested("grad:a", binary=binary))
        assert err.value.status() == "422" and "grad_output:y" in err.value.message()
    finally:
        triton.unload_model("two")


def test_a_bad_graph_is_refused_at_load_naming_the_node(triton, server):
    bad = {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}, {"id": "boom", "op": "frobnicate", "inputs": ["x"]}],
        "outputs": ["boom"],
    }
    with pytest.raises(InferenceServerException) as err:
        triton.load_model("bad", config=config(bad))
    assert err.value.status() == "422" and "boom" in err.value.message()
    assert not triton.is_model_ready("bad")
    raw = httpx.post(f"{server.base_url}/v2/repository/models/bad/load", json={"parameters": {"config": config(bad)}})
    assert raw.status_code == 422
    assert raw.json()["node"] == "boom" and raw.json()["field"] == "op"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({}, 422, "parameters.config"),
        ({"parameters": {"config": 3}}, 422, "parameters.config"),
        ({"parameters": {"config": "{not json"}}, 400, "parameters.config"),
        ({"parameters": {"config": config(MLP), "file:1/model.onnx": "AAAA"}}, 400, "parameters.file:1/model.onnx"),
    ],
)
def test_bad_loads_name_the_field(server, body, status, field):
    response = httpx.post(f"{server.base_url}/v2/repository/models/m/load", json=body)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


def test_reserved_names_are_refused_at_load(server):
    graph = {"version": 1, "nodes": [{"id": "grad_output:q", "op": "input"}], "outputs": ["grad_output:q"]}
    response = httpx.post(
        f"{server.base_url}/v2/repository/models/m/load", json={"parameters": {"config": config(graph)}}
    )
    assert response.status_code == 422 and response.json()["node"] == "grad_output:q"
    response = httpx.post(
        f"{server.base_url}/v2/repository/models/bad%20name/load", json={"parameters": {"config": config(MLP)}}
    )
    assert response.status_code == 400 and response.json()["field"] == "name"


def test_unknown_model_is_404(triton, server):
    with pytest.raises(InferenceServerException) as err:
        triton.infer("nowhere", [infer_input("x", X, False)])
    assert err.value.status() == "404" and "nowhere" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        triton.get_model_metadata("nowhere")
    assert err.value.status() == "404"
    assert not triton.is_model_ready("nowhere")
    assert httpx.get(f"{server.base_url}/v2/models/nowhere/config").status_code == 404


def test_unknown_version_is_404(triton, mlp):
    with pytest.raises(InferenceServerException) as err:
        triton.infer(mlp, [infer_input("x", X, False), infer_input("w", W, False)], model_version="2")
    assert err.value.status() == "404"
    assert not triton.is_model_ready(mlp, model_version="2")
    result = triton.infer(mlp, [infer_input("x", X, False), infer_input("w", W, False)], model_version="1")
    assert result.get_response()["model_version"] == "1"


@pytest.mark.parametrize(
    ("outputs", "inputs", "status", "node", "field"),
    [
        ([{"name": "nope"}], None, 422, None, "outputs[0].name"),
        ([{"name": "loss"}, {"name": "loss"}], None, 422, None, "outputs[1].name"),
        (
            [{"name": "loss", "parameters": {"binary_data": "yes"}}],
            None,
            422,
            None,
            "outputs[0].parameters.binary_data",
        ),
        (
            [{"name": "loss", "parameters": {"shared_memory_region": "r"}}],
            None,
            422,
            None,
            "outputs[0].parameters.shared_memory_region",
        ),
        ([{"name": "grad:x"}], None, 422, None, "outputs[0].name"),  # x does not require grad: no such output
        ([{"name": "loss"}], ["x"], 422, "w", "inputs"),  # w missing
        ([{"name": "grad:w"}], ["x", "w", "grad_output:h"], 422, "h", "inputs"),  # h is no output
        ([{"name": "loss"}], ["x", "w", "grad_output:loss"], 422, None, "inputs"),  # a seed without a gradient asked
    ],
)
def test_bad_infer_requests_name_the_node_or_field(server, mlp, outputs, inputs, status, node, field):
    arrays = {"x": X, "w": W, "grad_output:h": X, "grad_output:loss": np.float32(1.0)}
    tensors = [
        {"name": n, "shape": list(np.shape(arrays[n])), "datatype": "FP32", "data": np.ravel(arrays[n]).tolist()}
        for n in (inputs or ["x", "w"])
    ]
    response = httpx.post(f"{server.base_url}/v2/models/{mlp}/infer", json={"inputs": tensors, "outputs": outputs})
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "node", "field", "request_id"} and body["error"]
    assert body["node"] == node and body["field"] == field


def test_tensor_errors_keep_the_wire_fields(server, mlp):
    tensors = [
        {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2]},
        {"name": "w", "shape": [3, 1], "datatype": "FP32", "data": [1, 2, 3]},
    ]
    response = httpx.post(f"{server.base_url}/v2/models/{mlp}/infer", json={"inputs": tensors})
    assert response.status_code == 422 and response.json()["field"] == "inputs[0].data"
    response = httpx.post(
        f"{server.base_url}/v2/models/{mlp}/infer", content=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["field"] == "body"


@pytest.mark.parametrize("content_type", [None, "application/octet-stream", "application/json"])
def test_json_bodies_under_the_content_types_the_clients_send(server, mlp, content_type):
    """tritonclient's sync client sends no Content-Type, its aio client (aiohttp) sends
    application/octet-stream for a JSON body without binary tensors: each is a JSON body."""
    tensors = [
        {"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
        for n, a in (("x", X), ("w", W))
    ]
    body = json.dumps({"inputs": tensors, "outputs": [{"name": "grad:w"}]}).encode()
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = httpx.post(f"{server.base_url}/v2/models/{mlp}/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        np.reshape(response.json()["outputs"][0]["data"], (3, 1)), mlp_expected()[1], rtol=1e-5, atol=1e-6
    )


def test_an_infer_with_no_outputs_on_a_non_scalar_model_says_how_to_run_a_forward(triton):
    """`client.infer(model, inputs)` without `outputs=` asks for every output, gradients included: the
    refusal of a model with a non-scalar output names the seed to send and the way to a forward only."""
    triton.load_model("two", config=config(TWO_OUTPUTS))
    try:
        a, b = np.ones((2, 2)), np.full((2, 2), 3.0)
        inputs = [infer_input("a", a, False), infer_input("b", b, False)]
        with pytest.raises(InferenceServerException) as err:
            triton.infer("two", inputs)
        assert err.value.status() == "422"
        assert "grad_output:y" in err.value.message() and "request only the forward outputs" in err.value.message()
        result = triton.infer("two", inputs, outputs=requested("y", binary=False))
        np.testing.assert_allclose(result.as_numpy("y"), a * b)
    finally:
        triton.unload_model("two")
