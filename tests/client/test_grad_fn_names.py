"""grad_fn names as PyTorch's (engine.grad_fn_names): each call of the table on the engine, the embedded
client and a live server names its result's node as torch 2.13 does (`name()` and the repr), and the
official tutorial "Automatic Differentiation with torch.autograd" prints what it prints."""

from __future__ import annotations

import re

import numpy as np
import pytest

import client
import engine

X, Y, C = (np.random.default_rng(n).standard_normal((3, 4)).astype(np.float32) for n in range(3))
SQUARE = (np.eye(3) * 2 + 0.1).astype(np.float32)
CALLS = {
    "add": lambda m, x, y: x + y,
    "add-number": lambda m, x, y: 2 + x,
    "sub": lambda m, x, y: x - y,
    "rsub": lambda m, x, y: 2 - x,
    "sub-from-a-tensor": lambda m, x, y: m.tensor(C) - x,
    "mul": lambda m, x, y: x * 2,
    "div": lambda m, x, y: x / 2,
    "rdiv": lambda m, x, y: 2 / x,
    "pow-number": lambda m, x, y: x**2,
    "pow-tensor": lambda m, x, y: x**y,
    "rpow": lambda m, x, y: 2**x,
    "sum": lambda m, x, y: x.sum(),
    "sum-dim": lambda m, x, y: x.sum(1),
    "mean": lambda m, x, y: x.mean(),
    "mean-dim": lambda m, x, y: x.mean(1, keepdim=True),
    "prod-dim": lambda m, x, y: x.prod(1),
    "max": lambda m, x, y: x.max(),
    "max-dim": lambda m, x, y: x.max(1)[0],
    "min-dim": lambda m, x, y: m.min(x, 0).values,
    "maximum": lambda m, x, y: m.maximum(x, y),
    "amax": lambda m, x, y: x.amax(1),
    "norm": lambda m, x, y: x.norm(),
    "t": lambda m, x, y: x.t(),
    "T": lambda m, x, y: x.T,
    "transpose": lambda m, x, y: x.transpose(0, 1),
    "permute": lambda m, x, y: x.permute(1, 0),
    "view": lambda m, x, y: x.view(12),
    "reshape": lambda m, x, y: x.reshape(2, 6),
    "flatten": lambda m, x, y: x.flatten(),
    "unsqueeze": lambda m, x, y: x.unsqueeze(0),
    "squeeze": lambda m, x, y: x.unsqueeze(0).squeeze(),
    "squeeze-dim": lambda m, x, y: x.unsqueeze(0).squeeze(0),
    "expand": lambda m, x, y: x[:1].expand(3, 4),
    "select": lambda m, x, y: x[0],
    "select-last": lambda m, x, y: x[:, 1],
    "slice": lambda m, x, y: x[1:],
    "index": lambda m, x, y: x[[0, 2]],
    "mask": lambda m, x, y: x[x > 0],
    "none": lambda m, x, y: x[None],
    "cat": lambda m, x, y: m.cat([x, y]),
    "stack": lambda m, x, y: m.stack([x, y]),
    "mm": lambda m, x, y: m.mm(x, y.t()),
    "matmul": lambda m, x, y: x @ y.t(),
    "matmul-vector": lambda m, x, y: x @ y[0],
    "dot": lambda m, x, y: x[0] @ y[0],
    "clamp": lambda m, x, y: x.clamp(min=0),
    "where": lambda m, x, y: m.where(x > 0, x, y),
    "double": lambda m, x, y: x.double(),
    "clone": lambda m, x, y: x.clone(),
    "relu": lambda m, x, y: x.relu(),
    "log1p": lambda m, x, y: x.abs().log1p(),
    "round-decimals": lambda m, x, y: x.round(decimals=1),
    "fmod": lambda m, x, y: x.fmod(2),
    "cumsum": lambda m, x, y: x.cumsum(1),
    "var": lambda m, x, y: x.var(1),
    "std": lambda m, x, y: x.std(),
    "index_add": lambda m, x, y: x.index_add(0, m.tensor([0, 2]), y[:2]),
    "logsumexp": lambda m, x, y: x.logsumexp(1),
    "softmax": lambda m, x, y: x.softmax(1),
    "log_softmax": lambda m, x, y: x.log_softmax(1),
    "gather": lambda m, x, y: x.gather(1, m.tensor([[0], [1], [2]])),
    "masked_fill": lambda m, x, y: x.masked_fill(x > 0, 0.0),
    "inverse": lambda m, x, y: m.linalg.inv(m.tensor(SQUARE, requires_grad=True)),
    "det": lambda m, x, y: m.linalg.det(m.tensor(SQUARE, requires_grad=True)),
    "linear": lambda m, x, y: m.nn.Linear(4, 2)(x),
    "linear-batched": lambda m, x, y: m.nn.Linear(4, 2)(x.reshape(3, 1, 4)),
    "conv2d": lambda m, x, y: m.nn.functional.conv2d(x.reshape(1, 1, 3, 4), m.ones(1, 1, 2, 2)),
    "cross_entropy": lambda m, x, y: m.nn.functional.cross_entropy(x, m.tensor([0, 3, 1])),
    "mse_loss": lambda m, x, y: m.nn.functional.mse_loss(x, m.tensor(C)),
}


