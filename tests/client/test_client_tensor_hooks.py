"""`register_hook` and `register_post_accumulate_grad_hook` on a client Variable, against torch, on the engine, the
embedded client and a live server: a leaf's hooks change its gradient (in `.grad` and in grad()'s answer), a
non-leaf's hooks read theirs, post-accumulate hooks see the new `.grad`, a removed hook is gone, and a training loop
that clips its parameters' gradients by hooks (resident parameters too) trains as torch's. The client computes a
backward in one request, so a non-leaf's hook that returns a new gradient is refused before any `.grad` changes."""

from __future__ import annotations

import numpy as np
import pytest

import client

torch = pytest.importorskip("torch")

X = [1.0, 2.0, -3.0]


def _hooked_backward(m):
    seen = []
    x = m.tensor(X, dtype=m.float64, requires_grad=True)
    handle = x.register_hook(lambda g: g * 2)
    x.register_post_accumulate_grad_hook(lambda p: seen.append(("post", p.grad.tolist())))
    y = x * x
    y.register_hook(lambda g: seen.append(("y", g.tolist())))
    (y * m.tensor([3.0, -1.0, 0.5], dtype=m.float64)).sum().backward()
    first = x.grad.tolist()
    handle.remove()
    x.grad = None
    (x**3).sum().backward()
    return first, x.grad.tolist(), seen


def test_leaf_hooks_change_and_non_leaf_hooks_read_gradients_as_torchs(torch_like):
    assert _hooked_backward(torch_like) == _hooked_backward(torch)


def _grads_with_input_hooks(m):
    x = m.tensor(X, dtype=m.float64, requires_grad=True)
    before = m.autograd.grad((x**3).sum(), [x])[0].tolist()
    x.register_hook(lambda g: g + 1)
    y = x.exp()
    y.register_hook(lambda g: None)  # reads only: returns nothing
    after = m.autograd.grad((y * x).sum(), [x])[0].tolist()
    return before, after, x.grad


def test_grad_runs_its_inputs_hooks_as_torchs(torch_like):
    got, want = _grads_with_input_hooks(torch_like), _grads_with_input_hooks(torch)
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)
    assert got[2] is None and want[2] is None


def _clipped_training(m, resident=False):
    rng = np.random.default_rng(0)
    w1 = m.tensor(rng.standard_normal((4, 8)), requires_grad=True)
    w2 = m.tensor(rng.standard_normal((8, 2)), requires_grad=True)
    for w in (w1, w2):
        w.register_hook(lambda g: g.clamp(-0.5, 0.5))
    options = {"resident": True} if resident else {}
    optimizer = m.optim.SGD([w1, w2], lr=0.05, momentum=0.9, **options)
    losses = []
    for _ in range(4):
        x, y = m.tensor(rng.standard_normal((16, 4))), m.tensor(rng.standard_normal((16, 2)))
        optimizer.zero_grad()
        loss = ((x.mm(w1).clamp(min=0).mm(w2) - y) ** 2).sum()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, w1.detach().numpy(), w2.detach().numpy()


def test_a_loop_clipping_by_hooks_trains_as_torchs(torch_like):
    for got, want in zip(_clipped_training(torch_like), _clipped_training(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_resident_parameters_with_hooks_step_with_the_hooked_gradients(server):
    """A resident optimizer defers its backward to the step's request: the hooks' recorded clamp of the deferred
    gradients is what the step uses."""
    want = _clipped_training(torch)
    with client.connect(server.url):
        got = _clipped_training(client, resident=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10)


@pytest.mark.parametrize("side", ["embedded", "remote"])
def test_a_non_leaf_hook_that_returns_a_new_gradient_is_refused_before_any_grad_changes(server, side):
    with client.connect(server.url if side == "remote" else None):
        w = client.tensor([1.0, 2.0], requires_grad=True)
        q = w * 2
        q.register_hook(lambda g: g * 10)
        with pytest.raises(NotImplementedError, match=r"hook on a client Variable with a grad_fn \(MulBackward"):
            q.sum().backward()
        assert w.grad is None
        (w * 3).sum().backward()  # the session goes on
        assert w.grad.tolist() == [3.0, 3.0]


def test_a_hook_that_changes_the_gradients_size_says_so_as_the_engine(torch_like):
    x = torch_like.tensor(X, requires_grad=True)
    x.register_hook(lambda g: g[:2])
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        (x * x).sum().backward()


def test_an_array_returned_by_a_hook_becomes_the_sides_gradient(torch_like):
    x = torch_like.tensor(X, dtype=torch_like.float64, requires_grad=True)
    x.register_hook(lambda g: np.ones(3))
    (x * x).sum().backward()
    assert type(x.grad) is type(x) and x.grad.tolist() == [1.0, 1.0, 1.0]
