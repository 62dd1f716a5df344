"""torch.nn.utils.parametrize as PyTorch's parametrizations tutorial uses it, on the engine, the embedded client
and a live server (`torch_like`), against PyTorch: the parametrized weight, its gradient for the original,
chained parametrizations, right_inverse on registration and assignment, cached(), removal, state_dict names."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values

W = np.random.default_rng(5).standard_normal((3, 3))
X = np.random.default_rng(6).standard_normal((4, 3))


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _program(t):
    nn = t.nn
    parametrize = importlib.import_module(f"{t.__name__}.nn.utils.parametrize")

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A):
            return A.triu()

    class Skew(nn.Module):
        def forward(self, X):
            A = X.triu(1)
            return A - A.transpose(-1, -2)

    class Cayley(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.register_buffer("Id", t.eye(n, dtype=t.float64))

        def forward(self, X):
            return t.linalg.solve(self.Id - X, self.Id + X)

    layer = nn.Linear(3, 3).double()
    with t.no_grad():
        layer.weight.copy_(t.tensor(W))
        layer.bias.copy_(t.tensor(W[0]))
    parametrize.register_parametrization(layer, "weight", Symmetric())
    out = {"registered": values(layer.weight), "keys": sorted(layer.state_dict())}
    layer(t.tensor(X)).pow(2).sum().backward()
    out["grad"] = values(layer.parametrizations.weight.original.grad)
    symmetric = t.tensor(W + W.T)
    layer.weight = symmetric  # through right_inverse
    out["assigned"] = values(layer.weight)
    with parametrize.cached():
        out["cached"] = layer.weight is layer.weight
    parametrize.remove_parametrizations(layer, "weight")
    out["removed"] = (type(layer).__name__, sorted(dict(layer.named_parameters())), values(layer.weight))
    orthogonal = nn.Linear(3, 3, bias=False).double()
    with t.no_grad():
        orthogonal.weight.copy_(t.tensor(W))
    parametrize.register_parametrization(orthogonal, "weight", Skew())
    parametrize.register_parametrization(orthogonal, "weight", Cayley(3))
    q = orthogonal.weight
    out["orthogonal"] = values(q.T @ q)
    orthogonal(t.tensor(X)).sum().backward()
    out["chain grad"] = values(orthogonal.parametrizations.weight.original.grad)
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized element"):
        parametrize.register_parametrization(orthogonal, "nothing", Skew())
    return out


def test_the_parametrizations_tutorial_equals_torch(torch_like, oracle):
    ours, theirs = _program(torch_like), _program(oracle)
    assert ours.keys() == theirs.keys()
    for key in ours:
        if isinstance(ours[key], np.ndarray):
            np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-10, atol=1e-12, err_msg=key)
        elif key == "removed":
            assert ours[key][:2] == theirs[key][:2]
            np.testing.assert_allclose(ours[key][2], theirs[key][2], rtol=1e-12)
        else:
            assert ours[key] == theirs[key], key
    np.testing.assert_allclose(ours["orthogonal"], np.eye(3), atol=1e-12)


def _weight_normed(t, dim):
    parametrizations = importlib.import_module(f"{t.__name__}.nn.utils.parametrizations")
    parametrize = importlib.import_module(f"{t.__name__}.nn.utils.parametrize")
    w = np.random.default_rng(1).standard_normal((4, 3, 2))
    conv = t.nn.Conv1d(3, 4, 2).double()
    with t.no_grad():
        conv.weight.copy_(t.tensor(w))
        conv.bias.zero_()
    parametrizations.weight_norm(conv, dim=dim)
    conv(t.tensor(np.linspace(-1, 1, 30).reshape(2, 3, 5))).pow(2).sum().backward()
    chain = conv.parametrizations.weight
    out = [
        sorted(conv.state_dict()),
        values(chain.original0),
        values(chain.original0.grad),
        values(chain.original1.grad),
    ]
    with pytest.raises(ValueError, match="sequence of tensors"):
        parametrize.remove_parametrizations(conv, "weight", leave_parametrized=False)
    parametrize.remove_parametrizations(conv, "weight")
    return [*out, sorted(dict(conv.named_parameters())), values(conv.weight)]


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_equals_torch(torch_like, oracle, dim):
    ours, theirs = _weight_normed(torch_like, dim), _weight_normed(oracle, dim)
    assert ours[0] == theirs[0] == ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert ours[4] == theirs[4] == ["bias", "weight"]
    for a, b in zip(ours[1:4] + ours[5:], theirs[1:4] + theirs[5:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
