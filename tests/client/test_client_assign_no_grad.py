"""An assignment under no_grad() into a value that has a grad_fn: the value changes, its grad_fn
stays, and a later backward passes it unchanged (PyTorch's and the engine's behaviour). The
client records the assignment (even when the value was already fetched) and sends it as an
`assignment` node whose gradient goes to the value assigned into. Each program runs on PyTorch
(the oracle, where installed), the engine and the client (embedded and remote)."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

X = np.array([1.0, -2.0, 3.0])


def index_assignment(m, fetch_first):
    x = m.tensor(X, requires_grad=True)
    y = x * 2
    if fetch_first:
        str(y)  # the client now holds y's value
    with m.no_grad():
        y[0] = 5.0
    (y * y).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), type(y.grad_fn).__name__


def inplace_op_and_chained_assignments(m, fetch_first):
    x = m.tensor(X, requires_grad=True)
    y = x.sin()  # saves its input, not its output (which is modified below)
    y.retain_grad()
    if fetch_first:
        y.tolist()
    with m.no_grad():
        y.mul_(3.0)
        y[1] = 7.0
        y[2:] = y[2:] + 1.0
    (y.sin() * 2).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), y.grad.numpy()


def assigned_value_that_requires_grad(m, fetch_first):
    x = m.tensor(X, requires_grad=True)
    z = m.tensor(np.array([10.0]), requires_grad=True)
    y = x * x
    if fetch_first:
        y.tolist()
    with m.no_grad():
        y[:1] = z * 3
    y.sum().backward()
    return y.detach().numpy(), x.grad.numpy(), z.grad is None


def power_modified_in_place(m, fetch_first):
    x = m.tensor(X, requires_grad=True)
    y = x**2  # only the exponent's vjp reads the output, and the exponent gets no gradient
    if fetch_first:
        y.tolist()
    with m.no_grad():
        y.add_(1.0)
    y.sum().backward()
    return y.detach().numpy(), x.grad.numpy()


PROGRAMS = [
    index_assignment,
    inplace_op_and_chained_assignments,
    assigned_value_that_requires_grad,
    power_modified_in_place,
]


def _same(got, want):
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-12)
        else:
            assert g == w


@pytest.mark.parametrize("fetch_first", [False, True])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_the_client_matches_the_engine(session, program, fetch_first):
    _same(program(client, fetch_first), program(engine, fetch_first))


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_the_engine_matches_pytorch(program):
    torch = pytest.importorskip("torch")
    got = program(engine, False)
    want = program(torch, False)
    want = [w.numpy() if hasattr(w, "numpy") else w for w in want]
    _same(got, want)


@pytest.mark.parametrize("module", ["torch", "engine", "client"])
def test_a_power_whose_exponent_gets_a_gradient_refuses_once_its_output_changed(session, module):
    m = pytest.importorskip("torch") if module == "torch" else {"engine": engine, "client": client}[module]
    x = m.tensor(np.array([1.0, 2.0]), requires_grad=True)
    e = m.tensor(np.array([2.0, 3.0]), requires_grad=True)
    y = x**e
    with m.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
