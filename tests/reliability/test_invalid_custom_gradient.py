"""A custom Function whose backward returns a gradient of the wrong shape is refused, as PyTorch refuses it.

PyTorch accepts a gradient of the input's shape or of a shape the input broadcasts to (it sums it down),
and raises "returned an invalid gradient" otherwise, when the backward runs (a forward alone is fine).
The engine does the same, and so the server (422 with PyTorch's message); before, the engine kept a
wrong-shaped gradient and the server answered it with 200.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import engine

GRADS = {"sliced": lambda g: g[:2], "summed": lambda g: g.sum(), "widened": lambda g: g * np.ones((2, 3))}


def custom(module, make_grad):
    class Twice(module.autograd.Function if hasattr(module, "autograd") else module.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return make_grad(g)

    return Twice


def outcome(module, make_grad, x):
    try:
        custom(module, make_grad).apply(x).sum().backward()
    except RuntimeError as err:
        return str(err).replace("TwiceBackward", "<Backward>")
    return np.asarray(x.grad.detach().numpy() if hasattr(x.grad, "numpy") else x.grad.data).tolist()


@pytest.mark.parametrize("kind", list(GRADS))
def test_the_engine_refuses_what_pytorch_refuses_with_its_message(kind):
    torch = pytest.importorskip("torch")
    ours = outcome(engine, GRADS[kind], engine.Variable(np.ones(3), requires_grad=True))
    widen = (lambda g: g * torch.ones(2, 3, dtype=g.dtype)) if kind == "widened" else GRADS[kind]
    theirs = outcome(torch, widen, torch.ones(3, dtype=torch.float64, requires_grad=True))
    assert ours == theirs


def function_request(backward_nodes, out):
    square = {
        "name": "Bad",
        "forward": {
            "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, {"id": "sq", "op": "mul", "inputs": ["a", "a"]}],
            "outputs": ["sq"],
        },
        "backward": {"nodes": [{"id": "g", "op": "grad_output"}, *backward_nodes], "outputs": [out]},
    }
    return {
        "graph": {
            "version": 1,
            "nodes": [
                {"id": "x", "op": "input", "requires_grad": True},
                {"id": "f", "op": "function", "inputs": ["x"], "attrs": square},
                {"id": "s", "op": "sum", "inputs": ["f"]},
            ],
            "outputs": ["s"],
        },
        "inputs": [{"name": "x", "shape": [3], "datatype": "FP64", "data": [1, 2, 3]}],
    }


@pytest.mark.parametrize(
    "nodes, out, shape",
    [
        ([{"id": "h", "op": "getitem", "inputs": ["g"], "attrs": {"index": [{"slice": [0, 2, 1]}]}}], "h", [2]),
        ([{"id": "h", "op": "sum", "inputs": ["g"]}], "h", []),
    ],
)
def test_the_server_refuses_a_backward_subgraph_whose_gradient_cannot_fit(client, nodes, out, shape):
    request = function_request(nodes, out)
    for _ in range(2):  # the second request finds the plan cached
        response = client.post("/backward", content=orjson.dumps(request), headers={"Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        assert (
            f"Function BadBackward returned an invalid gradient at index 0 - got {shape} "
            "but expected shape compatible with [3]" in response.json()["error"]
        )
    forward = client.post("/forward", content=orjson.dumps(request), headers={"Content-Type": "application/json"})
    assert forward.status_code == 200, forward.text  # as in PyTorch: only running the backward fails
    assert client.get("/healthz").status_code == 200


def test_a_gradient_the_input_broadcasts_to_is_summed_down_over_the_wire(client):
    nodes = [{"id": "ones", "op": "constant", "attrs": {"value": [[1.0, 1.0, 1.0]] * 2}}]
    nodes.append({"id": "h", "op": "mul", "inputs": ["g", "ones"]})
    response = client.post("/backward", content=orjson.dumps(function_request(nodes, "h")))
    assert response.status_code == 200, response.text
    assert response.json()["grads"][0]["data"] == [2.0, 2.0, 2.0]
