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
