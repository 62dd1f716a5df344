"""NaN and ±inf travel faithfully both ways, in JSON (spelled) and binary; IEEE results aren't errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import (
    assert_error,
    assert_same,
    binary_body,
    decode_response,
    json_tensor,
    strict_json,
)

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], dtype=np.float32)


def _graph(op, shape, extra=None):
    nodes = [{"id": "x", "op": "input", "requires_grad": True, "shape": list(shape), "dtype": "FP32"}]
    nodes += extra or []
    nodes.append({"id": "y", "op": op, "inputs": ["x"] + [n["id"] for n in extra or []]})
    return {"version": 1, "nodes": nodes, "outputs": ["y"]}


@pytest.mark.parametrize("binary", [False, True])
def test_nonfinite_inputs_and_outputs_round_trip(client, binary):
    header = {"graph": _graph("clone", SPECIAL.shape), "parameters": {"binary_data_output": binary}}
    if binary:
        body, headers = binary_body(header, {"x": SPECIAL})
        response = client.post("/forward", content=body, headers=headers)
    else:
        header["inputs"] = [json_tensor("x", SPECIAL)]
        response = client.post("/forward", content=json.dumps(header), headers={"Content-Type": "application/json"})
    got = decode_response(response)["outputs"]["y"]
    assert_same(got, SPECIAL, exact=True)
    assert np.signbit(got[4])  # -0.0 survives
    if not binary:
        data = strict_json(response.content)["outputs"][0]["data"]
        assert data[:3] == ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("binary", [False, True])
def test_backward_carries_nonfinite_gradients(client, binary):
    x = np.array([0.0, -1.0, 4.0], dtype=np.float32)
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True, "shape": [3], "dtype": "FP32"},
            {"id": "l", "op": "log", "inputs": ["x"]},
            {"id": "s", "op": "sum", "inputs": ["l"]},
        ],
        "outputs": ["l"],
    }
    header = {
        "graph": graph,
        "parameters": {"binary_data_output": binary},
        "grad_outputs": [json_tensor("l", np.ones(3, np.float32))],
    }
    header["inputs"] = [json_tensor("x", x)]
    response = client.post("/backward", content=json.dumps(header), headers={"Content-Type": "application/json"})
    got = decode_response(response)
    with np.errstate(all="ignore"):
        assert_same(got["outputs"]["l"], np.log(x))
        assert_same(got["grads"]["x"], 1.0 / x)


@pytest.mark.parametrize(
    "op,a,b",
    [
        ("div", [1.0, -1.0, 0.0], [0.0, 0.0, 0.0]),
        ("log", [-1.0, 0.0, 1.0], None),
        ("sqrt", [-4.0, 0.0, 4.0], None),
        ("pow", [0.0, -8.0, 2.0], [-1.0, 0.5, 1e10]),
    ],
)
def test_ieee_results_are_answers_not_errors(client, op, a, b):
    a = np.array(a, np.float32)
    extra = None
    if b is not None:
        extra = [{"id": "b", "op": "constant", "attrs": {"value": b, "dtype": "FP32"}}]
    header = {"graph": _graph(op, a.shape, extra), "inputs": [json_tensor("x", a)]}
    response = client.post("/forward", content=json.dumps(header), headers={"Content-Type": "application/json"})
    got = decode_response(response)["outputs"]["y"]
    with np.errstate(all="ignore"):
        expected = {
            "div": lambda: a / np.float32(b),
            "log": lambda: np.log(a),
            "sqrt": lambda: np.sqrt(a),
            "pow": lambda: a ** np.array(b, np.float32),
        }[op]()
    assert_same(got, expected)
    assert not np.isfinite(got).all()


def test_bare_nan_literals_in_a_request_are_rejected_or_read_as_nan(client):
    """Python's json writes bare NaN; the server must not 500 on it (strict 400, or NaN accepted)."""
    header = {
        "graph": _graph("clone", (2,)),
        "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}],
    }
    body = json.dumps(header).replace("[1.0, 2.0]", "[NaN, Infinity]")
    response = client.post("/forward", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code in (200, 400, 422), response.text[:300]
    if response.status_code == 200:
        assert np.isnan(decode_response(response)["outputs"]["y"][0])


@pytest.mark.parametrize("p", ["Infinity", "-Infinity"])
def test_nonfinite_attrs_can_be_spelled_in_strict_json(client, p):
    """norm's p=inf (a registry sample) needs attrs to accept the "Infinity" spelling of tensor data;
    p=-inf is spelled fine but norm wants p > 0: a 422 naming the attribute."""
    x = np.array([1.0, -3.0, 2.0], np.float32)
    graph = {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}, {"id": "y", "op": "norm", "inputs": ["x"], "attrs": {"p": p}}],
        "outputs": ["y"],
    }
    response = client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", x)]})
    if p == "-Infinity":
        body = assert_error(response, {422})
        assert body["node"] == "y" and body["field"] == "attrs"
        return
    assert decode_response(response)["outputs"]["y"] == pytest.approx(np.abs(x).max())
