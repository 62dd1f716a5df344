"""Every field of a valid request, turned into every other kind of JSON value, is a 4xx or an answer.

Not random: each request below is walked and every value in it (graph, nodes, attrs, function
subgraphs, grad nodes, tensor objects, parameters; `/v2` load configs and infer bodies) is replaced in
turn by each of `REPLACEMENTS` (the other JSON types, an unhashable value where a name is expected,
lists nested 1,000 deep, huge and negative numbers). Each mutated body goes through the ASGI app, and the
answer must be a success or a 4xx JSON error with a bounded message; never a 5xx.
"""

from __future__ import annotations

import copy
import json

import orjson
import pytest

DEEP = "[" * 1000 + "]" * 1000  # spliced in as text: json.dumps would recurse
DEEP_MARK = "\x00deep\x00"
REPLACEMENTS = [None, True, 0, -1, 2.5, 2**70, "", "x", [], [[]], {}, {"a": []}, ["x", 1], DEEP_MARK]
MAX_MESSAGE = 4096  # an error message never echoes a hostile value whole

SQUARE = {
    "name": "Square",
    "forward": {
        "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, {"id": "sq", "op": "mul", "inputs": ["a", "a"]}],
        "outputs": ["sq"],
    },
    "backward": {
        "nodes": [
            {"id": "a", "op": "arg", "attrs": {"index": 0}},
            {"id": "g", "op": "grad_output"},
            {"id": "f", "op": "forward_value", "attrs": {"node": "sq"}},
            {"id": "two", "op": "constant", "attrs": {"value": 2.0, "dtype": "FP64"}},
            {"id": "ta", "op": "mul", "inputs": ["a", "two"]},
            {"id": "ga", "op": "mul", "inputs": ["ta", "g"]},
        ],
        "outputs": ["ga"],
    },
}
GRAPH = {
    "version": "1.1",
    "nodes": [
        {"id": "x", "op": "input", "requires_grad": True, "shape": [3], "dtype": "FP64"},
        {"id": "c", "op": "constant", "attrs": {"value": [1.0, 2.0, 3.0], "dtype": "FP64"}},
        {"id": "f", "op": "function", "inputs": ["x"], "attrs": SQUARE},
        {"id": "m", "op": "mul", "inputs": ["f", "c"]},
        {"id": "s", "op": "sum", "inputs": ["m"], "attrs": {"dim": 0, "keepdim": False}},
        {"id": "g", "op": "grad", "inputs": ["s", "x"]},
        {"id": "i", "op": "getitem", "inputs": ["g"], "attrs": {"index": [{"slice": [0, 2, 1]}]}},
        {"id": "t", "op": "sum", "inputs": ["i"]},
    ],
    "outputs": ["s", "t"],
}
TENSOR = {"name": "x", "shape": [3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}
BACKWARD = {
    "id": "r1",
    "graph": GRAPH,
    "inputs": [TENSOR],
    "grad_outputs": [{"name": "s", "shape": [], "datatype": "FP64", "data": [1.0]}],
    "wrt": ["x"],
    "parameters": {"retain_graph": False, "binary_data_output": False},
}
FORWARD = {"graph": GRAPH, "inputs": [TENSOR], "outputs": ["s"]}
INFER = {
    "id": "q",
    "inputs": [{"name": "x", "shape": [3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}],
    "outputs": [{"name": "s"}, {"name": "grad:x", "parameters": {"binary_data": False}}],
    "parameters": {"binary_data_output": False},
}


def paths(value, prefix=()):
    """Every path to a value inside `value` (dict keys and list indices), the root excluded."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield (*prefix, key)
        yield from paths(inner, (*prefix, key))


def mutated(document, path, replacement) -> bytes:
    doc = copy.deepcopy(document)
    holder = doc
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = replacement
    return json.dumps(doc).replace(json.dumps(DEEP_MARK), DEEP).encode()


def cases(document):
    return [(path, r) for path in paths(document) for r in REPLACEMENTS]


def check(response, where):
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body.get("error"), str) and body["error"], where
        assert len(body["error"]) <= MAX_MESSAGE, f"{where}: a {len(body['error'])}-character message"


@pytest.fixture(scope="module")
def app_client():
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("route, document", [("/backward", BACKWARD), ("/forward", FORWARD)])
def test_every_field_of_a_compute_request(app_client, route, document):
    assert app_client.post(route, content=orjson.dumps(document), headers=JSON).status_code == 200
    for path, replacement in cases(document):
        response = app_client.post(route, content=mutated(document, path, replacement), headers=JSON)
        check(response, f"{route} {'.'.join(map(str, path))} = {str(replacement)[:20]}")


def test_every_field_of_a_v2_load_config_and_infer(app_client):
    load = {"parameters": {"config": GRAPH}}
    assert app_client.post("/v2/repository/models/m/load", json=load).status_code == 200
    assert app_client.post("/v2/models/m/infer", content=orjson.dumps(INFER), headers=JSON).status_code == 200
    for path, replacement in cases(INFER):
        response = app_client.post("/v2/models/m/infer", content=mutated(INFER, path, replacement), headers=JSON)
        check(response, f"infer {'.'.join(map(str, path))} = {str(replacement)[:20]}")
    for path, replacement in cases(load):
        response = app_client.post(
            "/v2/repository/models/n/load", content=mutated(load, path, replacement), headers=JSON
        )
        check(response, f"load {'.'.join(map(str, path))} = {str(replacement)[:20]}")
        app_client.post("/v2/repository/models/n/unload")


JSON = {"Content-Type": "application/json"}
