"""What a PyTorch program prints and is told about its graph, as torch 2.13 does, on the engine, the embedded
client and a live server: grad_fn names (engine.grad_fn_names: each call of the table names its result's node
as torch does, `name()` and the repr, and the official tutorial "Automatic Differentiation with torch.autograd"
prints what it prints); `backward(inputs=...)` (a method's and `torch.autograd.backward`'s), `mean()` of
integers refused, and the warning on reading a non-leaf's `.grad`."""

from __future__ import annotations

import re
import warnings

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
    "setitem": lambda m, x, y: (lambda z: z.__setitem__(0, y[0]) or z)(x * 1),
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


def test_next_functions_name_a_leafs_accumulate_grad_as_torch(torch_like):
    torch = pytest.importorskip("torch")
    for m in (torch_like, torch):
        x = m.ones(2, requires_grad=True)
        (leaf, _), (constant, _) = (x * m.ones(2)).grad_fn.next_functions
        assert (leaf.name(), repr(leaf).split(" at ")[0], constant) == (
            "torch::autograd::AccumulateGrad",
            "<AccumulateGrad object",
            None,
        )


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


# --- backward(inputs=), mean of integers, a non-leaf's .grad ---------------------------------------------


def grads(*variables):
    return [None if v.grad is None else np.asarray(v.grad.detach().numpy()).tolist() for v in variables]


def backward_into_inputs(m):
    x, y, z = (m.tensor([1.0, 2.0], requires_grad=True) for _ in range(3))
    out = (x * y * 3).sum()
    out.backward(inputs=[x, z], retain_graph=True)
    seen = [grads(x, y, z)]
    out.backward(inputs=x)  # one Variable, accumulated onto the first
    seen.append(grads(x, y))
    h = x * 2
    (h * y).sum().backward(inputs=[h])  # a non-leaf input gets its .grad too
    seen.append(grads(h, x, y))
    m.autograd.backward((x * y).sum(), inputs=[y])
    seen.append(grads(x, y))
    return seen


def test_backward_accumulates_into_the_given_inputs_only(torch_like):
    torch = pytest.importorskip("torch")
    assert backward_into_inputs(torch_like) == backward_into_inputs(torch)


def test_backward_refuses_empty_inputs_as_torch(torch_like):
    x = torch_like.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^`inputs` argument to `backward\(\)` cannot be empty\.$"):
        (x * 2).sum().backward(inputs=[])


def test_backward_with_inputs_and_create_graph_gives_a_differentiable_grad(torch_like):
    x = torch_like.tensor([1.0, 2.0], requires_grad=True)
    (x**3).sum().backward(inputs=[x], create_graph=True)
    assert x.grad.requires_grad
    (second,) = torch_like.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(np.asarray(second.detach().numpy()), [6.0, 12.0])


@pytest.mark.parametrize("values", [[1, 2], [True, False]], ids=["Long", "Bool"])
def test_mean_of_integers_is_refused_as_torch(torch_like, values):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as want:
        torch.tensor(values).mean()
    for call in (lambda t: t.mean(), lambda t: torch_like.mean(t, 0)):
        with pytest.raises(RuntimeError) as got:
            call(torch_like.tensor(values))
        assert str(got.value) == str(want.value)
    assert torch_like.tensor(values).float().mean().item() == torch.tensor(values).float().mean().item()


def non_leaf_grad_warnings(m):
    """How many warnings each step has given, and the first's message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = m.ones(2, requires_grad=True)
        h = x * 2
        seen = [(h.grad, h.grad) and len(caught)]  # once per read
        x.grad  # noqa: B018 - a leaf's: no warning
        (h * 1).sum().backward()
        seen.append(len(caught))
        kept = x * 3
        kept.retain_grad()
        seen.append(kept.grad is None and len(caught))  # retained: no warning
        given = x * 4
        given.sum().backward(inputs=[given])
        seen.append(given.grad is not None and len(caught))  # set by backward(inputs=): no warning
        with m.no_grad():
            (x * 2).grad  # noqa: B018 - a leaf made without grad
        seen.append(len(caught))
    return seen, str(caught[0].message)


def test_a_non_leafs_grad_warns_as_torch_unless_retained(torch_like):
    torch = pytest.importorskip("torch")
    got, message = non_leaf_grad_warnings(torch_like)
    want, torch_message = non_leaf_grad_warnings(torch)
    assert got == want == [2, 2, 2, 2, 2]
    assert torch_message.startswith(message) and "use .retain_grad() on the non-leaf Tensor" in message
