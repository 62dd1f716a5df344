"""Session 25's second set of divergences from PyTorch 2.13, each a program a user writes, run with `torch` bound to
the engine and to PyTorch: the `_ex` functions of torch.linalg on a singular or indefinite matrix (LAPACK's values
and `info`, not a refusal), the norm of integers refused. Gradients are checked twice: float64 finite
differences (`engine.gradcheck`) and PyTorch."""

from __future__ import annotations

import numpy
import pytest

import engine
from engine import user_warnings
from tests.engine.test_conformance_s23b import _refusal


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


FAILING_EX = {
    "inv_ex of rank 1": lambda t: t.linalg.inv_ex(t.tensor([[1.0, 2.0], [2.0, 4.0]])),
    "inv_ex of rank 2 of 3": lambda t: t.linalg.inv_ex(t.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])),
    "inv_ex of a batch": lambda t: t.linalg.inv_ex(t.tensor([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 4.0]]])),
    "cholesky_ex, order 2": lambda t: t.linalg.cholesky_ex(t.tensor([[1.0, 2.0], [2.0, 1.0]])),
    "cholesky_ex, order 3, upper": lambda t: t.linalg.cholesky_ex(
        t.tensor([[4.0, 2.0, 1.0, 0.0], [2.0, 5.0, 0.0, 1.0], [1.0, 0.0, -3.0, 1.0], [0.0, 1.0, 1.0, 5.0]]), upper=True
    ),
    "cholesky_ex, a zero pivot": lambda t: t.linalg.cholesky_ex(
        t.tensor([[4.0, 2.0, 1.0, 0.0], [2.0, 1.0, 0.0, 1.0], [1.0, 0.0, 3.0, 1.0], [0.0, 1.0, 1.0, 5.0]])
    ),
    "cholesky_ex of a batch": lambda t: t.linalg.cholesky_ex(
        t.tensor([[[1.0, 2.0], [2.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]]], dtype=t.float64)
    ),
    "solve_ex of a vector": lambda t: t.linalg.solve_ex(t.tensor([[1.0, 2.0], [2.0, 4.0]]), t.ones(2)),
    "solve_ex, right": lambda t: t.linalg.solve_ex(
        t.tensor([[1.0, 2.0], [2.0, 4.0]]), t.tensor([[1.0, 2.0], [3.0, 4.0]]), left=False
    ),
    "solve_ex of a batch": lambda t: t.linalg.solve_ex(
        t.tensor([[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 2.0]]]), t.tensor([[1.0, 2.0], [3.0, 4.0]])
    ),
}


@pytest.mark.parametrize("name", FAILING_EX)
def test_ex_functions_return_lapacks_values_and_info(name, oracle):
    """PyTorch returns what LAPACK left (infs and NaNs of a division by the zero pivot; the partial Cholesky factor
    with the failing pivot in place) and info > 0 where the engine raised LinAlgError."""
    ours, theirs = (FAILING_EX[name](torch) for torch in (engine, oracle))
    assert type(ours).__name__ == type(theirs).__name__.split(".")[-1]
    for a, b in zip(ours, theirs):
        assert str(a.dtype) == str(b.dtype)
        numpy.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, equal_nan=True)


def test_ex_functions_keep_the_gradient_of_the_good_matrices(oracle):
    """The invertible matrices of a batch with a singular one: their inverse's gradient, as PyTorch's (the singular
    one's: NaN in PyTorch, through its infs; zero in the engine)."""
    values = [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]]
    grads = []
    for torch in (engine, oracle):
        A = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        inverse, info = torch.linalg.inv_ex(A)
        inverse[1].sum().backward()
        grads.append(A.grad.numpy())
        assert info.tolist() == [2, 0]
    numpy.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-12)
    singular = engine.tensor(values[0], dtype=engine.float64)
    good = engine.tensor(values[1], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda a: engine.linalg.inv_ex(engine.stack([singular, a])).inverse[1], (good,))


CHECKED = {
    "inv_ex": lambda t: t.linalg.inv_ex(t.tensor([[1.0, 2.0], [2.0, 4.0]]), check_errors=True),
    "cholesky_ex of a batch": lambda t: t.linalg.cholesky_ex(t.tensor([[[1.0, 2.0], [2.0, 1.0]]]), check_errors=True),
    "solve_ex": lambda t: t.linalg.solve_ex(t.tensor([[1.0, 2.0], [2.0, 4.0]]), t.ones(2), check_errors=True),
    "torch.cholesky of an indefinite matrix": lambda t: t.cholesky(t.tensor([[1.0, 2.0], [2.0, 1.0]])),
    "Tensor.cholesky of 2x3": lambda t: t.ones(2, 3).cholesky(),
    "logdet of 2x3": lambda t: t.logdet(t.ones(2, 3)),
    "logdet of a vector": lambda t: t.logdet(t.ones(3)),
    "logdet of integers": lambda t: t.logdet(t.ones(2, 2, dtype=t.long)),
    "norm of integers": lambda t: t.tensor([3, 4]).norm(),
    "torch.norm of integers, p=1": lambda t: t.norm(t.tensor([3, 4]), p=1),
}


