"""cumprod on the engine, the embedded client and a live server (the registry op over the wire):
values and first and second derivatives at zeros as PyTorch gives them."""

from __future__ import annotations

import numpy as np
import pytest

VALUES = [[0.5, 0.0, 2.0, 0.0, 3.0], [1.5, -1.0, 0.5, 2.0, -0.5]]


def derivatives(torch):
    x = torch.tensor(VALUES, dtype=torch.float64, requires_grad=True)
    y = torch.cumprod(x, 1)
    (g,) = torch.autograd.grad((y * y.detach()).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad((g * g).sum(), x)
    return [np.asarray(v.detach().tolist()) for v in (y, g, gg)]


def test_cumprod_and_its_derivatives_match_torch(torch_like):
    torch = pytest.importorskip("torch")
    for got, want in zip(derivatives(torch_like), derivatives(torch), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
