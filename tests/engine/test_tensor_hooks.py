"""Tensor hooks as PyTorch has them: `register_hook` on leaves and non-leaves (in order, a returned value
replacing the gradient for `.grad`, `retain_grad`, grad()'s result and what the walk sends on, None keeping it),
`RemovableHandle.remove`, `register_post_accumulate_grad_hook`, and PyTorch's errors; each program runs on the
engine and on torch (float64) and must print the same. A client Variable refuses hooks with a message saying why."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

X = np.array([1.0, -2.0, 0.5])


def run(program, m):
    log = []
    x = m.tensor(X.copy(), dtype=m.float64, requires_grad=True)
    program(m, x, log)
    return [np.asarray(v.detach().numpy()) if hasattr(v, "detach") else v for v in log]


def same(program):
    got, want = run(program, engine), run(program, torch)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    return got


def test_a_non_leaf_hook_changes_what_flows_on_and_what_it_retains():
    def program(m, x, log):
        y = x * x
        y.retain_grad()
        y.register_hook(lambda g: g * 10)
        y.register_hook(lambda g: log.append(g))  # sees the first hook's result; None keeps it
        (y * y.detach()).sum().backward()
        log += [x.grad, y.grad]

    got = same(program)
    np.testing.assert_allclose(got[2], 10 * X**2)


def test_a_leaf_hook_changes_its_grad_and_grads_result_until_removed():
    def program(m, x, log):
        handle = x.register_hook(lambda g: g + 1)
        (x * 3).sum().backward()
        log.append(x.grad.clone())
        log.append(m.autograd.grad((x * x).sum(), x)[0])
        handle.remove()
        x.grad = None
        (x * 3).sum().backward()
        log.append(x.grad)

    got = same(program)
    np.testing.assert_allclose(got[0], [4.0, 4.0, 4.0])


def test_grad_of_a_hooked_non_leaf_and_through_it():
    def program(m, x, log):
        y = x * 2
        y.register_hook(lambda g: g * 10)
        log.append(m.autograd.grad((y * y).sum(), y, retain_graph=True)[0])
        log.append(m.autograd.grad((y * y).sum(), x)[0])
        root = (x * x).sum()
        root.register_hook(lambda g: g * 3)
        root.backward()
        log.append(x.grad)

    same(program)


def test_hooks_under_create_graph_are_differentiated_again():
    def program(m, x, log):
        y = x.sin()
        y.register_hook(lambda g: g * y)
        (gx,) = m.autograd.grad(y.sum(), x, create_graph=True)
        log.append(gx)
        log.append(m.autograd.grad(gx.sum(), x)[0])

    same(program)


def test_post_accumulate_grad_hooks_see_the_accumulated_grad():
    def program(m, x, log):
        x.register_post_accumulate_grad_hook(lambda leaf: log.append(leaf.grad.clone()))
        (x * 3).sum().backward()
        (x * x).sum().backward()

    got = same(program)
    assert len(got) == 2


def test_pytorchs_errors():
    for m in (engine, torch):
        x = m.tensor(X.copy(), requires_grad=True)
        with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
            m.ones(2).register_hook(lambda g: g)
        with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf"):
            (x * 2).register_post_accumulate_grad_hook(lambda t: None)
        y = x * 2
        y.register_hook(lambda g: g.sum())
        with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the size of value"):
            y.sum().backward()
        y = x.float() * 2
        y.register_hook(lambda g: g.double())
        with pytest.raises(
            RuntimeError,
            match=r"hook '<lambda>' has changed the type of value \(was torch.FloatTensor got torch.DoubleTensor\)",
        ):
            y.sum().backward()


def test_a_gradient_given_in_another_dtype_is_cast_to_its_outputs():
    """PyTorch casts a grad_output to its output's dtype: the leaves' gradients keep their dtype."""
    for m in (engine, torch):
        x = m.tensor(X.copy(), dtype=m.float32, requires_grad=True)
        y = (x * 2).tanh()
        (g,) = m.autograd.grad(y, x, m.ones(3, dtype=m.float64), retain_graph=True)
        assert g.dtype == m.float32
        y.backward(m.ones(3, dtype=m.float64))
        assert x.grad.dtype == m.float32
        np.testing.assert_allclose(x.grad.numpy(), g.numpy())


def test_a_leaf_with_hooks_is_not_kept_alive_by_them():
    from engine.autograd import LEAF_WATCH

    before = len(LEAF_WATCH)
    x = engine.tensor(X.copy(), requires_grad=True)
    x.register_hook(lambda g: g)
    assert len(LEAF_WATCH) == before + 1
    del x
    gc.collect()
    assert len(LEAF_WATCH) == before


def test_a_client_non_leaf_reads_its_gradient_in_a_hook_beside_retain_grad():
    """(tests/client/test_client_tensor_hooks.py has the client's hooks against torch.)"""
    x = client.tensor(X.copy(), requires_grad=True)
    seen = []
    y = x * 2
    y.register_hook(lambda g: seen.append(g.numpy().copy()))
    y.retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 * 2 * X)
    np.testing.assert_allclose(seen[0], 2 * 2 * X)
