"""`div(rounding_mode=)`, `clamp` with tensor bounds, `<<`/`>>`, `scatter_reduce`, `heaviside`, `cummax`/`cummin`,
`histc` and `block_diag` against torch, on
the engine, the embedded client and a live server: values, dtypes, gradients (ties of amax/amin shared as torch
shares them, zeros of prod), in-place forms and torch's errors; the gradients also by finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import engine  # noqa: E402

NUMERATORS = [7.0, -7.0, 1.0, -0.5, 5.5, 0.0]
DENOMINATORS = [2.0, 2.0, 0.1, 0.3, -2.0, 3.0]


def _numpy(v):
    return np.asarray(v.detach().numpy())


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
def test_div_rounding_modes_are_torchs(torch_like, mode):
    results = []
    for m in (torch_like, torch):
        a = m.tensor(NUMERATORS, dtype=m.float64, requires_grad=True)
        b = m.tensor(DENOMINATORS, dtype=m.float64, requires_grad=True)
        out = m.div(a, b, rounding_mode=mode)
        grads = m.autograd.grad((out * m.tensor([1.0, 2, 3, 4, 5, 6], dtype=m.float64)).sum(), [a, b])
        ints = m.tensor([7, -7, 9, -9]).div(m.tensor([2, 2, -4, -4]), rounding_mode=mode)
        by_float = m.divide(m.tensor([7, -7]), 2.0, rounding_mode=mode)
        inplace = m.tensor([7.0, -7.0])
        inplace.div_(2, rounding_mode=mode)
        results.append([_numpy(out), *map(_numpy, grads), _numpy(ints), _numpy(by_float), _numpy(inplace)])
        results[-1].append(str(ints.dtype).split(".")[-1] + str(by_float.dtype).split(".")[-1])
    got, want = results
    for g, w in zip(got[:-1], want[:-1]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert got[-1] == want[-1]  # int64 stays int64 when rounded, a Python float gives float32


def test_div_refuses_an_unknown_rounding_mode(torch_like):
    with pytest.raises(RuntimeError, match="div expected rounding_mode to be one of None, 'trunc', or 'floor'"):
        torch_like.tensor([1.0]).div(2, rounding_mode="round")


def _clamped(m, low, high):
    x = m.tensor([1.0, 5.0, 3.0, 2.0, 4.0, 0.5], dtype=m.float64, requires_grad=True)
    bounds = []
    for b in (low, high):
        bounds.append(m.tensor(b, dtype=m.float64, requires_grad=True) if isinstance(b, list) else b)
    out = m.clamp(x, *bounds)
    leaves = [x, *(b for b in bounds if hasattr(b, "requires_grad"))]
    grads = m.autograd.grad((out * m.tensor([1.0, 2, 3, 4, 5, 6], dtype=m.float64)).sum(), leaves)
    return [_numpy(out), *map(_numpy, grads)]


@pytest.mark.parametrize(
    "low, high",
    [
        ([2.0, 2.0, 4.0, 2.0, 4.0, 1.0], [4.0, 4.0, 3.5, 2.0, 4.0, 0.0]),  # ties at both bounds; min > max
        ([2.0, 2.0, 4.0, 2.0, 4.0, 1.0], None),
        (None, [4.0, 4.0, 3.5, 2.0, 4.0, 0.0]),
        ([2.0], [3.0]),  # broadcast
        ([np.nan, 2.0, 4.0, 2.0, 4.0, 1.0], [4.0, 4.0, np.nan, 2.0, 4.0, 0.0]),  # NaN bounds give NaN, no gradient
    ],
)
def test_clamp_with_tensor_bounds_is_torchs(torch_like, low, high):
    got, want = _clamped(torch_like, low, high), _clamped(torch, low, high)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)  # (NaNs in the same places)


def test_clip_clamp_min_and_in_place_clamp_take_tensors(torch_like):
    x, low = torch_like.tensor([1.0, 5.0]), torch_like.tensor([2.0, 6.0])
    assert x.clip(low, torch_like.tensor(5.5)).tolist() == [2.0, 5.5] and x.clamp_min(low).tolist() == [2.0, 6.0]
    assert torch_like.clamp_max(x, low).tolist() == [1.0, 5.0]
    x.clamp_(min=low)
    with pytest.raises(TypeError, match="clamp\\(\\) received an invalid combination of arguments"):
        x.clamp(low, 5.5)  # a tensor and a number, as torch refuses
    assert x.tolist() == [2.0, 6.0]
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch_like.clamp(x)
    y, z, w = torch_like.tensor([1.0, 5.0]), torch_like.tensor([1.0, 5.0]), torch_like.tensor([7.0, -7.0])
    y.clip_(2, 3)
    z.clamp_min_(torch_like.tensor([2.0, 6.0]))
    z.clamp_max_(5.5)
    w.divide_(2, rounding_mode="floor")
    assert y.tolist() == [2.0, 3.0] and z.tolist() == [2.0, 5.5] and w.tolist() == [3.0, -4.0]


def test_shifts_are_torchs(torch_like):
    for m in (torch_like,):
        x = m.tensor([1, -8, 5, 3])
        assert (x << 2).tolist() == [4, -32, 20, 12] and (x >> 1).tolist() == [0, -4, 2, 1]
        assert (1 << m.tensor([1, 3])).tolist() == [2, 8] and (64 >> m.tensor([1, 3])).tolist() == [32, 8]
        assert m.bitwise_left_shift(x, m.tensor([0, 1, 2, 70])).tolist() == [1, -16, 20, 0]
        assert x.bitwise_right_shift(70).tolist() == [0, -1, 0, 0]
        y = m.tensor([1, 2])
        y <<= 3
        assert y.tolist() == [8, 16]
        with pytest.raises(Exception, match="not implemented for 'Float'|take bool or integer inputs, not float32"):
            m.tensor([1.0]) << 1


SELF = np.array([[2.0, 0.0, 3.0, 1.0], [1.0, 2.0, 2.0, 0.0], [3.0, -1.0, 0.0, 2.0]])
INDEX = np.array([[0, 1, 2], [2, 1, 0], [0, 0, 1]])
SRC = np.array([[2.0, 0.0, 1.0], [3.0, 2.0, -1.0], [2.0, 0.0, 2.0]])


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_is_torchs(torch_like, reduce, include_self, dim):
    # integer-valued entries: ties with self and among src, and zeros (one and two at a place) for prod
    results = []
    for m in (torch_like, torch):
        x, src = (m.tensor(a.copy(), requires_grad=True) for a in (SELF, SRC))
        out = x.scatter_reduce(dim, m.tensor(INDEX), src, reduce=reduce, include_self=include_self)
        seed = m.tensor(np.arange(1.0, 13.0).reshape(3, 4))
        grads = m.autograd.grad((out * seed).sum(), [x, src])
        ints = m.tensor([5, 1, 2]).scatter_reduce(
            0, m.tensor([0, 0, 2]), m.tensor([-4, -3, -7]), reduce, include_self=include_self
        )
        results.append([_numpy(out), *map(_numpy, grads), _numpy(ints)])
    for g, w in zip(*results):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_scatter_reduce_in_place_and_errors(torch_like):
    x = torch_like.zeros(3)
    x.scatter_reduce_(0, torch_like.tensor([0, 0, 2]), torch_like.tensor([1.0, 4.0, 2.0]), "amax", include_self=False)
    assert x.tolist() == [4.0, 0.0, 2.0]
    with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, amax or amin, got max"):
        x.scatter_reduce(0, torch_like.tensor([0]), torch_like.tensor([1.0]), "max")
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter_reduce(0, torch_like.tensor([0]), torch_like.tensor([1]), "sum")


def test_heaviside_is_torchs(torch_like):
    x = [-1.0, 0.0, 2.0, 0.0]
    got = torch_like.heaviside(torch_like.tensor(x), torch_like.tensor([0.5]))
    assert got.tolist() == torch.heaviside(torch.tensor(x), torch.tensor([0.5])).tolist()
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors with different dtypes"):
        torch_like.heaviside(torch_like.tensor(x), torch_like.tensor([1]))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_gradients_by_finite_differences(reduce, include_self):
    rng = np.random.default_rng(3)
    x, src = (engine.tensor(rng.uniform(0.5, 2, s), requires_grad=True) for s in ((3, 4), (2, 3)))
    index = engine.tensor(np.array([[2, 0, 2], [1, 3, 1]]))

    def scattered(x, src):
        return x.scatter_reduce(1, index, src, reduce, include_self=include_self)

    assert engine.autograd.gradcheck(scattered, (x, src))
    low, high = (engine.tensor(rng.uniform(-1, 1, (3, 4)) + s, requires_grad=True) for s in (-0.3, 0.3))
    assert engine.autograd.gradcheck(
        lambda x, lo, hi: engine.clamp(x, lo, hi),
        (engine.tensor(rng.uniform(-1, 1, (3, 4)), requires_grad=True), low, high),
    )


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_and_cummin_are_torchs(torch_like, name, dim):
    # ties (a later one's index wins) and a NaN (it holds)
    values = np.array([[1.0, 1.0, 3.0, 2.0], [3.0, np.nan, 0.0, 0.0], [2.0, 2.0, 5.0, -1.0]])
    results = []
    for m in (torch_like, torch):
        x = m.tensor(values, requires_grad=True)
        out = getattr(m, name)(x, dim)
        seed = m.tensor(np.arange(1.0, 13.0).reshape(3, 4))
        (grad,) = m.autograd.grad((m.nan_to_num(out.values) * seed).sum(), [x])
        results.append([_numpy(out.values), _numpy(out.indices), _numpy(grad), _numpy(x.cummax(dim=dim)[1])])
    for g, w in zip(*results):
        np.testing.assert_array_equal(g, w)


def test_histc_and_block_diag_are_torchs(torch_like):
    for m in (torch_like,):
        data = [1.0, 2.0, 1.0, 3.0, 0.5, 4.0, -1.0]
        assert m.histc(m.tensor(data), bins=4, min=0, max=3).tolist() == [1.0, 2.0, 1.0, 1.0]
        assert m.tensor(data).histc(5).tolist() == torch.histc(torch.tensor(data), 5).tolist()
        assert m.histc(m.tensor([2.0, 2.0]), bins=3).tolist() == [0.0, 2.0, 0.0]
        with pytest.raises(NotImplementedError, match="\"histogram_cpu\" not implemented for 'Long'"):
            m.histc(m.tensor([1, 2]))
        a = m.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        out = m.block_diag(m.tensor(7), a, m.tensor([5, 6]))
        want = torch.block_diag(torch.tensor(7), torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5, 6]))
        assert out.tolist() == want.tolist() and str(out.dtype) == str(want.dtype)
        (grad,) = m.autograd.grad((out * m.arange(20.0).reshape(4, 5)).sum(), [a])
        assert grad.tolist() == [[6.0, 7.0], [11.0, 12.0]]


def test_histc_bins_values_at_edges_as_torch_does():
    rng = np.random.default_rng(5)
    for trial in range(200):
        x = rng.uniform(-3, 3, int(rng.integers(1, 50))).astype(np.float32)
        if trial % 3 == 0:
            x = np.round(x * 4) / 4  # on bin edges
        bins = int(rng.integers(1, 13))
        low, high = (float(rng.integers(-3, 0)), float(rng.integers(1, 4))) if trial % 2 else (0, 0)
        got = engine.histc(engine.tensor(x), bins=bins, min=low, max=high)
        assert got.tolist() == torch.histc(torch.tensor(x), bins=bins, min=low, max=high).tolist()
