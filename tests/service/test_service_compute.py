"""/forward and /backward: values against the engine run directly, JSON and binary tensors both ways."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from service_testkit import (
    EXAMPLE,
    HEADER_LENGTH,
    binary_body,
    binary_tensor,
    decode_response,
    example,
)

import engine
from engine import Variable
from engine.autograd import grad

X = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
W = np.array([[0.1], [0.2], [0.3]], dtype=np.float32)


def engine_example(x=X, w=W):
    """The example expression built with engine Variables: (loss, dloss/dw)."""
    xv, wv = Variable(x), Variable(w, requires_grad=True)
    loss = engine.sum(engine.clamp(engine.mm(xv, wv), min=0) * 2.0)
    (dw,) = grad([loss], [wv])
    return loss.data, dw.data


def test_forward_matches_engine(api):
    response = api.post("/forward", json=EXAMPLE)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"] == "r1" and "grads" not in body and "tape" not in body
    (out,) = body["outputs"]
    loss, _ = engine_example()
    assert out["name"] == "loss" and out["shape"] == [] and out["datatype"] == "FP32"
    np.testing.assert_allclose(out["data"], [loss], rtol=1e-6)


def test_backward_matches_engine(api):
    response = api.post("/backward", json=EXAMPLE)
    assert response.status_code == 200, response.text
    result = decode_response(response)
    loss, dw = engine_example()
    np.testing.assert_allclose(result["outputs"]["loss"], loss, rtol=1e-6)
    assert result["grads"]["w"].dtype == np.float32 and result["grads"]["w"].shape == (3, 1)
    np.testing.assert_allclose(result["grads"]["w"], dw, rtol=1e-6)
    np.testing.assert_allclose(result["grads"]["w"].ravel(), [10.0, 14.0, 18.0], rtol=1e-6)


def test_backward_random_inputs_wrt_and_grad_outputs(
    api,
):
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(3,))
    seed = rng.normal(size=(4, 3))
    graph = {
        "version": 1,
        "nodes": [
            {"id": "a", "op": "input", "requires_grad": True, "shape": [4, 3], "dtype": "FP64"},
            {"id": "b", "op": "input", "requires_grad": True},
            {"id": "p", "op": "mul", "inputs": ["a", "b"]},
            {"id": "t", "op": "tanh", "inputs": ["p"]},
            {"id": "e", "op": "exp", "inputs": ["b"]},
            {"id": "y", "op": "add", "inputs": ["t", "e"]},
        ],
        "outputs": ["y"],
    }
    request = {
        "graph": graph,
        "wrt": ["a", "b", "p"],
        "inputs": [
            {"name": "a", "shape": [4, 3], "datatype": "FP64", "data": a.tolist()},
            {"name": "b", "shape": [3], "datatype": "FP64", "data": b.tolist()},
        ],
        "grad_outputs": [{"name": "y", "shape": [4, 3], "datatype": "FP64", "data": seed.ravel().tolist()}],
    }
    response = api.post("/backward", json=request)
    assert response.status_code == 200, response.text
    result = decode_response(response)
    av, bv = Variable(a, requires_grad=True), Variable(b, requires_grad=True)
    p = av * bv
    y = engine.tanh(p) + engine.exp(bv)
    da, db, dp = grad([y], [av, bv, p], [Variable(seed)])
    np.testing.assert_allclose(result["outputs"]["y"], y.data, rtol=1e-12)
    assert list(result["grads"]) == ["a", "b", "p"]
    np.testing.assert_allclose(result["grads"]["a"], da.data, rtol=1e-12)
    np.testing.assert_allclose(result["grads"]["b"], db.data, rtol=1e-12)
    np.testing.assert_allclose(result["grads"]["p"], dp.data, rtol=1e-12)


def _binary_example(parameters=None):
    buffers = []
    header = {
        "id": 7,
        "graph": EXAMPLE["graph"],
        "inputs": [binary_tensor("x", X, buffers), binary_tensor("w", W, buffers)],
    }
    if parameters:
        header["parameters"] = parameters
    return binary_body(header, buffers)


@pytest.mark.parametrize("request_kind", ["json", "binary", "mixed"])
@pytest.mark.parametrize("response_kind", ["json", "binary"])
def test_binary_and_json_both_ways(api, request_kind, response_kind):
    params = {"binary_data_output": True} if response_kind == "binary" else None
    if request_kind == "json":
        body = example(id=7, **({"parameters": params} if params else {}))
        response = api.post("/backward", content=orjson.dumps(body), headers={"Content-Type": "application/json"})
    elif request_kind == "binary":
        content, headers = _binary_example(params)
        response = api.post("/backward", content=content, headers=headers)
    else:  # x as JSON data, w as binary
        buffers = []
        header = {"id": 7, "graph": EXAMPLE["graph"], "inputs": [EXAMPLE["inputs"][0], binary_tensor("w", W, buffers)]}
        if params:
            header["parameters"] = params
        content, headers = binary_body(header, buffers)
        response = api.post("/backward", content=content, headers=headers)
    assert response.status_code == 200, response.text
    if response_kind == "binary":
        assert response.headers["content-type"] == "application/octet-stream"
        length = int(response.headers[HEADER_LENGTH])
        head = orjson.loads(response.content[:length])
        assert head["outputs"][0]["parameters"]["binary_data_size"] == 4
        assert head["grads"][0]["parameters"]["binary_data_size"] == 12
        assert len(response.content) == length + 16
    else:
        assert HEADER_LENGTH not in response.headers
        assert response.headers["content-type"] == "application/json"
    result = decode_response(response)
    assert result["id"] == 7
    loss, dw = engine_example()
    np.testing.assert_allclose(result["outputs"]["loss"], loss, rtol=1e-6)
    np.testing.assert_allclose(result["grads"]["w"], dw, rtol=1e-6)


def test_binary_forward_many_dtypes(api):
    buffers = []
    arrays = {
        "f16": np.array([1.5, -2.0], np.float16),
        "f64": np.array([[1.0, 2.0]], np.float64),
        "i32": np.array([3, 4], np.int32),
        "b": np.array([True, False]),
    }
    graph = {
        "version": 1,
        "nodes": [{"id": n, "op": "input"} for n in arrays]
        + [
            {"id": "s", "op": "add", "inputs": ["f16", "f64"]},
            {"id": "c", "op": "clone", "inputs": ["i32"]},
            {"id": "w", "op": "where", "inputs": ["b", "f64", "f16"]},
        ],
        "outputs": ["s", "c", "w"],
    }
    header = {
        "graph": graph,
        "inputs": [binary_tensor(n, a, buffers) for n, a in arrays.items()],
        "parameters": {"binary_data_output": True},
    }
    content, headers = binary_body(header, buffers)
    response = api.post("/forward", content=content, headers=headers)
    assert response.status_code == 200, response.text
    out = decode_response(response)["outputs"]
    np.testing.assert_array_equal(out["s"], arrays["f16"] + arrays["f64"])
    assert out["c"].dtype == np.int32
    np.testing.assert_array_equal(out["c"], arrays["i32"])
    np.testing.assert_array_equal(out["w"], np.where(arrays["b"], arrays["f64"], arrays["f16"]))


def test_non_finite_values_are_spelled_and_silent(api):
    graph = {
        "version": 1,
        "nodes": [
            {"id": "a", "op": "input", "requires_grad": True},
            {"id": "z", "op": "input"},
            {"id": "q", "op": "div", "inputs": ["a", "z"]},
            {"id": "l", "op": "log", "inputs": ["a"]},
        ],
        "outputs": ["q", "l"],
    }
    request = {
        "graph": graph,
        "inputs": [
            {"name": "a", "shape": [3], "datatype": "FP64", "data": [1.0, -1.0, "NaN"]},
            {"name": "z", "shape": [3], "datatype": "FP64", "data": [0.0, 0.0, "Infinity"]},
        ],
    }
    response = api.post("/forward", json=request)
    assert response.status_code == 200, response.text
    out = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert out["q"] == ["Infinity", "-Infinity", "NaN"]
    assert out["l"] == [0.0, "NaN", "NaN"]


def test_function_node(api):
    """A custom Function whose backward is given as a subgraph (here: d/dx x^2 = 2 x g)."""
    square = {
        "name": "Square",
        "forward": {
            "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, {"id": "sq", "op": "mul", "inputs": ["a", "a"]}],
            "outputs": ["sq"],
        },
        "backward": {
            "nodes": [
                {"id": "a", "op": "arg", "attrs": {"index": 0}},
                {"id": "g", "op": "grad_output"},
                {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
                {"id": "ta", "op": "mul", "inputs": ["a", "two"]},
                {"id": "ga", "op": "mul", "inputs": ["ta", "g"]},
            ],
            "outputs": ["ga"],
        },
    }
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True},
            {"id": "f", "op": "function", "inputs": ["x"], "attrs": square},
            {"id": "s", "op": "sum", "inputs": ["f"]},
        ],
        "outputs": ["s"],
    }
    response = api.post(
        "/backward",
        json={"graph": graph, "inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]},
    )
    assert response.status_code == 200, response.text
    result = decode_response(response)
    np.testing.assert_allclose(result["outputs"]["s"], 14.0)
    np.testing.assert_allclose(result["grads"]["x"], [2.0, 4.0, 6.0])


def test_nested_json_data_and_integer_id(api):
    body = example(id=12)
    body["inputs"][0]["data"] = [[1, 2, 3], [4, 5, 6]]
    response = api.post("/forward", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == 12


def _bit_pattern_request(count: int) -> tuple[np.ndarray, bytes, dict]:
    """(x, body, headers) of a binary /forward cloning float32 `x` whose bits are random (NaN payloads included)."""
    x = np.random.default_rng(3).integers(0, 2**32, count, dtype=np.uint32).view(np.float32)
    buffers = []
    header = {
        "graph": {
            "version": 1,
            "nodes": [{"id": "x", "op": "input"}, {"id": "y", "op": "clone", "inputs": ["x"]}],
            "outputs": ["y"],
        },
        "inputs": [binary_tensor("x", x, buffers)],
        "parameters": {"binary_data_output": True},
    }
    content, headers = binary_body(header, buffers)
    return x, content, headers


def _assert_byte_exact_clone(response, x: np.ndarray):
    assert response.status_code == 200, response.text
    length = int(response.headers[HEADER_LENGTH])
    assert int(response.headers["content-length"]) == len(response.content) == length + x.nbytes
    assert orjson.loads(response.content[:length])["outputs"][0]["parameters"]["binary_data_size"] == x.nbytes
    assert response.content[length:] == x.tobytes()


def test_binary_round_trip_over_many_chunks_is_byte_exact(api):
    x, content, headers = _bit_pattern_request(60_000)  # 240 KB: several reads of the body, under the test limit
    _assert_byte_exact_clone(api.post("/forward", content=content, headers=headers), x)


def test_large_binary_round_trip_is_byte_exact():
    from service_testkit import asgi_client

    x, content, headers = _bit_pattern_request(4 * 2**20)  # 16 MiB
    with asgi_client(max_body_bytes=64 * 2**20) as client:
        _assert_byte_exact_clone(client.post("/forward", content=content, headers=headers), x)


def test_binary_response_pieces_join_to_the_encoded_body():
    from wire.messages import Result, encode_result, encode_result_parts

    result = Result("r", {"y": np.arange(6, dtype=np.float32).reshape(2, 3)}, {"x": np.ones(3, np.int64)}, tape="t")
    parts, length = encode_result_parts(result, binary=True)
    body, joined_length = encode_result(result, binary=True)
    assert len(parts) == 3 and length == joined_length == len(parts[0])
    assert b"".join(parts) == body
    assert body[length:] == result.outputs["y"].tobytes() + result.grads["x"].tobytes()
    assert encode_result_parts(result, binary=False) == ([encode_result(result, binary=False)[0]], None)


def test_the_served_app_and_the_compute_threads_run_in_a_quiet_context():
    """uvicorn's factory (`worker_app`) and each compute thread turn IEEE warnings off in their
    context once, so their requests skip `numpy.errstate`."""
    import contextvars

    from service.cli import worker_app
    from service.compute import ComputePool
    from wire.handler import IEEE_QUIET

    context = contextvars.copy_context()
    assert context.run(worker_app).direct  # the app, with its compute routes
    assert context.run(IEEE_QUIET.get) and context.run(np.geterr)["divide"] == "ignore"
    pool = ComputePool(1, 10.0, 10.0, 2**20)
    try:
        assert pool._threads().submit(lambda: (IEEE_QUIET.get(), np.geterr()["over"])).result() == (True, "ignore")
    finally:
        pool.shutdown()
    assert not IEEE_QUIET.get()
