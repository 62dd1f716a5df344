"""A program recorded again (a training loop's step) is sent without writing its graph again
(`client.serialize.builder_for`); embedded, it is admitted as its last request was. Programs that
would be written differently are never taken for one another."""

from __future__ import annotations

import numpy as np
import pytest

import client
import client.serialize
import engine


def _step(E, x, a, program):
    loss = program(E.tensor(x), a)
    loss.backward()
    grad, a.grad = a.grad, None
    return np.asarray(loss.item()), np.asarray(grad.data)


PROGRAMS = {
    "shared": lambda x, a: (lambda y: (y + y).sum())(x.mm(a)),
    "twice": lambda x, a: (x.mm(a) + x.mm(a)).sum(),
    "clamp 0.0": lambda x, a: x.mm(a).clamp(min=0.0).sum(),
    "clamp -0.0": lambda x, a: x.mm(a).clamp(min=-0.0).sum(),
    "pow 2": lambda x, a: x.mm(a).pow(2).sum(),
    "pow 2.0": lambda x, a: x.mm(a).pow(2.0).sum(),
    # an op whose input is also an input of its other input (met again once both are placed), either way round
    "diamond": lambda x, a: (lambda h: (h * (h.clamp(min=0) - x.mm(a))).sum())(x.mm(a)),
    "diamond swapped": lambda x, a: (lambda h: ((h.clamp(min=0) - x.mm(a)) * h).sum())(x.mm(a)),
}


def test_a_repeated_step_writes_its_graph_once(session, monkeypatch):
    writes = []
    graph = client.serialize.Builder.graph
    monkeypatch.setattr(
        client.serialize.Builder, "graph", lambda self, outputs: writes.append(1) or graph(self, outputs)
    )
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    a, e = client.tensor(w.copy(), requires_grad=True), engine.tensor(w.copy(), requires_grad=True)
    for _ in range(5):
        got, expected = _step(client, x, a, PROGRAMS["pow 2"]), _step(engine, x, e, PROGRAMS["pow 2"])
        for g, want in zip(got, expected):
            np.testing.assert_allclose(g, want, rtol=1e-13)
        a.data -= 0.1 * got[1]
        e.data -= 0.1 * expected[1]
    assert len(writes) == 1


@pytest.mark.parametrize(
    "first, second",
    [("shared", "twice"), ("clamp 0.0", "clamp -0.0"), ("pow 2", "pow 2.0"), ("diamond", "diamond swapped")],
)
def test_programs_written_differently_are_keyed_apart(session, first, second):
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    w = np.array([[-1.0, 0.0], [0.0, 1.0]])
    a, e = client.tensor(w, requires_grad=True), engine.tensor(w, requires_grad=True)
    before = len(session._written)
    for name in (first, second, first, second):
        got, expected = _step(client, x, a, PROGRAMS[name]), _step(engine, x, e, PROGRAMS[name])
        for g, want in zip(got, expected):
            np.testing.assert_array_equal(g, want)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(want))
    assert len(session._written) == before + 2


def test_a_leaf_that_stops_requiring_grad_is_a_new_program(session):
    x, b = client.tensor(np.ones((2, 2))), client.tensor(np.ones((2, 2)), requires_grad=True)
    for requires in (True, False, True):
        x.requires_grad_(requires)
        (x * b).sum().backward()
        assert (x.grad is not None) == requires and b.grad is not None
        x.grad = b.grad = None
    assert len(session._written) == 2
