"""A backward whose wrt names every input that requires grad skips the engine's check of that (issue 24 item 4):
and only then, with the same gradients either way."""

from __future__ import annotations

import numpy as np
import pytest

import engine.autograd
from engine.api import Variable, grad, grad_of_every_leaf
from wire.differentiate import gradients
from wire.graph import parse
from wire.run import Execution

GRAPH = {
    "version": 1,
    "nodes": [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "y", "op": "input", "requires_grad": True},
        {"id": "a", "op": "input"},
        {"id": "xy", "op": "mul", "inputs": ["x", "y"]},
        {"id": "z", "op": "add", "inputs": ["xy", "a"]},
        {"id": "loss", "op": "sum", "inputs": ["z"]},
    ],
    "outputs": ["loss"],
}
X, Y, A = (np.arange(4.0).reshape(2, 2) + k for k in (1, 5, 9))


@pytest.fixture
def checks(monkeypatch):
    """The engine's walks that check every leaf reached is an input, counted."""
    calls = []
    real = engine.autograd._leaves_all_in
    monkeypatch.setattr(engine.autograd, "_leaves_all_in", lambda *a: calls.append(1) or real(*a))
    return calls


def _gradients(wrt, graph=GRAPH, checks=None):
    execution = Execution(parse(graph), {"x": X, "y": Y, "a": A}, record=True, wrt=wrt or ())
    if checks is not None:
        checks.clear()  # (a grad node's own walk, while running, is not the backward's)
    return gradients(execution, wrt=wrt)


def test_wrt_naming_every_input_that_requires_grad_skips_the_check(checks):
    for wrt in (None, ["x", "y"], ["y", "x", "a"]):
        got = _gradients(wrt)
        np.testing.assert_allclose(got["x"], Y)
        np.testing.assert_allclose(got["y"], X)
        if wrt and "a" in wrt:
            np.testing.assert_allclose(got["a"], np.ones((2, 2)))
    assert checks == []


def test_wrt_leaving_out_an_input_that_requires_grad_is_checked_and_pruned(checks):
    got = _gradients(["x"])
    assert list(got) == ["x"]
    np.testing.assert_allclose(got["x"], Y)
    assert checks == [1]


def test_a_plan_with_a_grad_node_is_checked_and_an_intermediate_in_wrt_needs_no_check(checks):
    graph = {**GRAPH, "version": "1.1", "nodes": [*GRAPH["nodes"], {"id": "g", "op": "grad", "inputs": ["loss", "x"]}]}
    np.testing.assert_allclose(_gradients(["x", "y"], graph, checks)["y"], X)
    assert checks == [1]
    got = _gradients(["x", "y", "xy"], checks=checks)  # (an intermediate target: pruned by its node)
    np.testing.assert_allclose(got["xy"], np.ones((2, 2)))
    np.testing.assert_allclose(got["y"], X)
    assert checks == []


def test_the_engines_grad_of_every_leaf_is_grad_with_allow_unused(checks):
    x, y, unused = (Variable(v, requires_grad=True) for v in (X, Y, A))
    out = (x * y).sum()
    expected = grad(out, [x, y, unused], retain_graph=True, allow_unused=True)
    got = grad_of_every_leaf([out], [x, y, unused], None, False)
    assert got[2] is None and expected[2] is None
    for e, g in zip(expected[:2], got[:2]):
        np.testing.assert_allclose(g.numpy(), e.numpy())
        assert not g.requires_grad and g.grad_fn is None
    assert checks == [1]  # grad()'s, not grad_of_every_leaf's
