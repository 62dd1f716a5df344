"""`torch.nn.init` through the engine, the embedded client and a live server (`torch_like`): every function
PyTorch's module has, with its parameters and defaults; trunc_normal_'s bounds and moments, orthogonal_'s
orthogonality (tall, wide and convolution-shaped), eye_, dirac_ and sparse_ values as PyTorch's; their
errors as PyTorch's; the deprecated spellings warning as there."""

from __future__ import annotations

import inspect
import math
from statistics import NormalDist

import numpy as np
import pytest

from tests.client.test_client_nn_optim import oracle, values  # noqa: F401

NAMES = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_init_function_has_torchs_parameters(torch_like, oracle, name):  # noqa: F811
    ours, theirs = getattr(torch_like.nn.init, name), getattr(oracle.nn.init, name)
    ours_params = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()]
    assert ours_params == [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()]


def test_trunc_normal_bounds_and_moments(torch_like):
    torch = torch_like
    torch.manual_seed(0)
    t = torch.nn.init.trunc_normal_(torch.empty(200, 100, dtype=torch.float64), mean=0.5, std=2.0, a=-1.0, b=3.0)
    drawn = values(t)
    assert drawn.min() >= -1.0 and drawn.max() <= 3.0 and drawn.min() < -0.95 and drawn.max() > 2.95
    unit, alpha, beta = NormalDist(), -0.75, 1.25  # the bounds in std from the mean
    want_mean = 0.5 + 2.0 * (unit.pdf(alpha) - unit.pdf(beta)) / (unit.cdf(beta) - unit.cdf(alpha))  # 0.855
    assert abs(drawn.mean() - want_mean) < 0.03
    standard = values(torch.nn.init.trunc_normal_(torch.empty(20000, dtype=torch.float64)))
    want_var = 1 - 2 * 2 * math.exp(-2) / math.sqrt(2 * math.pi) / math.erf(2 / math.sqrt(2))
    assert abs(standard.var() - want_var) < 0.03 and np.abs(standard).max() <= 2.0


@pytest.mark.parametrize("shape", [(6, 6), (8, 3), (3, 8), (4, 2, 3, 3)])
def test_orthogonal_is_orthogonal_times_gain(torch_like, shape):
    torch = torch_like
    w = torch.nn.Parameter(torch.empty(*shape, dtype=torch.float64))
    assert torch.nn.init.orthogonal_(w, gain=2.0) is w and w.requires_grad and w.is_leaf
    m = values(w).reshape(shape[0], -1) / 2.0
    small = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(small, np.eye(min(m.shape)), atol=1e-12)


def test_eye_dirac_sparse_values_like_torch(torch_like, oracle):  # noqa: F811
    for m, kind in ((torch_like, "ours"), (oracle, "theirs")):
        eye = values(m.nn.init.eye_(m.empty(3, 5)))
        dirac = values(m.nn.init.dirac_(m.empty(6, 4, 3, 3), groups=2))
        dirac1 = values(m.nn.init.dirac_(m.empty(2, 3, 5)))
        if kind == "ours":
            mine = eye, dirac, dirac1
    for got, want in zip(mine, (eye, dirac, dirac1)):
        np.testing.assert_array_equal(got, want)
    torch = torch_like
    sparse = values(torch.nn.init.sparse_(torch.empty(10, 7), sparsity=0.25, std=0.5))
    assert ((sparse == 0).sum(axis=0) == 3).all() and sparse.std() > 0.2


@pytest.mark.parametrize(
    "call",
    [
        lambda i, m: i.eye_(m.empty(2, 2, 2)),
        lambda i, m: i.dirac_(m.empty(2, 2)),
        lambda i, m: i.dirac_(m.empty(3, 2, 3), groups=2),
        lambda i, m: i.orthogonal_(m.empty(3)),
        lambda i, m: i.sparse_(m.empty(3), 0.1),
    ],
)
def test_init_errors_like_torch(torch_like, oracle, call):  # noqa: F811
    with pytest.raises(ValueError) as theirs:
        call(oracle.nn.init, oracle)
    with pytest.raises(ValueError) as ours:
        call(torch_like.nn.init, torch_like)
    assert str(ours.value) == str(theirs.value)


def test_trunc_normal_warning_and_deprecated_spellings(torch_like, oracle):  # noqa: F811
    with pytest.warns(UserWarning, match="mean is more than 2 std from"):
        torch_like.nn.init.trunc_normal_(torch_like.empty(3), mean=10.0)
    for name in ("uniform", "normal", "constant", "eye", "dirac", "xavier_uniform", "orthogonal", "sparse"):
        with pytest.warns(FutureWarning) as ours:
            _call_deprecated(torch_like, name)
        with pytest.warns(FutureWarning) as theirs:
            _call_deprecated(oracle, name)
        assert str(ours[0].message) == str(theirs[0].message)


def _call_deprecated(m, name):
    args = {"constant": (0.5,), "sparse": (0.1,)}.get(name, ())
    shape = (3, 2, 3) if name == "dirac" else (3, 4)
    getattr(m.nn.init, name)(m.empty(*shape), *args)
