"""Every class of bad input: its status, the one JSON error shape, then a good request still works."""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest
from service_testkit import (
    EXAMPLE,
    HEADER_LENGTH,
    SETTINGS,
    assert_error,
    assert_still_serves,
    binary_body,
    binary_tensor,
    example,
)


def _graph(*nodes, outputs=("out",)):
    return {"version": 1, "nodes": list(nodes), "outputs": list(outputs)}


def _with_nodes(nodes, outputs=None):
    body = copy.deepcopy(EXAMPLE)
    body["graph"]["nodes"] = nodes
    if outputs is not None:
        body["graph"]["outputs"] = outputs
    return body


def _replace_node(index, node):
    nodes = copy.deepcopy(EXAMPLE["graph"]["nodes"])
    nodes[index] = node
    return _with_nodes(nodes)


X_IN = {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}
W_IN = {"name": "w", "shape": [3, 1], "datatype": "FP32", "data": [0.1, 0.2, 0.3]}

# (case id, path, JSON body, status, message fragments, node, field)
JSON_CASES = [
    ("not-an-object", "/forward", [1, 2], 400, ["JSON object"], None, None),
    ("unknown-field", "/forward", example(extra=1), 422, ["unknown field"], None, "extra"),
    (
        "unknown-op",
        "/forward",
        _replace_node(3, {"id": "r", "op": "frobnicate", "inputs": ["h"]}),
        422,
        ["'r'", "unknown op 'frobnicate'"],
        "r",
        "op",
    ),
    (
        "wrong-arity",
        "/forward",
        _replace_node(2, {"id": "h", "op": "mm", "inputs": ["x"]}),
        422,
        ["'h'", "takes 2 input(s), got 1"],
        "h",
        "inputs",
    ),
    (
        "bad-attribute",
        "/forward",
        _replace_node(3, {"id": "r", "op": "clamp", "inputs": ["h"], "attrs": {"min": "low"}}),
        422,
        ["'r'", "min"],
        "r",
        "attrs",
    ),
    (
        "unknown-attribute",
        "/forward",
        _replace_node(3, {"id": "r", "op": "clamp", "inputs": ["h"], "attrs": {"lo": 0}}),
        422,
        ["'r'", "lo"],
        "r",
        "attrs",
    ),
    (
        "undefined-reference",
        "/forward",
        _replace_node(2, {"id": "h", "op": "mm", "inputs": ["x", "nope"]}),
        422,
        ["'h'", "'nope'", "not defined before"],
        "h",
        "inputs",
    ),
    (
        "later-reference",
        "/forward",
        _replace_node(2, {"id": "h", "op": "mm", "inputs": ["x", "loss"]}),
        422,
        ["'h'", "'loss'", "topological"],
        "h",
        "inputs",
    ),
    (
        "duplicate-id",
        "/forward",
        _replace_node(3, {"id": "h", "op": "clamp", "inputs": ["h"], "attrs": {"min": 0}}),
        422,
        ["'h'", "defined twice"],
        "h",
        "id",
    ),
    ("missing-input", "/forward", example(inputs=[X_IN]), 422, ["'w'"], "w", "inputs"),
    (
        "extra-input",
        "/forward",
        example(inputs=[X_IN, W_IN, {**W_IN, "name": "v"}]),
        422,
        ["'v'", "match no input"],
        "v",
        "inputs",
    ),
    (
        "shape-mismatch",
        "/forward",
        example(inputs=[X_IN, {**W_IN, "shape": [1, 3]}]),
        422,
        ["'h'", "mm", "x [2, 3]", "w [1, 3]"],
        "h",
        "inputs",
    ),
    (
        "mixed-dtype-product",  # PyTorch's refusal, with its message
        "/forward",
        example(inputs=[X_IN, {**W_IN, "datatype": "FP64"}]),
        422,
        ["'h'", "mm", "expected m1 and m2 to have the same dtype, but got: float != double"],
        "h",
        "inputs",
    ),
    (
        "affine-grid-theta-shape",  # refused by its shape rule, before it runs: PyTorch's message
        "/forward",
        {
            "graph": _graph(
                {"id": "x", "op": "input"},
                {"id": "out", "op": "affine_grid_generator", "inputs": ["x"], "attrs": {"size": [1, 1, 4, 4]}},
            ),
            "inputs": [{**X_IN, "shape": [1, 3, 2]}],
        },
        422,
        ["'out'", "Expected a batch of 2D affine matrices of shape Nx2x3 for size [1, 1, 4, 4]. Got [1, 3, 2]."],
        "out",
        "inputs",
    ),
    (
        "integer-division-by-zero",
        "/forward",
        {
            "graph": _graph(
                {"id": "x", "op": "input"},
                {"id": "y", "op": "input"},
                {"id": "out", "op": "floor_divide", "inputs": ["x", "y"]},
            ),
            "inputs": [
                {"name": "x", "shape": [2], "datatype": "INT64", "data": [7, 8]},
                {"name": "y", "shape": [2], "datatype": "INT64", "data": [2, 0]},
            ],
        },
        422,
        ["'out'", "floor_divide", "ZeroDivisionError"],
        "out",
        None,
    ),
    (
        "data-length",
        "/forward",
        example(inputs=[{**X_IN, "data": [1, 2, 3]}, W_IN]),
        422,
        ["'x'", "3 elements", "[2, 3]"],
        None,
        "inputs[0].data",
    ),
    (
        "bad-datatype",
        "/forward",
        example(inputs=[{**X_IN, "datatype": "FP128"}, W_IN]),
        422,
        ["FP128"],
        None,
        "inputs[0].datatype",
    ),
    (
        "non-numeric-data",
        "/forward",
        example(inputs=[{**X_IN, "data": ["a"] * 6}, W_IN]),
        422,
        ["'x'"],
        None,
        "inputs[0].data",
    ),
    (
        "ragged-data",
        "/forward",
        example(inputs=[{**X_IN, "data": [["NaN"], [1, 2]]}, W_IN]),
        422,
        ["'x'"],
        None,
        "inputs[0].data",
    ),
    (
        "unsupported-version",
        "/forward",
        {**EXAMPLE, "graph": {**EXAMPLE["graph"], "version": 2}},
        422,
        ["version"],
        None,
        "graph.version",
    ),
    ("missing-graph", "/forward", {"inputs": []}, 422, ["'graph' is required"], None, "graph"),
    (
        "unknown-output",
        "/forward",
        _with_nodes(EXAMPLE["graph"]["nodes"], ["nope"]),
        422,
        ["'nope'"],
        "nope",
        "graph.outputs",
    ),
    (
        "tensor-over-limit",
        "/forward",
        example(inputs=[{**X_IN, "shape": [2**20, 2**20]}, W_IN]),
        413,
        ["limit"],
        None,
        "inputs[0].shape",
    ),
    (
        "non-scalar-output",
        "/backward",
        _with_nodes(EXAMPLE["graph"]["nodes"], ["h"]),
        422,
        ["'h'", "shape [2, 1]", "grad_outputs"],
        "h",
        "grad_outputs",
    ),
    (
        "grad-output-shape",
        "/backward",
        {
            **_with_nodes(EXAMPLE["graph"]["nodes"], ["h"]),
            "grad_outputs": [{"name": "h", "shape": [3], "datatype": "FP32", "data": [1, 1, 1]}],
        },
        422,
        ["'h'", "[3]", "[2, 1]"],
        "h",
        "grad_outputs",
    ),
    (
        "nothing-to-differentiate",
        "/backward",
        _replace_node(1, {"id": "w", "op": "input"}),
        422,
        ["nothing to differentiate"],
        None,
        "wrt",
    ),
    ("wrt-unknown", "/backward", example(wrt=["zzz"]), 422, ["'zzz'"], "zzz", "wrt"),
    ("forward-with-tape", "/forward", example(tape="abc"), 422, ["/forward takes no tape"], None, "tape"),
    (
        "bad-parameters",
        "/forward",
        example(parameters={"retain_graph": "yes"}),
        422,
        ["retain_graph"],
        None,
        "parameters.retain_graph",
    ),
    (
        "int-requires-grad",
        "/backward",
        example(inputs=[X_IN, {**W_IN, "datatype": "INT32", "data": [1, 2, 3]}]),
        422,
        ["'w'", "requires grad"],
        "w",
        "requires_grad",
    ),
]