@pytest.mark.parametrize("name", CHECKED)
@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
def test_refusals_as_pytorchs(name, oracle):
    ours, theirs = (_refusal(lambda t=torch: CHECKED[name](t)) for torch in (engine, oracle))
    assert isinstance(ours, RuntimeError if type(theirs) is RuntimeError else engine.linalg.LinAlgError)
    assert str(ours) == str(theirs)


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
@pytest.mark.parametrize("upper", [False, True])
def test_old_cholesky_spelling(upper, oracle):
    """torch.cholesky(A, upper): linalg.cholesky's factor (transposed when upper), node CholeskyBackward0."""
    values = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]]
    results = []
    for torch in (engine, oracle):
        A = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        L = torch.cholesky(A, upper=upper)
        assert type(L.grad_fn).__name__ == "CholeskyBackward0"
        (L * torch.arange(9.0, dtype=torch.float64).reshape(3, 3)).sum().backward()
        results.append((L.detach().numpy(), A.grad.numpy()))
    for ours, theirs in zip(*results):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-10)
    A = engine.tensor(values, dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda a: engine.cholesky((a + a.mT) / 2, upper=upper), (A,))


def test_old_cholesky_spelling_warns_as_pytorch(monkeypatch):
    """Once a process, as PyTorch's TORCH_WARN_ONCE."""
    monkeypatch.setattr(user_warnings, "WARNED_ONCE", set())
    with pytest.warns(UserWarning, match="torch.cholesky is deprecated in favor of torch.linalg.cholesky"):
        engine.cholesky(engine.eye(2))


MATRIX = [[2.0, 1.0, 3.0], [0.5, 4.0, 1.0], [1.0, 2.0, 5.0]]
RHS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
COMPOSED = {
    **{
        f"solve_triangular upper={upper} left={left} unitriangular={unit}": (
            lambda t, A, B, u=upper, le=left, un=unit: t.linalg.solve_triangular(
                A, B if le else B.mT, upper=u, left=le, unitriangular=un
            ),
            "LinalgSolveTriangularBackward0",
        )
        for upper in (True, False)
        for left in (True, False)
        for unit in (True, False)
    },
    "cholesky_inverse": (lambda t, A, B: t.cholesky_inverse(A.tril()), "CholeskyInverseBackward0"),
    "cholesky_inverse upper": (lambda t, A, B: A.triu().cholesky_inverse(upper=True), "CholeskyInverseBackward0"),
    "lu_unpack": (lambda t, A, B: t.lu_unpack(*t.linalg.lu_factor(A))[1:], "LuUnpackBackward0"),
    "lu_unpack of 3x2": (lambda t, A, B: t.lu_unpack(*t.linalg.lu_factor(A[:, :2] + B))[1:], "LuUnpackBackward0"),
    "tensorinv": (lambda t, A, B: t.linalg.tensorinv(t.kron(A, A).reshape(3, 3, 3, 3), ind=2), None),
    "tensorsolve, dims": (
        lambda t, A, B: t.linalg.tensorsolve(t.kron(A, A).reshape(3, 3, 3, 3).movedim(2, 0), B @ B.mT, dims=(0,)),
        None,
    ),
}


@pytest.mark.parametrize("name", COMPOSED)
def test_composed_linalg_functions(name, oracle):
    """Values, node names and gradients as PyTorch's; gradients also as finite differences. (cholesky_inverse of a
    factor that is not triangular: PyTorch's gradient reaches the triangle its value does not read; the engine's
    is the finite differences', zero there.)"""
    call, node = COMPOSED[name]
    results = []
    for torch in (engine, oracle):
        A = torch.tensor(MATRIX, dtype=torch.float64, requires_grad=True)
        B = torch.tensor(RHS, dtype=torch.float64, requires_grad=True)
        outs = call(torch, A, B)
        outs = outs if isinstance(outs, tuple) else (outs,)
        if node is not None:
            assert [type(o.grad_fn).__name__ for o in outs] == [node] * len(outs)
        sum(
            (o * torch.linspace(-1.0, 2.0, o.numel(), dtype=torch.float64).reshape(o.shape)).sum() for o in outs
        ).backward()
        grads = [torch.zeros_like(x) if x.grad is None else x.grad for x in (A, B)]
        results.append([o.detach().numpy() for o in outs] + [g.numpy() for g in grads])
    for ours, theirs in zip(*results):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    A = engine.tensor(MATRIX, dtype=engine.float64, requires_grad=True)
    B = engine.tensor(RHS, dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda a, b: call(engine, a, b), (A, B))


LINALG_REFUSED = {
    "solve_triangular of a vector": lambda t: t.linalg.solve_triangular(t.eye(3), t.ones(3), upper=True),
    "tensorinv, ind=0": lambda t: t.linalg.tensorinv(t.ones(2, 2), ind=0),
    "tensorinv of 2x3": lambda t: t.linalg.tensorinv(t.ones(2, 3)),
    "tensorsolve of 2x3": lambda t: t.linalg.tensorsolve(t.ones(2, 3), t.ones(2)),
}


@pytest.mark.parametrize("name", LINALG_REFUSED)
def test_composed_linalg_refusals(name, oracle):
    ours, theirs = (_refusal(lambda t=torch: LINALG_REFUSED[name](t)) for torch in (engine, oracle))
    assert type(theirs) is RuntimeError and isinstance(ours, RuntimeError)
    assert str(ours) == str(theirs)


@pytest.mark.parametrize("method", ["byte", "char", "short"])
def test_integer_cast_methods(method, oracle):
    """x.byte(), x.char(), x.short() of floats (wrapping out of range as PyTorch's on this platform) and of integers:
    values and dtypes as PyTorch's, no gradient."""
    for values in ([1.5, -2.0, 300.0], [1, 2, -3]):
        ours, theirs = (getattr(torch.tensor(values), method)() for torch in (engine, oracle))
        assert str(ours.dtype) == str(theirs.dtype)
        assert ours.tolist() == theirs.tolist()
    x = engine.tensor([1.5, 2.0], requires_grad=True)
    assert not getattr(x, method)().requires_grad
