"""Convolution and pooling nodes at the server (issue 25): graphs posted with PyTorch's op and attribute
names compute, and hostile attributes (a zero kernel, a negative stride, a huge dilation or padding, a
kernel larger than the input, groups that do not divide the channels) are a 4xx naming the node, before
anything runs; the server keeps serving."""

from __future__ import annotations

import numpy as np
import pytest
from service_testkit import assert_answer_is_torchs, assert_error, assert_still_serves, conv_request


def test_a_conv_and_pool_graph_computes_with_pytorchs_names(api):
    torch = pytest.importorskip("torch")
    request = conv_request(
        "conv2d", {"stride": [2, 1], "padding": [1, 0], "groups": 2}, ("x", "w", "b"), w_shape=(4, 2, 3, 3)
    )
    nodes = request["graph"]["nodes"]
    nodes[-1:] = [
        {"id": "p", "op": "max_pool2d", "inputs": ["c"], "attrs": {"kernel_size": 2, "ceil_mode": True}},
        {"id": "q", "op": "avg_pool2d", "inputs": ["p"], "attrs": {"kernel_size": [1, 2], "count_include_pad": False}},
        {"id": "loss", "op": "sum", "inputs": ["q"]},
    ]
    request["graph"]["outputs"] = ["loss"]
    response = api.post("/backward", json=request)
    assert response.status_code == 200, response.text
    answer = response.json()
    arrays = {t["name"]: np.asarray(t["data"]).reshape(t["shape"]) for t in request["inputs"]}
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}
    F = torch.nn.functional
    out = F.conv2d(tensors["x"], tensors["w"], tensors["b"], stride=(2, 1), padding=(1, 0), groups=2)
    loss = F.avg_pool2d(F.max_pool2d(out, 2, ceil_mode=True), (1, 2), count_include_pad=False).sum()
    loss.backward()
    assert_answer_is_torchs(answer, loss, tensors)


HOSTILE = [
    ("zero-kernel", "max_pool2d", {"kernel_size": 0}, ("x",), "kernel_size"),
    ("kernel-list-zero", "avg_pool2d", {"kernel_size": [2, 0]}, ("x",), "kernel_size"),
    ("negative-stride", "conv2d", {"stride": -1}, ("x", "w"), "stride"),
    ("zero-stride", "max_pool2d", {"kernel_size": 2, "stride": 0}, ("x",), "stride"),
    ("negative-padding", "conv2d", {"padding": -2}, ("x", "w"), "padding"),
    ("padding-word", "conv2d", {"padding": "full"}, ("x", "w"), "padding"),
    ("huge-dilation", "conv2d", {"dilation": 2**62}, ("x", "w"), "Kernel size"),
    ("dilation-overflow", "conv2d", {"dilation": 2**64}, ("x", "w"), "dilation"),
    ("kernel-over-input", "max_pool2d", {"kernel_size": 7}, ("x",), "Output size is too small"),
    ("groups-not-dividing", "conv2d", {"groups": 3}, ("x", "w"), "groups=3"),
    ("groups-zero", "conv2d", {"groups": 0}, ("x", "w"), "groups"),
    ("pad-over-half", "max_pool2d", {"kernel_size": 2, "padding": 2}, ("x",), "half"),
    ("same-strided", "conv2d", {"padding": "same", "stride": 2}, ("x", "w"), "strided"),
    ("too-many-strides", "conv2d", {"stride": [1, 1, 1]}, ("x", "w"), "stride"),
    ("divisor-zero", "avg_pool2d", {"kernel_size": 2, "divisor_override": 0}, ("x",), "divisor"),
    ("conv-one-input", "conv2d", {}, ("x",), "takes 2 or 3 inputs"),
    ("unknown-attr", "conv2d", {"kernel": 3}, ("x", "w"), "kernel"),
]


@pytest.mark.parametrize(("op", "attrs", "inputs", "fragment"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_attributes_are_a_4xx_naming_the_node(api, op, attrs, inputs, fragment):
    response = api.post("/forward", json=conv_request(op, attrs, inputs))
    assert 400 <= response.status_code < 500, response.text
    assert_error(response, response.status_code, "'c'", fragment, node="c")
    assert_still_serves(api)


@pytest.mark.parametrize("attrs", [{"padding": 2**20}, {"padding": 2**20, "stride": 2**21}], ids=["output", "scratch"])
def test_a_huge_padding_is_refused_by_the_budget_naming_the_node(api, attrs):
    # a huge output, or a small one whose padded input and columns would be huge (the op's declared scratch)
    response = api.post("/forward", json=conv_request("conv2d", attrs))
    assert_error(response, 413, "'c'", node="c")
    assert_still_serves(api)