@pytest.fixture(params=["engine", "embedded", "remote"])
def torch_like(request):
    if request.param == "engine":
        yield engine
        return
    with client.connect(request.getfixturevalue("server").url if request.param == "remote" else None):
        yield client


def named(m, call):
    x, y = m.tensor(X, requires_grad=True), m.tensor(Y, requires_grad=True)
    node = call(m, x, y).grad_fn
    return node.name(), re.sub(r" at 0x[0-9a-f]+>", ">", repr(node))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_calls_node_is_named_as_torchs(torch_like, name):
    torch = pytest.importorskip("torch")
    assert named(torch_like, CALLS[name]) == named(torch, CALLS[name])


def test_the_class_is_named_too_where_the_name_is_the_ops(torch_like):
    x = torch_like.ones(2, 2, requires_grad=True)
    assert [type(v.grad_fn).__name__ for v in (x * 2, x.exp(), x.t(), x.softmax(0))] == [
        "MulBackward0",
        "ExpBackward0",
        "TBackward0",
        "SoftmaxBackward0",
    ]


def test_the_autograd_tutorial_prints_torchs_names(torch_like):
    torch = torch_like  # the tutorial's code, as it is written
    x = torch.ones(5)  # input tensor
    y = torch.zeros(3)  # expected output
    w = torch.randn(5, 3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    z = torch.matmul(x, w) + b
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    assert re.fullmatch(
        r"Gradient function for z = <AddBackward0 object at 0x[0-9a-f]+>", f"Gradient function for z = {z.grad_fn}"
    )
    assert re.fullmatch(r"<BinaryCrossEntropyWithLogitsBackward0 object at 0x[0-9a-f]+>", str(loss.grad_fn))
    loss.backward()
    assert w.grad.shape == (5, 3) and loss.grad_fn.name() == "BinaryCrossEntropyWithLogitsBackward0"


def test_a_renamed_node_behaves_as_its_last_ops(torch_like):
    x = torch_like.tensor([[1.0, 2.0], [3.0, 0.5]], requires_grad=True)
    out = x.softmax(1)
    assert out.grad_fn.name() == "SoftmaxBackward0" and len(out.grad_fn.next_functions) >= 1
    out.sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad.numpy()), np.zeros((2, 2)), atol=1e-7)


def test_a_node_named_by_its_call_keeps_its_name_when_hooked():
    x = engine.ones(3, requires_grad=True)
    y = x.sum(0)
    y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: None)
    assert y.grad_fn.name() == "SumBackward1" and repr(y.grad_fn).startswith("<SumBackward1 object")
    y.backward()
    assert y.grad_fn.name() == "SumBackward1"
