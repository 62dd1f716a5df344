"""A leaf's `.data` is copy-on-write only while something recorded may still read its value: after
a backward that freed the graph (the seed loop's `w.data -= lr * w.grad.data`) the update is in
place, as on the engine; a value still held, or a graph a backward can still pass, keeps the
recorded value. Every program here runs on the engine and the client (embedded and remote) with
the same results."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

X = np.arange(12.0).reshape(4, 3) / 10


def both(program):
    """(engine result, client result) of `program(module)`."""
    return program(engine), program(client)


def test_the_seed_update_after_backward_is_in_place(session):
    w = client.Variable(np.full((3, 2), 0.5), requires_grad=True)
    loss = (client.Variable(X).mm(w).clamp(min=0) - 1).pow(2).sum()
    loss.backward()
    array = w.data
    w.data -= 0.1 * w.grad.data
    assert np.shares_memory(array, w.data)  # no snapshot: nothing can read the old value again
    assert loss.item() == pytest.approx(engine_loss())


def engine_loss():
    w = engine.Variable(np.full((3, 2), 0.5), requires_grad=True)
    return ((engine.Variable(X).mm(w).clamp(min=0) - 1).pow(2).sum()).item()


def test_a_held_value_keeps_what_it_was_recorded_from(session):
    def program(m):
        w = m.Variable(np.full((3, 2), 0.5), requires_grad=True)
        h = m.Variable(X).mm(w)
        (h.clamp(min=0) - 1).pow(2).sum().backward()
        w.data -= 0.1 * w.grad.data
        return h.detach().numpy().copy(), w.data.copy()

    (h_engine, w_engine), (h_client, w_client) = both(program)
    np.testing.assert_allclose(h_client, h_engine)
    np.testing.assert_allclose(w_client, w_engine)


def test_a_graph_a_second_backward_can_pass_keeps_working(session):
    def program(m):
        w = m.Variable(np.ones(3), requires_grad=True)
        loss = (w + 1).sum()  # add and sum save nothing: a second backward is allowed
        loss.backward()
        w.data -= 1
        loss.backward()
        return w.grad.numpy().copy(), loss.item(), w.data.copy()

    for got, want in zip(*reversed(both(program))):
        np.testing.assert_allclose(got, want)


def test_a_freed_graph_still_raises_and_its_value_is_a_constant_elsewhere(session):
    def program(m):
        w = m.Variable(np.full((3, 2), 0.5), requires_grad=True)
        c = m.Variable(np.array(2.0), requires_grad=True)
        loss = m.Variable(X).mm(w).pow(2).sum()
        loss.backward()
        w.data -= 1
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            (loss * c).backward()
        (gc,) = m.autograd.grad(loss * c, [c]) if hasattr(m, "autograd") else m.grad(loss * c, [c])
        return gc.numpy().copy(), loss.item()

    (g_engine, l_engine), (g_client, l_client) = both(program)
    np.testing.assert_allclose(g_client, g_engine)
    assert l_client == pytest.approx(l_engine)


def test_retained_graphs_keep_their_snapshot(session):
    """A retained graph is computed again from the values it recorded (the client snapshots the
    leaf), so the second backward's gradient is the first one's."""
    w = client.Variable(np.full((3, 2), 0.5), requires_grad=True)
    loss = client.Variable(X).mm(w).pow(2).sum()
    loss.backward(retain_graph=True)
    first = w.grad.numpy().copy()
    w.data -= 1
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * first)
    np.testing.assert_allclose(first, 2 * X.T @ X @ np.full((3, 2), 0.5))
