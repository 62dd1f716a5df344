"""Session 25's divergences from PyTorch 2.13, each a program a user writes, run with `torch` bound to the engine and
to PyTorch: the determinant's gradient at a singular matrix, refusals worded as PyTorch's (a non-square inverse,
an integer softmax, `full` of a list), the lr schedulers' `get_lr` warning outside `step`, torch.linalg's LU
functions, `cholesky_solve`, `chain_matmul`, `frexp`, the gradient accumulated into a `create_graph` gradient and
`view` of a tensor whose strides cannot express it. Gradients are checked twice: float64 finite differences
(`engine.gradcheck`) and PyTorch."""

from __future__ import annotations

import warnings

import numpy
import pytest

import engine
from tests.engine.test_conformance_s23b import _refusal


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


SINGULAR = {
    "rank 1": [[1.0, 2.0], [2.0, 4.0]],
    "rank 2 of 3": [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]],
    "diagonal": [[1.0, 0.0], [0.0, 0.0]],
    "zero": [[0.0, 0.0], [0.0, 0.0]],
    "a batch, one singular": [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]]],
}


@pytest.mark.parametrize("name", SINGULAR)
def test_det_of_a_singular_matrix_has_the_cofactors_as_gradient(name, oracle):
    """PyTorch's create_graph gradient (the cofactors, as finite differences); its plain backward gives zeros where
    the determinant is exactly 0 (and the cofactors where it is tiny), the engine the cofactors in both."""
    grads = []
    for torch in (engine, oracle):
        x = torch.tensor(SINGULAR[name], dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(torch.linalg.det(x).sum(), x, create_graph=True)
        grads.append(g.detach().numpy())
        if torch is engine:
            x.grad = None
            torch.linalg.det(x).sum().backward()
            numpy.testing.assert_allclose(x.grad.numpy(), g.detach().numpy(), atol=1e-12)
            assert engine.gradcheck(lambda a: engine.linalg.det(a), (x,))
    numpy.testing.assert_allclose(grads[0], grads[1], atol=1e-12)


def test_det_of_a_nearly_singular_matrix(oracle):
    grads = []
    for torch in (engine, oracle):
        x = torch.tensor([[1.0, 0.0], [0.0, 1e-20]], dtype=torch.float64, requires_grad=True)
        torch.det(x).backward()
        grads.append(x.grad.numpy())
    numpy.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


# --- refusals in PyTorch's words ---------------------------------------------------------------------------------

REFUSED = {
    "inverse of a 2 by 3": lambda t: t.inverse(t.ones(2, 3)),
    "inverse of a vector": lambda t: t.linalg.inv(t.ones(3)),
    "det of a 2 by 3": lambda t: t.linalg.det(t.ones(2, 3)),
    "det of a vector": lambda t: t.det(t.ones(3)),
    "cholesky of a 3 by 2": lambda t: t.linalg.cholesky(t.ones(3, 2)),
    "slogdet of a 2 by 3": lambda t: t.linalg.slogdet(t.ones(2, 3)),
    "softmax of integers": lambda t: t.tensor([1, 2, 3]).softmax(0),
    "softmax of integers, not the last dim": lambda t: t.tensor([[1, 2], [3, 4]]).softmax(0),
    "log_softmax of integers": lambda t: t.nn.functional.log_softmax(t.tensor([[1, 2, 3]]), 1),
    "softmax of bools": lambda t: t.softmax(t.tensor([True, False]), 0),
    "softmax of int32": lambda t: t.tensor([1, 2], dtype=t.int32).softmax(-1),
    "full of a list": lambda t: t.full((2,), [1, 2]),
    "full of a tuple": lambda t: t.full((2,), (1, 2)),
    "full of a vector": lambda t: t.full((2,), t.tensor([1.0, 2.0])),
    "full of an array": lambda t: t.full((2,), numpy.array(2.0)),
    "full of None": lambda t: t.full((2,), None),
    "narrow out of range": lambda t: t.zeros(3).narrow(0, 2, 2),
    "max of nothing": lambda t: t.zeros(0).max(),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_as_torch(name, oracle):
    want = _refusal(lambda: REFUSED[name](oracle))
    got = _refusal(lambda: REFUSED[name](engine))
    assert isinstance(got, type(want)), (got, want)
    assert str(got) == str(want)


def test_what_torch_takes_still_runs(oracle):
    for torch in (engine, oracle):
        assert torch.full((2,), torch.tensor(3.0)).tolist() == [3.0, 3.0]
        assert torch.full((2,), numpy.float32(2)).tolist() == [2.0, 2.0]
        assert torch.full((2,), True).dtype == torch.bool and torch.full((2,), 2).dtype == torch.int64
        out = torch.softmax(torch.tensor([1, 2, 3]), 0, dtype=torch.float64)
        numpy.testing.assert_allclose(out.numpy(), [0.09003057, 0.24472847, 0.66524096], rtol=1e-6)


# --- lr schedulers ----------------------------------------------------------------------------------------------

SCHEDULERS = {
    "StepLR": lambda L, o: L.StepLR(o, 2),
    "LambdaLR": lambda L, o: L.LambdaLR(o, lambda e: 0.5),
    "MultiplicativeLR": lambda L, o: L.MultiplicativeLR(o, lambda e: 0.5),
    "ExponentialLR": lambda L, o: L.ExponentialLR(o, 0.5),
    "LinearLR": lambda L, o: L.LinearLR(o),
    "CosineAnnealingLR": lambda L, o: L.CosineAnnealingLR(o, 5),
    "OneCycleLR": lambda L, o: L.OneCycleLR(o, 1.0, total_steps=10),
    "PolynomialLR": lambda L, o: L.PolynomialLR(o),
    "CosineAnnealingWarmRestarts": lambda L, o: L.CosineAnnealingWarmRestarts(o, 3),
    "CyclicLR": lambda L, o: L.CyclicLR(o, 0.01, 0.1),
}


@pytest.mark.parametrize("name", SCHEDULERS)
def test_get_lr_outside_step_warns(name, oracle):
    seen = []
    for torch in (engine, oracle):
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
        with warnings.catch_warnings(record=True) as stepping:
            warnings.simplefilter("always")
            scheduler = SCHEDULERS[name](torch.optim.lr_scheduler, optimizer)
            for _ in range(3):
                optimizer.step()
                scheduler.step()
        with warnings.catch_warnings(record=True) as asked:
            warnings.simplefilter("always")
            values = scheduler.get_lr()
        seen.append(([str(w.message) for w in stepping], [str(w.message) for w in asked], values))
        assert scheduler.state_dict()["_get_lr_called_within_step"] is False
    assert seen[0][1] == ["To get the last learning rate computed by the scheduler, please use `get_last_lr()`."]
    assert seen[0][:2] == seen[1][:2]
    numpy.testing.assert_allclose(seen[0][2], seen[1][2], rtol=1e-12)


def test_a_users_scheduler_does_not_warn(oracle):
    for torch in (engine, oracle):

        class Halving(torch.optim.lr_scheduler.LRScheduler):
            def get_lr(self):
                return [group["lr"] / 2 for group in self.optimizer.param_groups]

        scheduler = Halving(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert scheduler.get_lr() == [0.025]


# --- torch.linalg's LU functions, cholesky_solve, chain_matmul, frexp, complex, polar ------------------------------


def _values(out):
    return [part.detach().numpy() for part in (out if isinstance(out, tuple) else (out,))]


def _same(ours, theirs, rtol):
    for a, b in zip(_values(ours), _values(theirs), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        numpy.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


MATRICES = {
    "3 by 3": (3, 3),
    "a batch of 4 by 4": (2, 4, 4),
    "tall 5 by 3": (5, 3),
    "wide 2 by 4": (2, 4),
    "a batch of wide": (3, 2, 3),
}


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lu_and_lu_factor_as_torch(name, dtype, oracle):
    a = numpy.random.default_rng(1).uniform(-1, 1, MATRICES[name])
    outs, grads = [], []
    for torch in (engine, oracle):
        for fn in (torch.linalg.lu, torch.linalg.lu_factor):
            if fn is torch.linalg.lu_factor and a.shape[-1] != a.shape[-2]:
                fn = torch.linalg.lu_factor_ex
            A = torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True)
            out = fn(A)
            assert type(out).__name__ == type(fn(A.detach())).__name__
            weights = [
                torch.arange(float(p.numel()), dtype=A.dtype).reshape(p.shape) for p in out if p.is_floating_point()
            ]
            sum(
                ((p * w).sum() for p, w in zip([p for p in out if p.is_floating_point()], weights)), A.sum() * 0
            ).backward()
            outs.append(out)
            grads.append(A.grad)
            names = [None if p.grad_fn is None else p.grad_fn.name() for p in out]
            assert names == [None if getattr(p, "grad_fn", None) is None else p.grad_fn.name() for p in outs[-1]]
    rtol = 1e-10 if dtype == "float64" else 2e-4
    for ours, theirs in zip(outs[:2], outs[2:]):
        _same(ours, theirs, rtol)
        assert [None if p.grad_fn is None else p.grad_fn.name() for p in ours] == [
            None if p.grad_fn is None else p.grad_fn.name() for p in theirs
        ]
    for ours, theirs in zip(grads[:2], grads[2:]):
        numpy.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=rtol * 10, atol=rtol * 10)
    if dtype == "float64":
        A = engine.tensor(a, requires_grad=True)
        assert engine.gradcheck(lambda x: engine.linalg.lu(x)[1:], (A,))
        assert engine.gradcheck(lambda x: engine.linalg.lu_factor_ex(x).LU, (A,))


def test_lu_of_a_singular_matrix_and_lu_factors_refusal(oracle):
    singular = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]
    for torch in (engine, oracle):
        P, L, U = torch.linalg.lu(torch.tensor(singular, dtype=torch.float64))
        numpy.testing.assert_allclose((P @ L @ U).numpy(), singular, atol=1e-15)
        out = torch.linalg.lu_factor_ex(torch.tensor([[[0.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [3.0, 4.0]]]))
        assert out.info.tolist() == [1, 0] and out.pivots.tolist() == [[1, 2], [2, 2]]
    for call in (
        lambda t: t.linalg.lu_factor(t.zeros(2, 2)),
        lambda t: t.linalg.lu_factor(t.tensor([[1.0, 2.0], [2.0, 4.0]])),
        lambda t: t.linalg.lu(t.ones(3)),
        lambda t: t.linalg.lu_factor(t.ones(3)),
        lambda t: t.linalg.lu(t.ones(2, 2), pivot=False),
        lambda t: t.linalg.lu(t.tensor([[1, 2], [3, 4]])),
        lambda t: t.linalg.lu_solve(t.ones(2, 3), t.ones(2, dtype=t.int32), t.ones(2, 1)),
        lambda t: t.cholesky_solve(t.ones(2), t.eye(2)),
        lambda t: t.chain_matmul(),
        lambda t: t.frexp(t.tensor([1, 2])),
        lambda t: t.complex(t.tensor([1, 2]), t.tensor([1, 2])),
        lambda t: t.complex(t.tensor([1.0]), t.tensor([1.0], dtype=t.float64)),
        lambda t: t.polar(t.tensor([1.0]), t.tensor([1.0], dtype=t.float64)),
    ):
        want, got = _refusal(lambda: call(oracle)), _refusal(lambda: call(engine))  # noqa: B023  (called at once)
        assert isinstance(got, type(want)) and str(got) == str(want), (got, want)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_as_torch(left, adjoint, oracle):
    rng = numpy.random.default_rng(2)
    a, b = rng.uniform(-1, 1, (2, 3, 3)), rng.uniform(-1, 1, (2, 3, 2) if left else (2, 2, 3))
    outs = []
    for torch in (engine, oracle):
        LU, pivots = torch.linalg.lu_factor(torch.tensor(a))
        LU.requires_grad_()
        B = torch.tensor(b, requires_grad=True)
        X = torch.linalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint)
        assert X.grad_fn.name() == "LinalgLuSolveBackward0"
        (X * torch.arange(12.0, dtype=X.dtype).reshape(X.shape)).sum().backward()
        outs.append((X.detach().numpy(), LU.grad.numpy(), B.grad.numpy()))
        if torch is engine:
            solve = engine.linalg.lu_solve
            assert engine.gradcheck(lambda L, B, p=pivots, s=solve: s(L, p, B, left=left, adjoint=adjoint), (LU, B))
    for ours, theirs in zip(*outs):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_as_torch(upper, oracle):
    rng = numpy.random.default_rng(3)
    m = rng.uniform(-1, 1, (3, 3))
    spd, b = m @ m.T + 3 * numpy.eye(3), rng.uniform(-1, 1, (3, 2))
    outs = []
    for torch in (engine, oracle):
        L = torch.linalg.cholesky(torch.tensor(spd), upper=upper).detach().requires_grad_()
        B = torch.tensor(b, requires_grad=True)
        X = torch.cholesky_solve(B, L, upper=upper)
        assert X.grad_fn.name() == "CholeskySolveBackward0"
        (X * torch.arange(6.0, dtype=X.dtype).reshape(3, 2)).sum().backward()
        outs.append((X.detach().numpy(), L.grad.numpy(), B.grad.numpy(), B.cholesky_solve(L, upper).detach().numpy()))
        if torch is engine:
            assert engine.gradcheck(lambda B, L: engine.cholesky_solve(B, L, upper=upper), (B, L))
    for ours, theirs in zip(*outs):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_chain_matmul_warns_once_and_is_multi_dot(oracle):
    outs = []
    for torch in (engine, oracle):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            a = torch.arange(6.0).reshape(2, 3).requires_grad_()
            out = torch.chain_matmul(a, torch.ones(3, 4), torch.ones(4, 1))
            torch.chain_matmul(torch.ones(2, 2))
        out.sum().backward()
        outs.append((out.tolist(), a.grad.tolist(), len(seen) <= 1))
        assert all("torch.chain_matmul is deprecated" in str(w.message) for w in seen)
    assert outs[0] == outs[1]


def test_frexp_as_torch(oracle):
    values = [8.0, 0.3, -5.0, 0.0, -0.0, float("inf"), float("nan"), 1e-40, 3.0]
    outs = []
    for torch in (engine, oracle):
        for dtype in (torch.float32, torch.float64):
            x = torch.tensor(values, dtype=dtype, requires_grad=True)
            mantissa, exponent = x.frexp()
            assert exponent.dtype == torch.int32 and not exponent.requires_grad
            assert mantissa.grad_fn.name() == "FrexpBackward0"
            mantissa[:5].sum().backward()
            outs.append(
                (mantissa.detach().numpy(), exponent.numpy(), x.grad.numpy(), str(torch.frexp(x).mantissa.dtype))
            )
    for ours, theirs in zip(outs[:2], outs[2:]):
        for a, b in zip(ours, theirs):
            numpy.testing.assert_array_equal(a, b)
    x = engine.tensor([3.0, -0.7, 12.5], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda x: engine.frexp(x).mantissa, (x,))


def test_complex_and_polar_are_complex_views(oracle):
    outs = []
    for torch in (engine, oracle):
        r = torch.tensor([[2.0], [1.0]], requires_grad=True)
        theta = torch.tensor([0.5, -1.0, 3.0], requires_grad=True)
        z, w = torch.polar(r, theta), torch.complex(r, theta)
        assert z.is_complex() and z.shape == (2, 3) and w.shape == (2, 3)
        (torch.view_as_real(z).sum() + (w.real * 2 + w.imag * 3).sum()).backward()
        outs.append(
            (torch.view_as_real(z).detach().numpy(), torch.view_as_real(w).detach().numpy(), r.grad, theta.grad)
        )
    for ours, theirs in zip(*outs):
        numpy.testing.assert_allclose(numpy.asarray(ours), numpy.asarray(theirs), rtol=1e-6)


def test_gradcheck_of_a_transposed_input(oracle):
    """gradcheck perturbs the input's own elements: of a transposed leaf the finite differences were all zero (a
    reshape of it is a copy), and a correct gradient was reported wrong."""
    for torch in (engine, oracle):
        x = torch.tensor([[2.0, 0.0], [1.0, 3.0]], dtype=torch.float64).mT.detach().requires_grad_()
        assert torch.autograd.gradcheck(lambda x: (x * x * x[0, 1]).sum(), (x,))
        with pytest.raises(Exception, match="Jacobian mismatch"):
            torch.autograd.gradcheck(lambda x: WRONG.apply(x), (x,))


class _Wrong:
    """A Function whose backward is twice its derivative (gradcheck must say so), for both packages."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 6


class _Dispatch:
    def apply(self, x):
        torch = engine if isinstance(x, engine.Variable) else __import__("torch")
        return type("Wrong", (torch.autograd.Function,), {k: vars(_Wrong)[k] for k in ("forward", "backward")}).apply(x)


WRONG = _Dispatch()


def test_a_plain_backward_adds_in_place_into_a_create_graph_gradient(oracle):
    """PyTorch's AccumulateGrad adds a plain backward's gradient into a `.grad` that requires grad in place (grad
    mode is off): the same tensor, still requiring grad, its graph kept (so a later backward through it still
    reaches x). Ours made a new gradient that did not require grad."""
    seen = []
    for torch in (engine, oracle):
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (PyTorch's reference-cycle warning of create_graph)
            (x * x).sum().backward(create_graph=True)
        first = x.grad
        (x * 3).sum().backward()
        assert x.grad is first and x.grad.requires_grad and x.grad.grad_fn is not None
        values = x.grad.tolist()
        x.grad.sum().backward()
        seen.append((values, x.grad.tolist()))
    assert seen[0] == seen[1] == ([5.0, 7.0], [7.0, 9.0])


# --- view of a strided view ---------------------------------------------------------------------------------------

VIEWS = {
    "transposed, flattened": lambda t: t.arange(6.0).reshape(2, 3).t().view(6),
    "transposed, same shape": lambda t: t.arange(6.0).reshape(2, 3).t().view(3, 2),
    "transposed, a dim split": lambda t: t.arange(12.0).reshape(3, 4).t().view(2, 2, 3),
    "transposed twice": lambda t: t.arange(6.0).reshape(2, 3).t().t().view(6),
    "transposed, contiguous()": lambda t: t.arange(6.0).reshape(2, 3).t().contiguous().view(6),
    "heads merged after transpose(1, 2)": lambda t: t.arange(24.0).reshape(1, 2, 3, 4).transpose(1, 2).view(1, 3, 8),
    "heads merged after contiguous()": lambda t: (
        t.arange(24.0).reshape(1, 2, 3, 4).transpose(1, 2).contiguous().view(1, 3, 8)
    ),
    "permuted, a leading dim kept": lambda t: t.arange(24.0).reshape(2, 3, 4).permute(1, 0, 2).view(3, 2, 2, 2),
    "permuted, merged": lambda t: t.arange(24.0).reshape(2, 3, 4).permute(1, 0, 2).view(3, 8),
    "every other element": lambda t: t.arange(8.0)[::2].view(2, 2),
    "a column": lambda t: t.arange(12.0).reshape(3, 4)[:, 1].view(3),
    "narrowed, a dim added": lambda t: t.arange(12.0).reshape(3, 4).narrow(1, 0, 2).view(3, 2, 1),
    "narrowed, flattened": lambda t: t.arange(12.0).reshape(3, 4).narrow(1, 0, 2).view(-1),
    "expanded, flattened": lambda t: t.ones(3, 1).expand(3, 4).view(12),
    "expanded, a dim split": lambda t: t.ones(3, 1).expand(3, 4).view(3, 2, 2),
    "a diagonal": lambda t: t.arange(9.0).reshape(3, 3).diagonal().view(3, 1),
    "view_as": lambda t: t.arange(6.0).reshape(2, 3).t().view_as(t.ones(6)),
    "reshape_as": lambda t: t.arange(6.0).reshape(2, 3).t().reshape_as(t.ones(6)),
    "reshape": lambda t: t.arange(6.0).reshape(2, 3).t().reshape(6),
    "flatten": lambda t: t.arange(6.0).reshape(2, 3).t().flatten(),
    "empty": lambda t: t.ones(0, 3).t().view(0),
}


@pytest.mark.parametrize("name", VIEWS)
def test_view_of_a_strided_view_as_torch(name, oracle):
    """torch refuses `view` where a view's strides cannot address its elements in the new shape ("view size is not
    compatible ..."); ours reshaped (copying). The same calls are allowed where the strides can."""
    outs = []
    for torch in (engine, oracle):
        try:
            outs.append(VIEWS[name](torch).tolist())
        except RuntimeError as error:
            outs.append(str(error))
    assert outs[0] == outs[1]


def test_contiguity_and_strides_of_views(oracle):
    seen = []
    for torch in (engine, oracle):
        x = torch.arange(24.0).reshape(2, 3, 4)
        views = [x, x.permute(2, 0, 1), x[:, 1], x[..., ::2], x.transpose(0, 1), x[:1], x.diagonal(0, 1, 2)]
        views += [torch.ones(3, 1).expand(3, 4), torch.ones(1, 4).t(), torch.ones(3, 4)[1]]
        seen.append([(v.is_contiguous(), v.stride(), v.contiguous().is_contiguous()) for v in views])
        base = torch.ones(2, 2)
        copy = base.t().contiguous()
        copy.mul_(2)  # a copy: its base is unchanged
        assert base.tolist() == [[1.0, 1.0], [1.0, 1.0]] and base.contiguous() is base
        w = torch.ones(2, 3, requires_grad=True)
        (w.t().contiguous().view(-1) * torch.arange(6.0)).sum().backward()
        seen.append((w.grad.tolist(), type(w.t().contiguous().grad_fn).__name__))
    assert seen[:2] == seen[2:]


# --- torch.linalg's failures in PyTorch's words ---------------------------------------------------------------------

SINGULAR_2 = [[1.0, 2.0], [2.0, 4.0]]
INDEFINITE = [[1.0, 2.0], [2.0, 1.0]]
FAILURES = {
    "inv of a singular matrix": lambda t: t.linalg.inv(t.tensor(SINGULAR_2)),
    "inverse of zeros": lambda t: t.inverse(t.zeros(2, 2)),
    "inv, a batch": lambda t: t.linalg.inv(t.stack([t.eye(2), t.tensor(SINGULAR_2)])),
    "matrix_power(-1)": lambda t: t.linalg.matrix_power(t.tensor(SINGULAR_2), -1),
    "cholesky, order 2": lambda t: t.linalg.cholesky(t.tensor(INDEFINITE)),
    "cholesky, order 1": lambda t: t.linalg.cholesky(-t.eye(2)),
    "cholesky, a batch": lambda t: t.linalg.cholesky(t.stack([t.eye(2), -t.eye(2)])),
    "solve": lambda t: t.linalg.solve(t.tensor(SINGULAR_2), t.ones(2)),
    "inv of integers": lambda t: t.linalg.inv(t.tensor([[1, 2], [3, 4]])),
    "cholesky of integers": lambda t: t.linalg.cholesky(t.tensor([[1, 0], [0, 1]])),
    "det of integers": lambda t: t.det(t.tensor([[1, 0], [0, 1]])),
    "slogdet of integers": lambda t: t.linalg.slogdet(t.tensor([[1, 0], [0, 1]])),
    "vector_norm of integers": lambda t: t.linalg.vector_norm(t.tensor([3, 4])),
    "linalg.norm of integers": lambda t: t.linalg.norm(t.tensor([3, 4])),
    "matrix_norm of integers": lambda t: t.linalg.matrix_norm(t.tensor([[3, 4]]), dtype=t.float32),
}


@pytest.mark.parametrize("name", FAILURES)
def test_linalg_failures_in_torchs_words(name, oracle):
    want = _refusal(lambda: FAILURES[name](oracle))
    got = _refusal(lambda: FAILURES[name](engine))
    assert isinstance(got, RuntimeError) and str(got) == str(want), (got, want)
    if isinstance(want, oracle.linalg.LinAlgError):
        assert isinstance(got, engine.linalg.LinAlgError)
