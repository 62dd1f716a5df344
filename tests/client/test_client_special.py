"""`torch.special`'s composable functions on the engine, the embedded client and a live server (`torch_like`),
values and gradients against PyTorch in float64, at the edges (0, negatives, NaN) too."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


X = [-1.5, -0.2, 0.0, 0.3, 1.0, 2.5]
P = [0.05, 0.2, 0.5, 0.7, 0.9, 0.99]

CASES = {
    "expit": lambda s, x, p: s.expit(x),
    "logit": lambda s, x, p: s.logit(p),
    "logit_eps": lambda s, x, p: s.logit(p, eps=0.1),
    "erf": lambda s, x, p: s.erf(x),
    "erfc": lambda s, x, p: s.erfc(x),
    "ndtr": lambda s, x, p: s.ndtr(x),
    "log_ndtr": lambda s, x, p: s.log_ndtr(x),
    "exp2": lambda s, x, p: s.exp2(x),
    "expm1": lambda s, x, p: s.expm1(x),
    "log1p": lambda s, x, p: s.log1p(p),
    "sinc": lambda s, x, p: s.sinc(x),
    "entr": lambda s, x, p: s.entr(p),
    "xlogy": lambda s, x, p: s.xlogy(x, p),
    "xlog1py": lambda s, x, p: s.xlog1py(x, p),
    "logsumexp": lambda s, x, p: s.logsumexp(x, 0),
    "softmax": lambda s, x, p: s.softmax(x, 0),
    "log_softmax": lambda s, x, p: s.log_softmax(x, dim=0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(torch_like, oracle, name):
    def run(torch):
        x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
        p = torch.tensor(P, dtype=torch.float64, requires_grad=True)
        out = CASES[name](torch.special, x, p)
        (out * torch.arange(1.0, 1.0 + out.numel(), dtype=torch.float64).reshape(out.shape)).sum().backward()
        grads = [np.zeros(6) if v.grad is None else values(v.grad) for v in (x, p)]
        return [values(out), *grads]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def test_edges_match_torch(torch_like, oracle):
    def run(torch):
        s = torch.special
        v = torch.tensor([-1.0, 0.0, 2.0, math.nan], dtype=torch.float64)
        z = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
        return [s.entr(v), s.xlogy(z, v), s.xlog1py(z, v), s.sinc(v)]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_allclose(values(ours), theirs.numpy())
