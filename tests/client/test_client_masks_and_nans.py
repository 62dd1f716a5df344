"""Masks and non-finite values as PyTorch programs write them: `mask & other`, `a | b`, `~mask`, `^`, their
in-place forms, `torch.bitwise_*` on integers, `isnan`/`isinf`/`isfinite`/`isposinf`/`isneginf`,
`nan_to_num` (with its gradient) and `logical_*`, on the engine, the embedded client and a live server
(`torch_like`), against PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


SPECIAL = [1.5, math.nan, math.inf, -math.inf, -2.0, 0.0]


def _masks(torch):
    x = torch.tensor(SPECIAL, dtype=torch.float64)
    a, b = x > 0, x < 1
    return x, a, b


def test_operators_on_masks_match_torch(torch_like, oracle):
    def run(torch):
        x, a, b = _masks(torch)
        both = a.clone()
        both &= b
        either = a.clone()
        either |= b
        return [a & b, a | b, a ^ b, ~a, True & a, False | b, both, either, x[~x.isnan() & (x > -1)]]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_array_equal(values(ours), theirs.numpy())
        assert str(ours.dtype) == str(theirs.dtype)


def test_bitwise_functions_on_integers_match_torch(torch_like, oracle):
    def run(torch):
        i, j = torch.tensor([6, 3, -1, 12]), torch.tensor([3, 5, 7, 10])
        return [
            torch.bitwise_and(i, j),
            torch.bitwise_or(i, j),
            torch.bitwise_xor(i, j),
            torch.bitwise_not(i),
            i & 4,
            ~j,
        ]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_array_equal(values(ours), theirs.numpy())


def test_non_finite_tests_match_torch(torch_like, oracle):
    def run(torch):
        x = torch.tensor(SPECIAL)
        n = torch.tensor([1, 0, -3])
        return [
            torch.isnan(x),
            x.isinf(),
            torch.isfinite(x),
            x.isposinf(),
            torch.isneginf(x),
            torch.isfinite(n),
            torch.isnan(n),
            torch.logical_not(x),
            torch.logical_and(x, n.repeat(2)),
            torch.logical_or(x > 1, x < -1),
            torch.logical_xor(x > 1, x.isnan()),
        ]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_array_equal(values(ours), theirs.numpy())
        assert str(ours.dtype) == str(theirs.dtype)


@pytest.mark.parametrize("kwargs", [{}, {"nan": 2.0, "posinf": 9.0, "neginf": -9.0}, {"posinf": 1e3}])
def test_nan_to_num_values_and_gradient_match_torch(torch_like, oracle, kwargs):
    def run(torch):
        x = torch.tensor(SPECIAL, dtype=torch.float64, requires_grad=True)
        y = torch.nan_to_num(x * 3, **kwargs)
        (y * torch.arange(6.0, dtype=torch.float64)).sum().backward()
        return y, x.grad

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_array_equal(values(ours), theirs.detach().numpy())


def test_a_bitwise_op_on_floats_is_refused(torch_like):
    x = torch_like.tensor([1.0, 2.0])
    with pytest.raises((TypeError, ValueError, RuntimeError)) as caught:
        (x & x).tolist()
    assert "bitwise" in str(caught.value) or "not supported" in str(caught.value)
