"""`engine.nn.functional` (issue 22): first and second derivatives of every differentiable case of
tests/nn_functional_cases.py by central differences (`gradcheck`, `gradgradcheck`, float64), the
stable forms where a naive composition overflows, and the functions' home: one definition, registered
for each Variable class. Values against PyTorch in three modes: tests/client/test_client_nn_functional.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import engine
from engine import gradcheck, gradgradcheck
from tests.nn_functional_cases import CASES, differentiable

F = engine.nn.functional
# the cases that warn as PyTorch does (tests/client/test_client_nn_functional.py checks the warnings)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Using a target size", "ignore:Implicit dimension choice", "ignore:reduction. 'mean' divides"
)
CHECKED = [c for c in CASES if c.gradcheck and differentiable(c)]


def _inputs(case):
    return [
        engine.tensor(a.astype(np.float64), requires_grad=i not in case.data)
        if a.dtype.kind == "f"
        else engine.tensor(a)
        for i, a in enumerate(case.arrays)
    ]


def _first_output(case):
    def fn(*tensors):
        out = case.call(engine, *tensors)
        return out[0] if isinstance(out, tuple) else out

    return fn


def test_the_table_checks_every_function():
    called = {name for name in F.__all__ if any(f"{name}-" in c.id or c.id == name for c in CHECKED)}
    # one_hot: integers in, integers out; gumbel_softmax draws its noise (tests/client/test_client_gumbel.py)
    assert set(F.__all__) - called == {"one_hot", "gumbel_softmax"}


@pytest.mark.parametrize("case", CHECKED, ids=[c.id for c in CHECKED])
def test_gradcheck(case):
    assert gradcheck(_first_output(case), _inputs(case))


@pytest.mark.parametrize("case", CHECKED, ids=[c.id for c in CHECKED])
def test_gradgradcheck(case):
    assert gradgradcheck(_first_output(case), _inputs(case))


def test_gradcheck_catches_a_wrong_function():
    """The harness can fail: a loss whose gradient is cut halfway is caught."""
    x = engine.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    t = engine.tensor([0, 2])
    with pytest.raises(engine.GradcheckError):
        gradcheck(
            lambda x: F.cross_entropy(x, t) + F.cross_entropy(x.detach() * 2, t) * 0 + (x.detach() ** 3).sum(), [x]
        )
    assert gradcheck(lambda x: F.cross_entropy(x, t), [x])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_forms_stay_finite_where_naive_ones_overflow(dtype):
    logits = engine.tensor(np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 0.0]], dtype), requires_grad=True)
    loss = F.cross_entropy(logits, engine.tensor([0, 2]))
    loss.backward()
    assert loss.item() == pytest.approx(1e4 / 2, rel=1e-6)
    assert np.isfinite(logits.grad.numpy()).all()
    for fn in (
        lambda z: F.binary_cross_entropy_with_logits(z, engine.ones_like(z)),
        lambda z: F.softplus(z).sum(),
        lambda z: F.elu(z).sum(),
        lambda z: F.silu(z).sum(),
        lambda z: F.gelu(z).sum(),
    ):
        z = engine.tensor(np.array([-1e4, -50.0, 0.0, 50.0, 1e4], dtype), requires_grad=True)
        out = fn(z)
        out.backward()
        assert np.isfinite(out.item()) and np.isfinite(z.grad.numpy()).all()


def test_softplus_keeps_digits_far_below_zero():
    x = engine.tensor(np.array([-40.0, -745.0]), requires_grad=True)
    out = F.softplus(x)
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), np.exp([-40.0, -745.0]), rtol=1e-12)  # log(1 + e^x) would give 0
    np.testing.assert_allclose(x.grad.numpy(), np.exp([-40.0, -745.0]), rtol=1e-12)


def test_logistic_loss_gradient_at_zero_is_sigmoid_minus_target():
    """At logit 0 the loss's two branches meet; the gradient is still sigmoid(0) - t, as PyTorch's."""
    z = engine.zeros(3, dtype=engine.float64, requires_grad=True)
    t = engine.tensor([0.0, 0.25, 1.0], dtype=engine.float64)
    F.binary_cross_entropy_with_logits(z, t, reduction="sum").backward()
    np.testing.assert_allclose(z.grad.numpy(), 0.5 - t.numpy(), rtol=1e-15)


def test_embedding_gradients_add_up_on_repeated_indices_and_skip_padding():
    weight = engine.ones(4, 2, dtype=engine.float64, requires_grad=True)
    F.embedding(engine.tensor([[1, 1, 3], [1, 0, 3]]), weight, padding_idx=3).sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy(), [[1, 1], [3, 3], [0, 0], [0, 0]])


def test_batch_norm_updates_running_stats_in_place_like_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((8, 3, 2))
    mean, var = engine.zeros(3, dtype=engine.float64), engine.ones(3, dtype=engine.float64)
    tmean, tvar = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    same_mean, same_var = mean, var
    for _ in range(3):
        F.batch_norm(engine.tensor(x), mean, var, training=True, momentum=0.2)
        torch.nn.functional.batch_norm(torch.tensor(x), tmean, tvar, training=True, momentum=0.2)
    assert mean is same_mean and var is same_var
    np.testing.assert_allclose(mean.numpy(), tmean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), tvar.numpy(), rtol=1e-12)


def test_functions_refuse_what_is_not_a_variable():
    with pytest.raises(TypeError, match="expected a Variable, got ndarray"):
        F.gelu(np.ones(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_without_scipy_computes_the_same(monkeypatch, dtype):
    """SciPy is not a dependency: without it erf falls back to the C library's, to within an ulp."""
    x = engine.tensor(np.linspace(-6, 6, 101).astype(dtype))
    with_scipy = engine.erf(x).numpy()
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # `from scipy.special import` fails
    without = engine.erf(x).numpy()
    assert without.dtype == with_scipy.dtype == dtype
    np.testing.assert_allclose(without, with_scipy, rtol=4 * np.finfo(dtype).eps, atol=np.finfo(dtype).tiny)
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(without, torch.erf(torch.tensor(x.numpy())).numpy(), rtol=4 * np.finfo(dtype).eps)


def test_a_name_not_provided_raises_not_implemented_naming_it():
    import client

    for namespace, module in (
        (engine.nn.functional, "torch.nn.functional"),
        (client.nn.functional, "torch.nn.functional"),
        (engine.nn, "torch.nn"),
        (client.nn, "torch.nn"),
    ):
        with pytest.raises(NotImplementedError, match=rf"{module}\.conv_tbc is not provided by gradserve"):
            namespace.conv_tbc  # noqa: B018
        assert not hasattr(namespace, "conv_tbc") and getattr(namespace, "conv_tbc", None) is None
    assert client.nn.functional.relu is engine.nn.functional.relu
