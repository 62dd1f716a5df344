"""Small gaps of the autograd surface closed as PyTorch has them, on the engine, the embedded client and a
live server, against torch 2.13: `backward(inputs=...)` (a method's and `torch.autograd.backward`'s), `mean()`
of integers refused, and the warning on reading a non-leaf's `.grad`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import client
import engine


@pytest.fixture(params=["engine", "embedded", "remote"])
def torch_like(request):
    if request.param == "engine":
        yield engine
        return
    with client.connect(request.getfixturevalue("server").url if request.param == "remote" else None):
        yield client


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
