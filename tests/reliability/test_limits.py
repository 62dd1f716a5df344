"""Every limit refuses with a 4xx (413 for sizes) before allocating, and is reported by GET /info."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from wire.limits import Limits

from .conftest import (
    assert_error,
    binary_body,
    decode_response,
    json_tensor,
    settings_class,
    simple_graph,
    simple_request,
)

LIMIT_NAMES = (
    "max_body_bytes",
    "max_tensor_elements",
    "max_total_elements",
    "max_nodes",
    "max_depth",
    "max_tapes",
    "max_tape_bytes",
    "tape_ttl_s",
)


def find_key(obj, key):
    """Values of `key` anywhere in a JSON document."""
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                found.append(v)
            found.extend(find_key(v, key))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(find_key(v, key))
    return found


def test_settings_defaults_are_the_engine_limits():
    settings = settings_class()()
    for name, value in Limits().as_dict().items():
        assert getattr(settings, name) == value, name
    assert settings.host == "127.0.0.1"


def test_info_reports_every_limit(make_client):
    configured = {
        "max_body_bytes": 123456,
        "max_tensor_elements": 1000,
        "max_total_elements": 5000,
        "max_nodes": 77,
        "max_depth": 33,
        "max_tapes": 9,
        "max_tape_bytes": 99999,
        "tape_ttl_s": 12.5,
        "max_concurrency": 3,
        "compute_timeout_s": 7.5,
    }
    client = make_client(**configured)
    info = client.get("/info").json()
    for name, value in configured.items():
        values = find_key(info, name)
        assert values and values[0] == value, f"/info does not report {name}={value}: {json.dumps(info)[:500]}"


def _forward_json(client, shape, data, datatype="FP32"):
    body = {
        "graph": {
            "version": 1,
            "nodes": [{"id": "x", "op": "input"}, {"id": "s", "op": "sum", "inputs": ["x"]}],
            "outputs": ["s"],
        },
        "inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}],
    }
    return client.post("/forward", json=body)


@pytest.mark.parametrize(
    "shape", [[2**40, 2**40], [2**63, 2**63], [2**64 + 1], [10**40, 0], [0, 10**40, 10**40], [2**31] * 8]
)
def test_huge_shapes_are_refused_without_allocating(client, shape):
    response = _forward_json(client, shape, [1.0])
    body = assert_error(response, {413, 422})
    if 0 not in shape and max(shape) < 2**64:  # past 64 bits JSON integers aren't integers to the parser: 422
        assert response.status_code == 413, body


@pytest.mark.parametrize("shape", [[-1], [2, -3], [1.5], ["2"], [True], None, "3", [[2]]])
def test_bad_shapes_are_422(client, shape):
    assert_error(_forward_json(client, shape, [1.0, 2.0]), {400, 422})


def test_huge_shape_in_a_graph_attr_is_refused(client):
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "e", "op": "expand", "inputs": ["x"], "attrs": {"shape": [2**40, 2**40]}},
            {"id": "s", "op": "sum", "inputs": ["e"]},
        ],
        "outputs": ["s"],
    }
    response = client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", np.ones(1, np.float32))]})
    assert_error(response, {413, 422})
    graph["nodes"][1] = {"id": "e", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [2**62, 2**62]}}
    assert_error(
        client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", np.ones(1, np.float32))]}), {413, 422}
    )


@pytest.mark.parametrize("data", [[1.0], [1.0, 2.0, 3.0, 4.0], [[1.0, 2.0], [3.0]], []])
def test_declared_shape_must_match_data(client, data):
    assert_error(_forward_json(client, [3], data), {400, 422})


def test_content_length_over_max_body_bytes_is_413(make_client):
    client = make_client(max_body_bytes=1000)
    body = json.dumps(simple_request()).encode() + b" " * 2000
    response = client.post("/forward", content=body, headers={"Content-Type": "application/json"})
    assert_error(response, {413})
    assert client.post("/forward", json=simple_request()).status_code == 200


def test_chunked_body_over_max_body_bytes_is_413(make_client):
    client = make_client(max_body_bytes=1000)
    payload = json.dumps(simple_request()).encode() + b" " * 5000

    def chunks():
        for i in range(0, len(payload), 256):
            yield payload[i : i + 256]

    response = client.post("/forward", content=chunks(), headers={"Content-Type": "application/json"})
    assert_error(response, {413})
    assert client.post("/forward", json=simple_request()).status_code == 200


def test_tensor_and_total_element_limits(make_client):
    client = make_client(max_tensor_elements=100, max_total_elements=150)
    assert _forward_json(client, [100], [1.0] * 100).status_code == 200
    assert_error(_forward_json(client, [101], [1.0] * 101), {413})
    graph = {
        "version": 1,
        "nodes": [
            {"id": "a", "op": "input"},
            {"id": "b", "op": "input"},
            {"id": "s", "op": "add", "inputs": ["a", "b"]},
        ],
        "outputs": ["s"],
    }
    body = {
        "graph": graph,
        "inputs": [json_tensor("a", np.ones(80, np.float32)), json_tensor("b", np.ones(80, np.float32))],
    }
    assert_error(client.post("/forward", json=body), {413})
    # the same limit holds for binary tensors
    payload, headers = binary_body({"graph": graph}, {"a": np.ones(80, np.float32), "b": np.ones(80, np.float32)})
    assert_error(client.post("/forward", content=payload, headers=headers), {413})
    # an intermediate value over the per-tensor limit (outer product by broadcasting)
    graph = {
        "version": 1,
        "nodes": [
            {"id": "a", "op": "input"},
            {"id": "b", "op": "input"},
            {"id": "s", "op": "mul", "inputs": ["a", "b"]},
        ],
        "outputs": ["s"],
    }
    body = {
        "graph": graph,
        "inputs": [json_tensor("a", np.ones((20, 1), np.float32)), json_tensor("b", np.ones((1, 20), np.float32))],
    }
    assert_error(client.post("/forward", json=body), {413})


def _chain(n):
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    for i in range(n):
        nodes.append({"id": f"n{i}", "op": "neg", "inputs": ["x" if i == 0 else f"n{i - 1}"]})
    return {"version": 1, "nodes": nodes, "outputs": [nodes[-1]["id"]]}


def test_node_and_depth_limits(make_client):
    client = make_client(max_nodes=50, max_depth=20)
    x = [json_tensor("x", np.ones(2, np.float32))]
    assert client.post("/forward", json={"graph": _chain(15), "inputs": x}).status_code == 200
    assert_error(client.post("/forward", json={"graph": _chain(30), "inputs": x}), {413})  # depth 31 > 20
    wide = {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}] + [{"id": f"n{i}", "op": "neg", "inputs": ["x"]} for i in range(60)],
        "outputs": ["n0"],
    }
    assert_error(client.post("/forward", json={"graph": wide, "inputs": x}), {413})


def test_deep_graph_at_default_limits_does_not_crash(client):
    """A long chain must not blow the Python stack (recursion) in parse, forward or backward."""
    x = [json_tensor("x", np.ones(2, np.float32))]
    graph = _chain(5000)
    graph["nodes"].append({"id": "s", "op": "sum", "inputs": [graph["outputs"][0]]})
    graph["outputs"] = ["s"]
    response = client.post("/backward", json={"graph": graph, "inputs": x})
    assert response.status_code == 200, response.text[:300]
    np.testing.assert_array_equal(decode_response(response)["grads"]["x"], np.ones(2, np.float32))


def _retain(client):
    response = client.post("/forward", json={**simple_request(), "parameters": {"retain_graph": True}})
    tape = decode_response(response)["tape"]
    assert isinstance(tape, str) and tape
    return tape


def test_tapes_are_bounded_by_count_and_evicted_oldest_first(make_client):
    client = make_client(max_tapes=3)
    tapes = [_retain(client) for _ in range(6)]
    for tape in tapes[:3]:
        assert_error(client.post("/backward", json={"tape": tape}), {404, 409, 410})
    for tape in tapes[3:]:
        got = decode_response(client.post("/backward", json={"tape": tape}))
        np.testing.assert_array_equal(got["grads"]["x"], [2.0, 2.0])


def test_tapes_are_bounded_by_bytes(make_client):
    client = make_client(max_tape_bytes=64)
    big = np.ones(100, np.float32)
    body = {
        "graph": simple_graph(shape=big.shape),
        "inputs": [json_tensor("x", big)],
        "parameters": {"retain_graph": True},
    }
    assert_error(client.post("/forward", json=body), {413})
    assert client.post("/forward", json=simple_request()).status_code == 200


def test_tapes_expire(make_client):
    client = make_client(tape_ttl_s=0.2)
    tape = _retain(client)
    time.sleep(0.4)
    assert_error(client.post("/backward", json={"tape": tape}), {404, 410})


def test_unknown_tape_is_404(client):
    assert_error(client.post("/backward", json={"tape": "0" * 32}), {404})


def _data_body(data_json: str, datatype="FP32", shape=(1,)):
    graph = json.dumps(
        {
            "version": 1,
            "nodes": [{"id": "x", "op": "input"}, {"id": "s", "op": "sum", "inputs": ["x"]}],
            "outputs": ["s"],
        }
    )
    return (
        '{"graph": %s, "inputs": [{"name": "x", "shape": %s, "datatype": "%s", "data": %s}]}'
        % (graph, json.dumps(list(shape)), datatype, data_json)
    ).encode()


@pytest.mark.parametrize("leaf", ['"NaN"', "1.0", '"Infinity"'])
def test_deeply_nested_data_is_a_4xx_not_a_crash(client, leaf):
    """~1000 levels of nesting: the JSON parser accepts it; decoding must not recurse past Python's limit."""
    body = _data_body("[" * 1000 + leaf + "]" * 1000)
    assert_error(client.post("/forward", content=body, headers={"Content-Type": "application/json"}), {400, 413, 422})
    assert client.post("/forward", json=simple_request()).status_code == 200


@pytest.mark.parametrize(
    "data,datatype",
    [
        ("[9223372036854775808]", "INT64"),
        ("[-1]", "UINT8"),
        ("[300]", "UINT8"),
        ("[128]", "INT8"),
        ("[2147483648]", "INT32"),
        ("[70000]", "INT16"),
        ('["1.5"]', "FP32"),
        ('["nan"]', "FP32"),
        ("[null]", "FP32"),
        ("[2]", "BOOL"),
    ],
)
def test_data_outside_the_datatype_is_422_not_silently_converted(client, data, datatype):
    """Integers out of the datatype's range must not wrap around; numbers as strings other than the three
    spellings NaN/Infinity/-Infinity, and nulls, are not data."""
    body = _data_body(data, datatype)
    response = client.post("/forward", content=body, headers={"Content-Type": "application/json"})
    assert_error(response, {422})
