"""torch.linalg's decompositions (eigh, eigvalsh, svd, svdvals, qr, pinv, lstsq, the singular-value norms) and
torch.svd/qr/pinverse: values and gradients against PyTorch (up to the signs of singular and eigenvectors: the
losses are sign-invariant), finite differences in float64, second derivatives, results and errors."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.autograd import gradcheck, gradgradcheck

RNG = np.random.default_rng(3)
TALL, WIDE, SQUARES = RNG.standard_normal((2, 4, 3)), RNG.standard_normal((3, 5)), RNG.standard_normal((2, 3, 3))


def _weights(t, x):
    return t.arange(1.0, 1.0 + x.numel(), dtype=x.dtype).reshape(x.shape).sin()


def _weighted(t, *parts):
    return sum((p * _weights(t, p)).sum() for p in parts)


CASES = {
    "svd_tall": (lambda t, a: _weighted(t, *(lambda r: (r.U.abs(), r.S, r.Vh.abs()))(t.linalg.svd(a, False))), TALL),
    "svd_wide": (lambda t, a: _weighted(t, *(lambda r: (r.U.abs(), r.S, r.Vh.abs()))(t.linalg.svd(a, False))), WIDE),
    "svd_square": (lambda t, a: _weighted(t, *(lambda r: (r.U.abs(), r.S**2, r.Vh.abs()))(t.linalg.svd(a))), SQUARES),
    "svd_product": (
        lambda t, a: _weighted(t, (lambda r: (r.U * r.S.unsqueeze(-2)) @ r.Vh)(t.linalg.svd(a, False))),
        TALL,
    ),
    "svd_full": (lambda t, a: _weighted(t, t.linalg.svd(a).Vh[:3].abs(), t.linalg.svd(a.mT).U[:, :3].abs()), WIDE),
    "svdvals": (lambda t, a: _weighted(t, t.linalg.svdvals(a) ** 2), TALL),
    "eigh": (
        lambda t, a: _weighted(t, *(lambda r: (r.eigenvalues, r.eigenvectors.abs()))(t.linalg.eigh(a + a.mT))),
        SQUARES,
    ),
    "eigh_upper": (
        lambda t, a: _weighted(t, *(lambda r: (r.eigenvalues, r.eigenvectors.abs()))(t.linalg.eigh(a, "U"))),
        SQUARES,
    ),
    "eigh_lower": (lambda t, a: _weighted(t, t.linalg.eigh(a).eigenvectors.abs()), SQUARES),
    "eigvalsh": (lambda t, a: _weighted(t, t.linalg.eigvalsh(a) ** 3), SQUARES),
    "qr_tall": (lambda t, a: _weighted(t, *t.linalg.qr(a)), TALL),
    "qr_wide": (lambda t, a: _weighted(t, *t.linalg.qr(a)), WIDE),
    "qr_complete": (lambda t, a: _weighted(t, *t.linalg.qr(a, mode="complete")), WIDE),
    "pinv_tall": (lambda t, a: _weighted(t, t.linalg.pinv(a)), TALL),
    "pinv_wide": (lambda t, a: _weighted(t, t.linalg.pinv(a).sin()), WIDE),
    "lstsq_vector": (lambda t, a: _weighted(t, t.linalg.lstsq(a, a[..., 0] * 2 + 1).solution), TALL),
    "lstsq_matrix": (lambda t, a: _weighted(t, t.linalg.lstsq(a.mT, a[:2].sin().T).solution), WIDE),
    "matrix_norms": (
        lambda t, a: _weighted(t, t.linalg.matrix_norm(a, "nuc"), t.linalg.matrix_norm(a, 2), t.linalg.norm(a[0], -2)),
        TALL,
    ),
    "matrix_norm_dims": (lambda t, a: _weighted(t, t.linalg.matrix_norm(a, 2, dim=(0, 2), keepdim=True)), TALL),
    "cond": (lambda t, a: _weighted(t, t.linalg.cond(a), t.linalg.cond(a, -2)), TALL),
    "old_svd": (lambda t, a: _weighted(t, *(lambda r: (r.U.abs(), r.S, r.V.abs()))(t.svd(a))), TALL),
    "old_qr": (lambda t, a: _weighted(t, *t.qr(a)) + _weighted(t, *a.qr(some=False)), WIDE),
    "pinverse": (lambda t, a: _weighted(t, t.pinverse(a), a.pinverse(rcond=1e-10)), WIDE),
}


def _loss_and_grads(t, name, dtype, order=1):
    fn, array = CASES[name]
    x = t.tensor(array, dtype=dtype, requires_grad=True)
    loss = fn(t, x)
    (grad,) = t.autograd.grad(loss, x, create_graph=order > 1)
    out = [loss, grad]
    if order > 1:
        out.append(t.autograd.grad((grad * _weights(t, grad)).sum(), x)[0])
    return [o.detach().numpy() for o in out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    for dtype, tol in ((np.float64, dict(rtol=1e-8, atol=1e-9)), (np.float32, dict(rtol=2e-3, atol=2e-4))):
        ours = _loss_and_grads(engine, name, getattr(engine, np.dtype(dtype).name))
        theirs = _loss_and_grads(torch, name, getattr(torch, np.dtype(dtype).name))
        for a, b in zip(ours, theirs, strict=True):
            assert a.dtype == dtype
            np.testing.assert_allclose(a, b, **tol)


SECOND = ["svd_tall", "svd_wide", "svd_square", "svdvals", "eigh", "eigvalsh", "qr_tall", "qr_wide", "pinv_tall"]


@pytest.mark.parametrize("name", SECOND)
def test_second_derivatives_match_torch(name):
    torch = pytest.importorskip("torch")
    for a, b in zip(_loss_and_grads(engine, name, engine.float64, 2), _loss_and_grads(torch, name, torch.float64, 2)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("name", sorted(CASES))
def test_finite_differences(name):
    """(eigh's gradient is PyTorch's, symmetric: a derivative along symmetric matrices, as eigh reads them)"""
    fn, array = CASES[name]
    x = engine.tensor(array, requires_grad=True)
    symmetric = name in ("eigh_upper", "eigh_lower", "eigvalsh")
    assert gradcheck(lambda a: fn(engine, a + a.mT if symmetric else a), (x,))
    if name in SECOND:
        assert gradgradcheck(lambda a: fn(engine, a + a.mT if symmetric else a), (x,))


def test_results_are_torchs_named_tuples_and_shapes():
    a = engine.tensor(RNG.standard_normal((2, 5, 3)))
    U, S, Vh = engine.linalg.svd(a)
    assert (U.shape, S.shape, Vh.shape) == ((2, 5, 5), (2, 3), (2, 3, 3))
    reduced = engine.linalg.svd(a, full_matrices=False)
    assert (reduced.U.shape, reduced.Vh.shape) == ((2, 5, 3), (2, 3, 3))
    np.testing.assert_allclose(((reduced.U * reduced.S.unsqueeze(-2)) @ reduced.Vh).numpy(), a.numpy(), atol=1e-12)
    np.testing.assert_allclose((U.mT @ U).numpy(), np.broadcast_to(np.eye(5), (2, 5, 5)), atol=1e-12)
    old = engine.svd(a, compute_uv=False)
    assert (old.U.shape, old.V.shape) == ((2, 5, 5), (2, 3, 3)) and not old.U.numpy().any()
    Q, R = engine.linalg.qr(a, mode="complete")
    assert (Q.shape, R.shape) == ((2, 5, 5), (2, 5, 3))
    np.testing.assert_allclose((Q @ R).numpy(), a.numpy(), atol=1e-12)
    only = engine.linalg.qr(a, mode="r")
    assert only.Q.shape == (0,) and only.R.shape == (2, 3, 3)
    values, vectors = engine.linalg.eigh(a.mT @ a)
    assert values.shape == (2, 3) and vectors.shape == (2, 3, 3) and (np.diff(values.numpy()) > 0).all()
    np.testing.assert_allclose((vectors * values.unsqueeze(-2) @ vectors.mT).numpy(), (a.mT @ a).numpy(), atol=1e-12)
    largest = np.take_along_axis(vectors.numpy(), np.abs(vectors.numpy()).argmax(-2)[:, None], -2)
    assert (largest > 0).all()  # one sign convention, whatever the LAPACK
    assert type(engine.linalg.eigh(a[0, :3])).__name__ == "EighResult"


def test_lstsq_results_per_driver_match_torch():
    torch = pytest.importorskip("torch")
    a, b = RNG.standard_normal((2, 5, 3)), RNG.standard_normal((2, 5, 2))
    for driver in (None, "gels", "gelsy", "gelsd", "gelss"):
        ours = engine.linalg.lstsq(engine.tensor(a), engine.tensor(b), driver=driver)
        theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
        assert ours._fields == ("solution", "residuals", "rank", "singular_values") and len(theirs) == 4
        for x, y in zip(ours, theirs):
            assert x.dtype == getattr(engine, str(y.dtype).removeprefix("torch."))
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-9, atol=1e-12)
    deficient = np.concatenate([a[0], a[0, :, :1]], axis=1)  # rank 3 of 4 columns
    ours = engine.linalg.lstsq(engine.tensor(deficient), engine.tensor(b[0]), driver="gelsd")
    assert int(ours.rank) == 3 and ours.residuals.shape == (0,)
    np.testing.assert_allclose(ours.solution.numpy(), np.linalg.lstsq(deficient, b[0], rcond=None)[0], atol=1e-12)


def test_matrix_rank_and_cond_match_torch():
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal((3, 5, 4))
    a[1, :, 3], a[2] = a[1, :, 0], np.outer(a[2, :, 0], a[2, 0])  # ranks 4, 3, 1
    for kwargs in ({}, {"atol": 1.0}, {"rtol": 0.3}, {"tol": 0.5}, {"hermitian": False}):
        ours, theirs = (
            engine.linalg.matrix_rank(engine.tensor(a), **kwargs),
            torch.linalg.matrix_rank(torch.tensor(a), **kwargs),
        )
        assert ours.dtype == engine.int64 and ours.tolist() == theirs.tolist()
    for p in ("fro", "nuc", float("inf"), 1, -1):  # (values only: torch 2.13's backward of these fails)
        ours, theirs = engine.linalg.cond(engine.tensor(a[0, :4]), p), torch.linalg.cond(torch.tensor(a[0, :4]), p)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


def test_repeated_eigenvalues_give_finite_gradients_of_invariant_losses():
    x = engine.tensor(np.diag([1.0, 1.0, 2.0]), requires_grad=True)
    values, vectors = engine.linalg.eigh(x)
    (values.sum() + (vectors @ vectors.mT).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.eye(3), atol=1e-12)
    y = engine.tensor(np.eye(3)[:, :2] * 2, requires_grad=True)  # singular values 2, 2
    engine.linalg.svd(y, full_matrices=False).S.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), np.eye(3)[:, :2], atol=1e-12)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: engine.linalg.eigh(engine.ones(3, 3, dtype=engine.float16)), "float32 or float64"),
        (lambda: engine.linalg.svd(engine.ones(3, 3, dtype=engine.float16)), "float32 or float64"),
        (lambda: engine.linalg.svd(engine.ones(3)), "at least 2 dimensions"),
        (lambda: engine.linalg.eigvalsh(engine.ones(3)), "at least 2 dimensions"),
        (lambda: engine.linalg.qr(engine.ones(3)), "at least 2 dimensions"),
        (lambda: engine.linalg.pinv(engine.ones(3, 3, dtype=engine.int64)), "float32 or float64"),
        (lambda: engine.linalg.eigh(engine.ones(3, 4)), "A must be batches of square matrices, but they are 3 by 4"),
        (lambda: engine.linalg.eigh(engine.ones(3, 3), UPLO="X"), "Expected UPLO argument to be 'L' or 'U'"),
        (lambda: engine.linalg.qr(engine.ones(3, 3), mode="x"), "qr received unrecognized mode 'x'"),
        (lambda: engine.linalg.lstsq(engine.ones(3, 3), engine.ones(3), driver="x"), "`driver` should be one of"),
        (lambda: engine.linalg.lstsq(engine.ones(3, 3), engine.ones(4, 2)), "should match other.size"),
        (lambda: engine.linalg.matrix_norm(engine.ones(3, 3), 3), "Order 3 not supported"),
    ],
)
def test_errors_name_the_problem(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_complete_qr_of_a_tall_matrix_has_no_gradient_as_in_torch():
    x = engine.tensor(RNG.standard_normal((4, 2)), requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
        engine.linalg.qr(x, mode="complete").Q.sum().backward()
