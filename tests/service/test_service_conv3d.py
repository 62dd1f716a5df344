"""3-d convolution and pooling nodes at the server: a conv3d -> max_pool3d -> avg_pool3d graph posted with
PyTorch's names computes PyTorch's values and gradients, and hostile windows (a kernel over the input, a huge
padding whose output or columns would not fit, a huge pooling window) are a 4xx naming the node before any
of its arrays is allocated; the server keeps serving."""

from __future__ import annotations

import numpy as np
import pytest
from service_testkit import assert_answer_is_torchs, assert_error, assert_still_serves, conv_request

from engine.registry import OPS


def body(op, attrs, inputs=("x", "w"), x_shape=(1, 2, 4, 5, 6), w_shape=(2, 2, 2, 3, 2)):
    return conv_request(op, attrs, inputs, x_shape, w_shape)


def test_a_conv3d_and_pool3d_graph_computes_pytorchs_values_and_gradients(api):
    torch = pytest.importorskip("torch")
    request = body("conv3d", {"stride": [1, 2, 1], "padding": [1, 0, 1]}, ("x", "w", "b"))
    request["graph"]["nodes"][-1:] = [
        {"id": "p", "op": "max_pool3d", "inputs": ["c"], "attrs": {"kernel_size": 2, "ceil_mode": True}},
        {"id": "q", "op": "avg_pool3d", "inputs": ["p"], "attrs": {"kernel_size": [1, 1, 2], "padding": [0, 0, 1]}},
        {"id": "loss", "op": "sum", "inputs": ["q"]},
    ]
    request["graph"]["outputs"] = ["loss"]
    response = api.post("/backward", json=request)
    assert response.status_code == 200, response.text
    answer = response.json()
    tensors = {
        t["name"]: torch.tensor(np.asarray(t["data"]).reshape(t["shape"]), requires_grad=True)
        for t in request["inputs"]
    }
    F = torch.nn.functional
    out = F.conv3d(tensors["x"], tensors["w"], tensors["b"], stride=(1, 2, 1), padding=(1, 0, 1))
    loss = F.avg_pool3d(F.max_pool3d(out, 2, ceil_mode=True), (1, 1, 2), padding=(0, 0, 1)).sum()
    loss.backward()
    assert_answer_is_torchs(answer, loss, tensors)


HOSTILE = [
    ("kernel-over-input", "max_pool3d", {"kernel_size": [2, 2, 7]}, ("x",), 422, "Output size is too small"),
    ("huge-kernel", "avg_pool3d", {"kernel_size": 2**40}, ("x",), 422, "smaller than kernel size"),
    ("weight-over-input", "conv3d", {}, ("x", "w"), 422, "Kernel size", {"w_shape": (2, 2, 5, 3, 2)}),
    ("four-strides", "conv3d", {"stride": [1, 1, 1, 1]}, ("x", "w"), 422, "stride"),
    ("conv1d-input", "conv3d", {}, ("x", "w"), 422, "5D (batched)", {"x_shape": (2, 4, 5)}),
    ("huge-output", "conv3d", {"padding": 2**12}, ("x", "w"), 413, ""),
    ("huge-columns", "conv3d", {"padding": 2**12, "stride": 2**13}, ("x", "w"), 413, ""),
    ("huge-window", "max_pool3d", {"kernel_size": 2**12, "padding": 2**11}, ("x",), 413, ""),
]


@pytest.mark.parametrize(
    ("op", "attrs", "inputs", "status", "fragment", "shapes"),
    [(*h[1:6], (h[6:] or [{}])[0]) for h in HOSTILE],
    ids=[h[0] for h in HOSTILE],
)
def test_hostile_windows_are_a_4xx_naming_the_node_before_anything_is_allocated(
    api, asgi, monkeypatch, op, attrs, inputs, status, fragment, shapes
):
    if api is asgi:  # in-process: neither the columns nor a padded copy is ever made

        def refuse(*args, **kwargs):
            raise AssertionError("im2col ran")

        monkeypatch.setattr(OPS["im2col"], "forward", refuse)
    response = api.post("/forward", json=body(op, attrs, inputs, **shapes))
    assert_error(response, status, "'c'", fragment, node="c")
    monkeypatch.undo()
    assert_still_serves(api)
