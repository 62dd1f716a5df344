"""Helpers of the Open Inference Protocol tests: the graphs registered as models, their
expected values, and tritonclient tensors. tritonclient is the conformance oracle: the tests
talk to the server the way a program that knows only tritonclient does."""

from __future__ import annotations

import json

import numpy as np
import tritonclient.http as tritonclient_http

API_KEY = "oip-s3cret"

# loss = sum(tanh(x @ w) * 2): w requires grad, x does not; one scalar output
MLP = {
    "version": 1,
    "nodes": [
        {"id": "x", "op": "input", "shape": [2, 3], "dtype": "FP32"},
        {"id": "w", "op": "input", "shape": [3, 1], "dtype": "FP32", "requires_grad": True},
        {"id": "h", "op": "mm", "inputs": ["x", "w"]},
        {"id": "t", "op": "tanh", "inputs": ["h"]},
        {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
        {"id": "s", "op": "mul", "inputs": ["t", "two"]},
        {"id": "loss", "op": "sum", "inputs": ["s"]},
    ],
    "outputs": ["loss"],
}

# two outputs, one not a scalar: y = a * b (elementwise) and z = sum(exp(a)); a and b require grad,
# shapes and dtypes left open (any shape, any float type)
TWO_OUTPUTS = {
    "version": 1,
    "nodes": [
        {"id": "a", "op": "input", "requires_grad": True},
        {"id": "b", "op": "input", "requires_grad": True},
        {"id": "y", "op": "mul", "inputs": ["a", "b"]},
        {"id": "e", "op": "exp", "inputs": ["a"]},
        {"id": "z", "op": "sum", "inputs": ["e"]},
    ],
    "outputs": ["y", "z"],
}

X = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], dtype=np.float32)
W = np.array([[0.5], [-0.25], [0.75]], dtype=np.float32)


def mlp_expected(x=X, w=W):
    """(loss, d loss / d w) of MLP by hand, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    t = np.tanh(x @ w)
    return (2 * t).sum(), x.T @ (2 * (1 - t**2))


def config(graph) -> str:
    return json.dumps(graph)


def infer_input(name, array, binary):
    from wire.codec import datatype_of

    tensor = tritonclient_http.InferInput(name, list(array.shape), datatype_of(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def requested(*names, binary):
    return [tritonclient_http.InferRequestedOutput(name, binary_data=binary) for name in names]


def host_port(server) -> str:
    """tritonclient's url: host:port, no scheme."""
    return server.base_url.removeprefix("http://")
