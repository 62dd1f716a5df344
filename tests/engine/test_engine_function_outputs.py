"""A custom Function with several outputs on the engine, against torch 2.13: what `backward` receives (zeros,
or None under `set_materialize_grads(False)`, for outputs that got no gradient; zeros for a non-differentiable
one), grad_fn identity, tensor hooks and `retain_grad` on outputs, retain_graph and the freed graph's error,
create_graph through a differentiable multi-output backward, saved outputs, the
shared node's own hooks (tests/client/test_function_outputs.py runs the docs' examples on all three sides)."""

from __future__ import annotations

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")

X = np.array([0.5, -1.25, 2.0, 0.75])


def _described(g):
    return None if g is None else np.asarray(g.detach().numpy()).tolist()


def split_function(m, calls, materialize=True):
    """(x * y, x + y, sin(x), 7): backward records what it receives; it is differentiable (for create_graph)."""

    class Split(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.set_materialize_grads(materialize)
            prod, total = x * y, x + y
            ctx.save_for_backward(x, y, prod)
            return prod, total, x.sin(), 7

        @staticmethod
        def backward(ctx, g_prod, g_total, g_sin, g_seven):
            calls.append([_described(g) for g in (g_prod, g_total, g_sin)] + [g_seven])
            x, y, prod = ctx.saved_tensors
            gx = gy = None
            for g, dx, dy in ((g_prod, y, x), (g_total, 1.0, 1.0), (g_sin, x.cos(), 0.0)):
                if g is not None:
                    gx = g * dx if gx is None else gx + g * dx
                    gy = g * dy if gy is None else gy + g * dy
            calls.append(type(prod.grad_fn).__name__)  # a saved output is read with its grad_fn
            return gx, gy

    return Split


def _program(m, materialize, pick):
    calls = []
    Split = split_function(m, calls, materialize)
    x = m.tensor(X, requires_grad=True)
    y = m.tensor(X[::-1].copy(), requires_grad=True)
    outs = Split.apply(x, y)
    loss = sum((outs[i] * (i + 1.5)).sum() for i in pick)
    grads = m.autograd.grad(loss, [x, y])
    return calls, [_described(g) for g in grads], outs


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("pick", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_backward_receives_what_torch_gives(materialize, pick):
    want_calls, want_grads, want_outs = _program(torch, materialize, pick)
    calls, grads, outs = _program(engine, materialize, pick)
    assert calls == want_calls
    np.testing.assert_allclose(np.array(grads, dtype=float), np.array(want_grads, dtype=float), rtol=1e-12)
    assert outs[3] == want_outs[3] == 7
    assert [o.output_nr for o in outs[:3]] == [o.output_nr for o in want_outs[:3]] == [0, 1, 2]
    assert outs[0].grad_fn is outs[1].grad_fn is outs[2].grad_fn
    assert type(outs[0].grad_fn).__name__ == "SplitBackward"


def _hooks_and_retain(m):
    seen, calls = [], []
    Split = split_function(m, calls)
    x = m.tensor(X, requires_grad=True)
    y = m.tensor(X[::-1].copy(), requires_grad=True)
    prod, total, sin, _ = Split.apply(x, y)
    prod.register_hook(lambda g: seen.append(("prod", _described(g))))
    total.register_hook(lambda g: g * 10)  # replaces the gradient backward receives
    sin.retain_grad()
    loss = (prod * prod).sum() + total.sum() + (sin * 3).sum()
    loss.backward(retain_graph=True)
    first = [_described(x.grad), _described(y.grad), _described(sin.grad)]
    loss.backward()
    second = [_described(x.grad), _described(y.grad)]
    with pytest.raises(RuntimeError) as err:
        loss.backward()
    return seen, calls, first, second, str(err.value)


def test_hooks_retain_graph_and_freed_error_as_torch():
    want = _hooks_and_retain(torch)
    got = _hooks_and_retain(engine)
    assert got[0] == want[0] and got[1] == want[1]
    np.testing.assert_allclose(np.array(got[2]), np.array(want[2]), rtol=1e-12)
    np.testing.assert_allclose(np.array(got[3]), np.array(want[3]), rtol=1e-12)
    assert got[4] == want[4]


def _double_backward(m):
    calls = []
    Split = split_function(m, calls)
    x = m.tensor(X, requires_grad=True)
    y = m.tensor(X[::-1].copy(), requires_grad=True)
    prod, total, sin, _ = Split.apply(x, y)
    loss = (prod * sin).sum() + (total * total).sum()
    gx, gy = m.autograd.grad(loss, [x, y], create_graph=True)
    hx, hy = m.autograd.grad((gx * gx).sum() + gy.sum(), [x, y])
    return [_described(v) for v in (gx, gy, hx, hy)]


def test_create_graph_through_a_multi_output_backward_matches_torch():
    np.testing.assert_allclose(np.array(_double_backward(engine)), np.array(_double_backward(torch)), rtol=1e-12)


def _gx(values, create_graph=False):
    """d/dx of the loss of `_double_backward`, at x = `values` (and x itself)."""
    x = engine.tensor(values, requires_grad=True)
    prod, total, sin, _ = split_function(engine, []).apply(x, engine.tensor(X[::-1].copy()))
    (gx,) = engine.autograd.grad((prod * sin).sum() + (total * total).sum(), [x], create_graph=create_graph)
    return gx, x


def test_double_backward_matches_finite_differences():
    eps = 1e-6
    for i in range(4):
        gx, x = _gx(X, create_graph=True)
        (row,) = engine.autograd.grad(gx[i], [x])
        up, down = X.copy(), X.copy()
        up[i] += eps
        down[i] -= eps
        numeric = (_gx(up)[0].numpy() - _gx(down)[0].numpy()) / (2 * eps)  # column i; the Hessian is symmetric
        np.testing.assert_allclose(row.numpy(), numeric, rtol=1e-5, atol=1e-6)


def test_non_differentiable_and_integer_outputs_need_no_gradient():
    for m in (torch, engine):

        class Argmax(m.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.argmax(), x.max()

            @staticmethod
            def backward(ctx, g_index, g_max):
                return g_max * 0 + 1

        index, top = Argmax.apply(m.tensor(X, requires_grad=True))
        assert (index.requires_grad, index.grad_fn, top.requires_grad) == (False, None, True)


def _node_hooks(m):
    seen = []

    class Pair(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, ga, gb):
            seen.append(("backward", _described(ga), _described(gb)))
            return ga * 2 + gb * 3

    x = m.tensor(X, requires_grad=True)
    a, b = Pair.apply(x)
    a.grad_fn.register_prehook(lambda gs: seen.append(("pre", *map(_described, gs))))
    a.grad_fn.register_prehook(lambda gs: (gs[0] * 10, gs[1]))
    a.grad_fn.register_hook(lambda gi, go: seen.append(("post", [_described(g) for g in gi + go])))
    (a.sum() * 5).backward()
    return seen, _described(x.grad)


def test_a_multi_output_nodes_hooks_see_every_outputs_gradient_as_torch():
    assert _node_hooks(engine) == _node_hooks(torch)


def _twice_through_once_differentiable(m):
    class Square(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x, x.argmax()

        @staticmethod
        @m.autograd.function.once_differentiable
        def backward(ctx, g, g_index):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = m.tensor(X, requires_grad=True)
    square, _ = Square.apply(x)
    (g,) = m.autograd.grad((square**2).sum(), x, create_graph=True)  # its grad_outputs require grad
    with pytest.raises(RuntimeError) as err:
        g.sum().backward()
    return _described(g), g.requires_grad, g.is_leaf, str(err.value)


def test_differentiating_a_once_differentiable_backward_again_raises_as_torch():
    assert _twice_through_once_differentiable(engine) == _twice_through_once_differentiable(torch)