@pytest.mark.parametrize("case", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_bad_json_request(api, case):
    _, path, body, status, fragments, node, field = case
    assert_error(api.post(path, json=body), status, *fragments, node=node, field=field)
    assert_still_serves(api)


def test_too_many_nodes_is_413(api):
    n = SETTINGS["max_nodes"] + 1
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    nodes += [
        {"id": f"n{i}", "op": "neg", "inputs": [nodes[-1]["id"] if i == 0 else f"n{i - 1}"]} for i in range(n - 1)
    ]
    body = {
        "graph": _graph(*nodes, outputs=[nodes[-1]["id"]]),
        "inputs": [{"name": "x", "shape": [], "datatype": "FP32", "data": [1]}],
    }
    assert_error(api.post("/backward", json=body), 413, f"limit of {SETTINGS['max_nodes']} nodes", field="graph.nodes")
    assert_still_serves(api)


@pytest.mark.parametrize("content", [b"{bad json", b"", b"\xff\xfe", b'{"graph": NaN}', b"[" * 2000])
def test_malformed_json_is_400(api, content):
    assert_error(
        api.post("/backward", content=content, headers={"Content-Type": "application/json"}),
        400,
        "malformed JSON",
        field="body",
    )
    assert_still_serves(api)


def _binary_example():
    buffers = []
    header = {
        "graph": EXAMPLE["graph"],
        "inputs": [
            binary_tensor("x", np.arange(1, 7, dtype=np.float32).reshape(2, 3), buffers),
            binary_tensor("w", np.ones((3, 1), np.float32), buffers),
        ],
    }
    return binary_body(header, buffers)


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "", "99999999"])
def test_bad_header_length_is_400(api, value):
    content, headers = _binary_example()
    headers[HEADER_LENGTH] = value
    assert_error(api.post("/backward", content=content, headers=headers), 400, HEADER_LENGTH, field=HEADER_LENGTH)
    assert_still_serves(api)


