"""`.data` answers PyTorch's `Tensor` methods as a PyTorch program calls them, and NumPy's as NumPy's functions do.

Today's tutorials and the older ones call Tensor methods on `.data` (`x.data.size(0)`, `.view(-1)`, `.float()`,
`.unsqueeze(0)`, `.masked_fill_(m, 0)`, `.topk(k)`); the engine's `.data` is a NumPy array (engine.tensor_data), so
each is checked here against torch's `.data` for the same program: values, shapes, dtypes, and whether an in-place
one changed the Variable. Where NumPy has a method of the same name with another meaning (`size`, `view`,
`repeat`, `transpose`, `flatten`, `sort`, `std`), NumPy's own functions must still get NumPy's.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
MASK = X > 0


def _both():
    return engine.tensor(X.copy(), requires_grad=True), torch.tensor(X.copy(), requires_grad=True)


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    if isinstance(value, (engine.Tensor, np.ndarray)):
        return np.asarray(value.detach() if isinstance(value, engine.Tensor) else value)
    return value


def _same(got, want, case):
    if isinstance(want, tuple) and not isinstance(want, torch.Size):
        assert isinstance(got, tuple) and len(got) == len(want), case
        for g, w in zip(got, want):
            _same(g, w, case)
        return
    if isinstance(want, torch.Tensor):
        got_array = np.asarray(got)
        assert got_array.shape == tuple(want.shape), case
        assert got_array.dtype == _plain(want).dtype, f"{case}: {got_array.dtype} against {want.dtype}"
        np.testing.assert_allclose(got_array, _plain(want), rtol=1e-6, atol=1e-6, err_msg=case)
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6), case
    else:
        assert got == want, f"{case}: {got!r} against {want!r}"


CALLS = {  # a `.data` program, as user code writes it for `torch` as `t`
    "x.data.size(0)": lambda x, t: x.data.size(0),
    "x.data.size(-1)": lambda x, t: x.data.size(-1),
    "x.data.size()": lambda x, t: tuple(x.data.size()),
    "x.data.view(-1)": lambda x, t: x.data.view(-1),
    "x.data.view(2, -1)": lambda x, t: x.data.view(2, -1),
    "x.data.view((3, 4))": lambda x, t: x.data.view((3, 4)),
    "x.data.sum(dim=1)": lambda x, t: x.data.sum(dim=1),
    "x.data.sum(dim=0, keepdim=True)": lambda x, t: x.data.sum(dim=0, keepdim=True),
    "x.data.mean(dim=1)": lambda x, t: x.data.mean(dim=1),
    "x.data.argmax(dim=1)": lambda x, t: x.data.argmax(dim=1),
    "x.data.argmin(1)": lambda x, t: x.data.argmin(1),
    "x.data.cumsum(dim=0)": lambda x, t: x.data.cumsum(dim=0),
    "x.data.std()": lambda x, t: float(x.data.std()),
    "x.data.std(0)": lambda x, t: x.data.std(0),
    "x.data.var(dim=1)": lambda x, t: x.data.var(dim=1),
    "x.data.repeat(2, 1)": lambda x, t: x.data.repeat(2, 1),
    "x.data.transpose(0, 1)": lambda x, t: x.data.transpose(0, 1),
    "x.data.flatten()": lambda x, t: x.data.flatten(),
    "x.data.sort()": lambda x, t: tuple(x.data.sort()),
    "x.data.sort(dim=0, descending=True)": lambda x, t: tuple(x.data.sort(dim=0, descending=True)),
    "x.data.unsqueeze(0)": lambda x, t: x.data.unsqueeze(0),
    "x.data.t()": lambda x, t: x.data.t(),
    "x.data.permute(1, 0)": lambda x, t: x.data.permute(1, 0),
    "x.data.float()": lambda x, t: x.data.float(),
    "x.data.double()": lambda x, t: x.data.double(),
    "x.data.long()": lambda x, t: x.data.long(),
    "x.data.gt(0).float().mean()": lambda x, t: float(x.data.gt(0).float().mean()),
    "x.data.dim()": lambda x, t: x.data.dim(),
    "x.data.numel()": lambda x, t: x.data.numel(),
    "x.data.exp()": lambda x, t: x.data.exp(),
    "x.data.pow(2)": lambda x, t: x.data.pow(2),
    "x.data.mul(2).add(1)": lambda x, t: x.data.mul(2).add(1),
    "x.data.topk(2)": lambda x, t: tuple(x.data.topk(2)),
    "x.data.index_select(0, idx)": lambda x, t: x.data.index_select(0, t.tensor([3, 0])),
    "x.data.new_zeros(2)": lambda x, t: x.data.new_zeros(2),
    "x.data.expand(2, 4, 3)": lambda x, t: x.data.expand(2, 4, 3),
    "x.data.contiguous()": lambda x, t: x.data.contiguous(),
    "x.data.detach()": lambda x, t: x.data.detach(),
    "x.data.is_cuda": lambda x, t: x.data.is_cuda,
    "x.data.to('cpu')": lambda x, t: x.data.to("cpu"),
    "t.max(x.data, 1)": lambda x, t: tuple(t.max(x.data, 1)),
}


@pytest.mark.parametrize("case", sorted(CALLS))
def test_data_answers_the_tensor_method_as_pytorch(case):
    x, tx = _both()
    _same(CALLS[case](x, engine), CALLS[case](tx, torch), case)
    np.testing.assert_array_equal(x.detach().numpy(), X)  # none of them changed the Variable


IN_PLACE = {  # in place on `.data`: the Variable's values change, as PyTorch's
    "masked_fill_": lambda d, t: d.masked_fill_(d > 0, 0.0),
    "clamp_min_": lambda d, t: d.clamp_min_(0.1),
    "mul_(2).add_(1)": lambda d, t: d.mul_(2).add_(1),
    "view(-1)[0] = 5": lambda d, t: d.view(-1).__setitem__(0, 5.0),
    "unsqueeze(0).mul_(3)": lambda d, t: d.unsqueeze(0).mul_(3),
    "t().zero_()": lambda d, t: d.t().zero_(),
    "index_fill_": lambda d, t: d.index_fill_(0, t.tensor([1]), -1.0),
    "copy_": lambda d, t: d.copy_(t.ones(4, 3)),
    "abs_": lambda d, t: d.abs_(),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE))
def test_an_in_place_method_on_data_changes_the_variable(case):
    x, tx = _both()
    got, want = IN_PLACE[case](x.data, engine), IN_PLACE[case](tx.data, torch)
    np.testing.assert_allclose(x.detach().numpy(), tx.detach().numpy(), rtol=1e-6, err_msg=case)
    if isinstance(want, torch.Tensor) and want.shape == tx.shape:
        assert got is x.data or np.shares_memory(np.asarray(got), x.detach().numpy()), case
    assert x.requires_grad and x.grad_fn is None  # `.data` changes no history


def test_data_of_a_data_method_chain_is_outside_autograd_and_shares_memory():
    x, _ = _both()
    view = x.data.view(-1)
    assert view.requires_grad is False and view.grad_fn is None
    view[0] = 7.0
    assert float(x.detach()[0, 0]) == 7.0
    leaf = x.detach().clone().data.requires_grad_()  # PyTorch's: the same memory, now a leaf that requires grad
    assert leaf.requires_grad and leaf.is_leaf
    (leaf * 2).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), np.full((4, 3), 2.0, np.float32))


def test_numpys_functions_still_get_numpys_methods():
    x, _ = _both()
    d = x.data
    assert d.size == 12 and d.size * 2 == 24 and isinstance(d.size, int)
    np.testing.assert_allclose(np.std(d), X.std(), rtol=1e-6)  # ddof 0, not PyTorch's unbiased default
    np.testing.assert_allclose(np.var(d, axis=0), X.var(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(np.repeat(d, 2, axis=1), np.repeat(X, 2, axis=1))
    np.testing.assert_array_equal(np.repeat(d, 2), np.repeat(X, 2))
    np.testing.assert_array_equal(np.transpose(d), X.T)
    np.testing.assert_array_equal(np.transpose(d, (1, 0)), X.T)
    np.testing.assert_array_equal(np.sort(d), np.sort(X))
    np.testing.assert_array_equal(np.sort(d, axis=0), np.sort(X, axis=0))
    np.testing.assert_array_equal(d.flatten(order="F"), X.flatten(order="F"))
    np.testing.assert_array_equal(np.sum(d, axis=1), X.sum(axis=1))
    np.testing.assert_array_equal(np.argmax(d, axis=0), X.argmax(axis=0))
    np.testing.assert_array_equal(d.view(np.int32), X.view(np.int32))
    assert np.all(d == X) and not np.any(d != X)
    np.testing.assert_array_equal(np.cumsum(d, axis=1), X.cumsum(axis=1))
    np.testing.assert_array_equal(np.nonzero(d > 0)[0], np.nonzero(MASK)[0])
    np.testing.assert_array_equal(x.detach().numpy(), X)


def test_an_attribute_neither_has_is_an_attribute_error():
    x, _ = _both()
    with pytest.raises(AttributeError, match="no_such_method"):
        x.data.no_such_method()
    assert not hasattr(x.data, "_private_probe")
