"""F.affine_grid and F.grid_sample (the spatial transformer tutorial's), on the engine, the embedded client and a
live server (`torch_like`), against PyTorch: values and the gradients for the input and theta, every mode,
padding mode and align_corners; PyTorch's warning when align_corners is left out; gradcheck on the engine."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.client.test_client_nn_optim import values

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5, 6))
THETA = RNG.standard_normal((2, 2, 3)) * 0.7
WEIGHTS = np.linspace(-1, 1, 2 * 3 * 4 * 7).reshape(2, 3, 4, 7)


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _run(t, mode, padding_mode, align):
    x, theta = t.tensor(X, requires_grad=True), t.tensor(THETA, requires_grad=True)
    grid = t.nn.functional.affine_grid(theta, (2, 3, 4, 7), align_corners=align)
    y = t.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align)
    (y * t.tensor(WEIGHTS)).sum().backward()
    dtheta = values(theta.grad) if theta.grad is not None else np.zeros_like(THETA)  # nearest: none
    return values(y), values(x.grad), dtheta


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_of_an_affine_grid_equals_torch(torch_like, oracle, mode, padding_mode, align):
    for ours, theirs, name in zip(
        _run(torch_like, mode, padding_mode, align), _run(oracle, mode, padding_mode, align), "y dx dtheta".split()
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, err_msg=name)  # fmt: skip


def test_align_corners_left_out_warns_as_torch_does(torch_like):
    theta = torch_like.tensor(THETA)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid = torch_like.nn.functional.affine_grid(theta, (2, 3, 4, 7))
        torch_like.nn.functional.grid_sample(torch_like.tensor(X), grid)
    assert sum("align_corners=False since 1.3.0" in str(w.message) for w in caught) == 2
    with pytest.raises(NotImplementedError, match="bicubic"):
        torch_like.nn.functional.grid_sample(torch_like.tensor(X), grid, mode="bicubic", align_corners=False)


def test_gradcheck_in_input_and_grid():
    F = engine.nn.functional
    x = engine.tensor(X[:1, :2], requires_grad=True)
    grid = engine.tensor(RNG.uniform(-1.1, 1.1, (1, 3, 4, 2)), requires_grad=True)  # off the pixel lattice
    assert engine.autograd.gradcheck(lambda a, g: F.grid_sample(a, g, align_corners=False), (x, grid))