def test_header_length_cutting_the_json_is_400(api):
    content, headers = _binary_example()
    headers[HEADER_LENGTH] = str(int(headers[HEADER_LENGTH]) - 3)
    assert_error(api.post("/backward", content=content, headers=headers), 400, "malformed JSON")
    assert_still_serves(api)


def test_truncated_binary_is_400(api):
    content, headers = _binary_example()
    assert_error(api.post("/backward", content=content[:-5], headers=headers), 400, "ends before")
    assert_still_serves(api)


def test_extra_binary_bytes_is_400(api):
    content, headers = _binary_example()
    assert_error(api.post("/backward", content=content + b"\0" * 4, headers=headers), 400, "no tensor claims")
    assert_still_serves(api)


def test_binary_size_not_matching_shape_is_422(api):
    buffers = []
    header = {
        "graph": EXAMPLE["graph"],
        "inputs": [
            binary_tensor("x", np.ones((2, 3), np.float32), buffers),
            binary_tensor("w", np.ones((3, 1), np.float32), buffers),
        ],
    }
    header["inputs"][1]["parameters"]["binary_data_size"] = 8
    content, headers = binary_body(header, buffers)
    assert_error(api.post("/backward", content=content, headers=headers), 422, "binary_data_size")
    assert_still_serves(api)


def test_no_stack_trace_and_500_for_unexpected_errors(monkeypatch):
    """An engine bug (not bad input) is a generic 500; nothing of the exception leaks."""
    from service_testkit import asgi_client

    with asgi_client() as client:
        run = client.app.state.executor.run

        def boom(ticket):  # every /forward fails; /backward (assert_still_serves) runs
            if ticket.kind == "forward":
                raise RuntimeError("secret internal detail")
            return run(ticket)

        monkeypatch.setattr(client.app.state.executor, "run", boom)
        response = client.post("/forward", json=EXAMPLE)
        body = assert_error(response, 500, "internal server error")
        assert "secret" not in response.text
        rid = response.headers["x-request-id"]
        assert body == {"error": "internal server error", "node": None, "field": None, "request_id": rid}
        assert_still_serves(client)


def test_out_of_memory_is_507(monkeypatch):
    from service_testkit import asgi_client

    with asgi_client() as client:
        run = client.app.state.executor.run

        def oom(ticket):  # every /forward runs out of memory; /backward (assert_still_serves) runs
            if ticket.kind == "forward":
                raise MemoryError()
            return run(ticket)

        monkeypatch.setattr(client.app.state.executor, "run", oom)
        assert_error(client.post("/forward", json=EXAMPLE), 507, "out of memory")
        assert_still_serves(client)


def test_deeply_nested_or_huge_numbers_are_not_500(api):
    for body in (example(inputs=[{**X_IN, "data": [1e308 * 10] * 6}, W_IN]),):
        response = api.post(
            "/forward",
            content=orjson.dumps(body).replace(b"null", b"1e999"),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code < 500, response.text
    assert_still_serves(api)


def test_mean_of_integers_is_a_422_with_torchs_message(api):
    body = example(
        graph=_graph({"id": "n", "op": "input"}, {"id": "out", "op": "mean", "inputs": ["n"]}),
        inputs=[{"name": "n", "shape": [2], "datatype": "INT64", "data": [1, 2]}],
    )
    assert_error(
        api.post("/forward", json=body),
        422,
        "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: Long",
        node="out",
    )
    assert_still_serves(api)
