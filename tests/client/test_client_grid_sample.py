"""F.affine_grid and F.grid_sample (the spatial transformer tutorial's), on the engine, the embedded client and a
live server (`torch_like`), against PyTorch: values and the gradients for the input and theta (or the grid), every
mode, padding mode and align_corners; PyTorch's warning when align_corners is left out and its errors; gradcheck on
the engine."""

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
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
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


def test_torchs_errors_for_unknown_modes(torch_like, oracle):
    for m in (torch_like, oracle):
        x, grid = m.zeros(1, 1, 2, 2), m.zeros(1, 1, 1, 2)
        with pytest.raises(
            ValueError, match="expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'cubic'"
        ):
            m.nn.functional.grid_sample(x, grid, mode="cubic")
        with pytest.raises(ValueError, match="to be 'zeros', 'border', or 'reflection', but got: 'reflect'"):
            m.nn.functional.grid_sample(x, grid, padding_mode="reflect", align_corners=True)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize(
    "mode, padding_mode", [("bicubic", "zeros"), ("bicubic", "reflection"), ("bilinear", "reflection")]
)
def test_far_outside_and_one_pixel_wide_inputs_equal_torch(torch_like, oracle, mode, padding_mode, align):
    """Points up to 3.5 image widths outside (reflected several times), and an input one pixel wide."""
    rng = np.random.default_rng(3)
    for x, grid in ((X, rng.uniform(-3.5, 3.5, (2, 3, 4, 2))), (X[:, :, :, :1], rng.uniform(-1.5, 1.5, (2, 2, 3, 2)))):
        results = []
        for m in (torch_like, oracle):
            a, g = m.tensor(x, requires_grad=True), m.tensor(grid, requires_grad=True)
            y = m.nn.functional.grid_sample(a, g, mode=mode, padding_mode=padding_mode, align_corners=align)
            (y * m.tensor(np.linspace(-1, 1, y.numel()).reshape(tuple(y.shape)))).sum().backward()
            results.append((values(y), values(a.grad), values(g.grad)))
        for ours, theirs, name in zip(*results, "y dx dgrid".split()):
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize(
    "mode, padding_mode", [("bilinear", "zeros"), ("bicubic", "zeros"), ("bilinear", "reflection")]
)
def test_gradcheck_in_input_and_grid(mode, padding_mode):
    F = engine.nn.functional
    x = engine.tensor(X[:1, :2], requires_grad=True)
    grid = engine.tensor(RNG.uniform(-1.4, 1.4, (1, 3, 4, 2)), requires_grad=True)  # off the pixel lattice
    assert engine.autograd.gradcheck(
        lambda a, g: F.grid_sample(a, g, mode, padding_mode, align_corners=False), (x, grid)
    )
