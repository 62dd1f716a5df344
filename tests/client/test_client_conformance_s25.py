"""Session 25's divergences as the client runs them (engine, embedded, against a server: `torch_like`), compared
with PyTorch: an integer softmax refused at the call with PyTorch's NotImplementedError (the client checks the
op's rule there; it was the service's validation error), `full` of a list refused, the determinant's gradient at
a singular matrix, and torch.linalg.lu / lu_solve / cholesky_solve / frexp through the client's Variables."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.test_conformance_s23b import _refusal


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.tensor([1, 2, 3]).softmax(0),
        lambda t: t.nn.functional.log_softmax(t.tensor([[1, 2], [3, 4]]), 0),
        lambda t: t.full((2,), [1, 2]),
        lambda t: t.inverse(t.ones(2, 3)),
    ],
)
def test_refused_as_torch(torch_like, call):
    torch = pytest.importorskip("torch")
    want, got = _refusal(lambda: call(torch)), _refusal(lambda: call(torch_like))
    assert isinstance(got, type(want)), (got, want)
    assert str(want) in str(got)


def _program(t):
    singular = t.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=t.float64, requires_grad=True)
    (g,) = t.autograd.grad(t.linalg.det(singular), singular, create_graph=True)
    A = t.tensor([[4.0, 3.0, 1.0], [6.0, 3.0, 2.0], [1.0, 5.0, 7.0]], dtype=t.float64, requires_grad=True)
    P, L, U = t.linalg.lu(A)
    LU, pivots = t.linalg.lu_factor(A)
    B = t.tensor([[1.0], [2.0], [3.0]], dtype=t.float64)
    X = t.linalg.lu_solve(LU, pivots, B)
    Y = t.cholesky_solve(B, t.linalg.cholesky(A @ A.mT))
    mantissa, exponent = t.frexp(A)
    (L.sum() + U.sum() + X.sum() + Y.sum() + mantissa.sum()).backward()
    return [v.detach().numpy() for v in (g, P, L, U, LU, pivots, X, Y, mantissa, exponent, A.grad)]


def test_linalg_program_matches_torch(torch_like):
    torch = pytest.importorskip("torch")
    for ours, theirs in zip(_program(torch_like), _program(torch), strict=True):
        assert ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
