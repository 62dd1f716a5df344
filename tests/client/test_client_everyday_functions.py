"""Everyday torch functions that compose from the registry's ops (`engine/everyday.py`) on the engine, the
embedded client and a live server (`torch_like`): values, dtypes and gradients against PyTorch in float64,
and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


A = np.arange(1.0, 13.0).reshape(3, 4) / 7 - 0.6
B = np.linspace(-1.0, 2.0, 12).reshape(3, 4)

# name -> f(torch, a, b) with a, b float64 leaves of shape (3, 4): each returns a Variable or a tuple of them
CASES = {
    "flip": lambda t, a, b: t.flip(a, [0, 1]),
    "flip_method": lambda t, a, b: a.flip(1),
    "fliplr": lambda t, a, b: t.fliplr(a),
    "flipud": lambda t, a, b: t.flipud(a),
    "roll": lambda t, a, b: t.roll(a, 1, 1),
    "roll_flat": lambda t, a, b: t.roll(a, -5),
    "roll_multi": lambda t, a, b: a.roll((1, -2), (0, 1)),
    "rot90": lambda t, a, b: t.rot90(a),
    "rot90_k3": lambda t, a, b: t.rot90(a, 3, [0, 1]),
    "rot90_k2": lambda t, a, b: t.rot90(a, -2),
    "diag_of_matrix": lambda t, a, b: t.diag(a, 1),
    "diag_of_vector": lambda t, a, b: t.diag(a[0], -1),
    "diagonal": lambda t, a, b: t.diagonal(a.reshape(3, 2, 2), 0, 1, 2),
    "diagonal_offset": lambda t, a, b: a.diagonal(-1),
    "diag_embed": lambda t, a, b: t.diag_embed(a, 1),
    "trace": lambda t, a, b: t.trace(a),
    "narrow": lambda t, a, b: a.narrow(1, 1, 2),
    "select": lambda t, a, b: t.select(a, 1, -1),
    "unbind": lambda t, a, b: t.unbind(a, 1),
    "movedim": lambda t, a, b: t.movedim(a.reshape(3, 2, 2), 0, -1),
    "moveaxis": lambda t, a, b: t.moveaxis(a.reshape(3, 2, 2), (0, 1), (2, 0)),
    "tile": lambda t, a, b: t.tile(a, (2, 1, 2)),
    "ravel": lambda t, a, b: a.ravel(),
    "unflatten": lambda t, a, b: a.unflatten(1, (2, 2)),
    "broadcast_to": lambda t, a, b: t.broadcast_to(a[0], (2, 4)),
    "broadcast_tensors": lambda t, a, b: t.broadcast_tensors(a[:, :1], b[0]),
    "meshgrid_ij": lambda t, a, b: t.meshgrid(a[0], b[1, :3], indexing="ij"),
    "meshgrid_xy": lambda t, a, b: t.meshgrid(a[0], b[1, :3], indexing="xy"),
    "hstack": lambda t, a, b: t.hstack([a, b]),
    "vstack": lambda t, a, b: t.vstack([a[0], b]),
    "dstack": lambda t, a, b: t.dstack([a, b]),
    "column_stack": lambda t, a, b: t.column_stack([a[0], b.t()]),
    "tensor_split": lambda t, a, b: t.tensor_split(a, 3, 1),
    "tensor_split_indices": lambda t, a, b: a.tensor_split([1, 3], 1),
    "repeat_interleave": lambda t, a, b: t.repeat_interleave(a, 2, 0),
    "repeat_interleave_flat": lambda t, a, b: a.repeat_interleave(2),
    "take": lambda t, a, b: t.take(a, t.tensor([0, 5, 11])),
    "take_along_dim": lambda t, a, b: t.take_along_dim(a, a.argsort(1), 1),
    "masked_select": lambda t, a, b: t.masked_select(a, b > 0.5),
    "addmm": lambda t, a, b: t.addmm(b[:, :3], a, b.t(), beta=0.5, alpha=2.0),
    "tensordot": lambda t, a, b: t.tensordot(a, b, dims=([1], [1])),
    "tensordot_2": lambda t, a, b: t.tensordot(a, b),
    "kron": lambda t, a, b: t.kron(a[:2, :2], b[:2, 1:]),
    "cartesian_prod": lambda t, a, b: t.cartesian_prod(a[0, :2], b[0, :3]),
    "cdist": lambda t, a, b: t.cdist(a, b),
    "cdist_p1": lambda t, a, b: t.cdist(a, b, p=1.0),
    "dist": lambda t, a, b: t.dist(a, b, 3),
    "lerp": lambda t, a, b: t.lerp(a, b, 0.3),
    "lerp_tensor": lambda t, a, b: a.lerp(b, b.sigmoid()),
    "hypot": lambda t, a, b: t.hypot(a, b),
    "logaddexp": lambda t, a, b: t.logaddexp(a, b * 3),
    "tan": lambda t, a, b: t.tan(a),
    "sinh": lambda t, a, b: a.sinh(),
    "cosh": lambda t, a, b: t.cosh(a),
    "asinh": lambda t, a, b: t.asinh(b),
    "acosh": lambda t, a, b: t.acosh(b.abs() + 1.5),
    "atanh": lambda t, a, b: t.atanh(a * 0.9),
    "frac": lambda t, a, b: t.frac(b * 3),
    "deg2rad": lambda t, a, b: t.deg2rad(a),
    "rad2deg": lambda t, a, b: a.rad2deg(),
    "diff": lambda t, a, b: t.diff(a, 2, 1),
    "diff_pend": lambda t, a, b: t.diff(a, dim=0, prepend=b[:1], append=b[2:]),
    "nansum": lambda t, a, b: t.nansum(t.where(b > 1, float("nan"), a), 1),
    "nanmean": lambda t, a, b: t.where(b > 1, float("nan"), a).nanmean(),
    "logcumsumexp": lambda t, a, b: t.logcumsumexp(a * 30, 1),
    "var_mean": lambda t, a, b: t.var_mean(a, 1),
    "std_mean": lambda t, a, b: t.std_mean(a, 0, keepdim=True),
    "std_mean_all": lambda t, a, b: t.std_mean(a, correction=0),
    "kthvalue": lambda t, a, b: tuple(t.kthvalue(b, 2, 1)),
    "median_all": lambda t, a, b: t.median(b),
    "median_dim": lambda t, a, b: tuple(b.median(0)),
    "quantile": lambda t, a, b: t.quantile(a, 0.3),
    "quantile_dim": lambda t, a, b: t.quantile(a, 0.75, dim=1, keepdim=True),
    "quantile_nearest": lambda t, a, b: t.quantile(b, 0.5, dim=0, interpolation="nearest"),
}


def _run(torch, name):
    a = torch.tensor(A, requires_grad=True)
    b = torch.tensor(B, requires_grad=True)
    out = CASES[name](torch, a, b)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    floats = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    if floats:
        total = sum((o * torch.arange(1.0, 1.0 + o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in floats)
        total.backward()
    grads = [np.zeros(A.shape) if v.grad is None else values(v.grad) for v in (a, b)]
    return [(values(o), str(o.dtype)) for o in outs], grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_dtypes_and_gradients_match_torch(torch_like, oracle, name):
    (ours, our_grads), (theirs, their_grads) = _run(torch_like, name), _run(oracle, name)
    assert len(ours) == len(theirs)
    for (mine, my_dtype), (their, their_dtype) in zip(ours, theirs):
        assert my_dtype == their_dtype
        np.testing.assert_allclose(mine, their, rtol=1e-10, atol=1e-12)
    for mine, their in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, their, rtol=1e-9, atol=1e-12)


def test_integer_and_value_dependent_functions_match_torch(torch_like, oracle):
    def run(torch):
        seq, v = torch.tensor([1, 3, 5, 7]), torch.tensor([[3, 6], [0, 9]])
        m = torch.tensor([[0, 2, 0], [4, 0, 0]])
        return [
            torch.searchsorted(seq, v),
            torch.searchsorted(seq, v, right=True),
            torch.searchsorted(torch.tensor([[1, 2, 3], [2, 4, 8]]), torch.tensor([[2], [5]])),
            torch.bucketize(v, seq),
            torch.bucketize(v, seq, right=True),
            torch.isin(v, torch.tensor([3, 9])),
            torch.isin(v, torch.tensor([3, 9]), invert=True),
            torch.nonzero(m),
            *torch.nonzero(m, as_tuple=True),
            m.nonzero(),
            torch.unique(torch.tensor([3, 1, 3, 2, 1])),
            *torch.unique(torch.tensor([3, 1, 3, 2, 1]), return_inverse=True, return_counts=True),
            torch.tile(torch.tensor([1, 2]), (2,)),
            torch.repeat_interleave(torch.tensor([[1, 2], [3, 4]]), torch.tensor([1, 2]), dim=0),
        ]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_array_equal(values(ours), theirs.numpy())
        assert str(ours.dtype) == str(theirs.dtype)


def test_errors_match_torch_types(torch_like, oracle):
    for torch in (torch_like, oracle):
        x = torch.ones(2, 3)
        with pytest.raises(IndexError):
            torch.select(x, 2, 0)
        with pytest.raises(IndexError):
            x.select(1, 3)
        with pytest.raises(RuntimeError):
            torch.trace(torch.ones(2, 2, 2))
        with pytest.raises(RuntimeError):
            torch.diag(torch.ones(2, 2, 2))
        with pytest.raises(RuntimeError):
            x.narrow(1, 2, 2)
        with pytest.raises(RuntimeError):
            torch.quantile(x, 1.5)


def test_inverse_trigonometric_primitives_match_torch(torch_like, oracle):
    def run(torch):
        x = torch.tensor([0.3, -0.5, 0.9], dtype=torch.float64, requires_grad=True)
        y = torch.tensor([1.0, -2.0, -0.1], dtype=torch.float64, requires_grad=True)
        out = [torch.asin(x), x.acos(), torch.arctan(y), torch.atan2(x, y), y.arctan2(x)]
        sum(o.sum() * (i + 1) for i, o in enumerate(out)).backward()
        return [values(o) for o in out] + [values(x.grad), values(y.grad)]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_accumulations_take_a_dtype_as_torch(torch_like, oracle):
    def run(torch):
        x = torch.tensor([[1, 2], [3, 4]])
        f = torch.tensor([[0.5, 2.0], [3.0, 0.25]], requires_grad=True)
        out = [x.cumsum(0, dtype=torch.float32), torch.cumprod(x, 1, dtype=torch.float64), x.prod(dtype=torch.float32)]
        g = torch.cumsum(f, 1, dtype=torch.float64)
        g.sum().backward()
        return [*out, g, f.grad]

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_allclose(values(ours), theirs.detach().numpy())
