"""Deep graphs: 100,000-op chains run backward without recursion, and their memory is released."""

from __future__ import annotations

import gc
import sys
import weakref
from contextlib import contextmanager

import numpy as np

import engine
from engine import Variable

DEPTH = 100_000


@contextmanager
def low_recursion_limit(limit=1000):
    """Prove there is no Python recursion proportional to depth: a 100k-deep recursion would fail."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def test_deep_multiplicative_chain_backward():
    x = Variable(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    with low_recursion_limit():
        y = x
        for i in range(DEPTH):
            y = y * 1.0001
            if i == 10:
                early = weakref.ref(y.grad_fn)
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 1.0001**DEPTH), rtol=1e-9)
        np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy() * 1.0001**DEPTH, rtol=1e-9)
        assert early() is not None  # still reachable from y
        del y
        gc.collect()
        assert early() is None, "the graph outlived its output"


def test_deep_additive_chain_backward_and_grad():
    x = Variable(np.ones(4), requires_grad=True)
    with low_recursion_limit():
        y = x
        for _ in range(DEPTH):
            y = y + x
        (g,) = engine.grad(y.sum(), x, retain_graph=True)
        np.testing.assert_array_equal(g.numpy(), np.full(4, DEPTH + 1.0))
        y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, DEPTH + 1.0))


def test_deep_chain_dropped_without_backward_is_freed():
    x = Variable(np.ones(2), requires_grad=True)
    with low_recursion_limit():
        y = x
        for _ in range(DEPTH):
            y = y + 0.5
        last = weakref.ref(y.grad_fn)
        first = y.grad_fn
        while first.next_functions[0][0].name != "AccumulateGrad":  # down to the leaf x
            first = first.next_functions[0][0]
        first_ref = weakref.ref(first)
        del first
        del y  # deallocating 100,000 chained nodes must not overflow the C stack either
        gc.collect()
    assert last() is None and first_ref() is None


def test_backward_frees_saved_values():
    x = Variable(np.ones(1000), requires_grad=True)
    y = x
    nodes = []
    for _ in range(100):
        y = (y * 1.001).tanh() * 0.5
        nodes.append(y.grad_fn)
    y.sum().backward()
    # after backward without retain_graph, nodes keep at most shapes and dtypes of their inputs
    for node in nodes:
        assert node.freed and node.out_data is None
        assert all(not isinstance(s, Variable) for s in node.saved or ())


def test_repeated_deep_runs_do_not_accumulate_nodes():
    def live_nodes():
        gc.collect()
        return sum(issubclass(type(o), engine.node.Node) for o in gc.get_objects())

    def run():
        x = Variable(np.ones(3), requires_grad=True)
        y = x
        for _ in range(5_000):
            y = y * 1.0001
        y.sum().backward()

    run()
    baseline = live_nodes()
    for _ in range(3):
        run()
    assert live_nodes() <= baseline


def test_deep_create_graph_second_derivative():
    depth = 3_000
    x = Variable(np.array([0.7, -1.2]), requires_grad=True)
    with low_recursion_limit():
        y = x
        for _ in range(depth):
            y = y.sin()
        (g,) = engine.grad(y.sum(), x, create_graph=True)
        (h,) = engine.grad(g.sum(), x)
    # forward-mode oracle: value, first and second derivative of sin∘…∘sin
    v, d1, d2 = x.detach().numpy().copy(), np.ones(2), np.zeros(2)
    for _ in range(depth):
        v, d1, d2 = np.sin(v), np.cos(v) * d1, -np.sin(v) * d1**2 + np.cos(v) * d2
    np.testing.assert_allclose(y.detach().numpy(), v, rtol=1e-12)
    np.testing.assert_allclose(g.detach().numpy(), d1, rtol=1e-9)
    np.testing.assert_allclose(h.numpy(), d2, rtol=1e-9)


def test_wide_graph_with_shared_subexpressions():
    # a diamond lattice: every level uses the previous one twice; naive recursion would be exponential
    x = Variable(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(200):
        y = (y + y) * 0.5
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])
