"""The Variable's surface: attributes, conversion, repr, operators and dtypes, comparisons,
indexing, joining, the softmax family, max/min and the constructors."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import engine
from engine import Variable

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (used as the oracle)")


def leaf(values, dtype=np.float64, requires_grad=True):
    return Variable(np.asarray(values, dtype=dtype), requires_grad=requires_grad)


def host(v):
    """A Variable's (detached) or an operand's values as an array."""
    return v.detach().numpy() if isinstance(v, Variable) else np.asarray(v)


# --- attributes and conversion -------------------------------------------------------------------


def test_array_attributes():
    a = np.arange(24.0).reshape(2, 3, 4)
    v = Variable(a)
    assert v.shape == (2, 3, 4) and v.size() == (2, 3, 4)
    assert v.size(0) == 2 and v.size(-1) == 4 and v.dim() == v.ndim == 3
    assert v.dtype == np.float64 and v.numel() == 24 and len(v) == 2
    assert v.T.shape == (4, 3, 2)
    np.testing.assert_array_equal(v.T.numpy(), a.T)
    m = Variable(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(m.T.numpy(), m.numpy().T)
    assert v.device == "cpu"
    assert np.shares_memory(v.data, v.numpy())  # both are views of the values, not copies


def test_item_and_scalar_conversions():
    s = Variable(np.array(2.5))
    assert s.item() == 2.5 and isinstance(s.item(), float)
    assert float(s) == 2.5 and int(Variable(np.array(3))) == 3
    assert Variable(np.array([[7.0]])).item() == 7.0
    with pytest.raises(ValueError):
        Variable(np.ones(2)).item()
    assert Variable(np.array([1, 2])).tolist() == [1, 2]
    assert [1.0, 2.0, 3.0][Variable(np.array(1))] == 2.0  # __index__ on integer scalars


def test_bool_of_variable():
    v = leaf([3.0, 4.0])
    assert bool(v.norm() < 1000) is True
    assert bool(v.norm() > 1000) is False
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(v > 0)


def test_clone_copies_and_records():
    x = leaf([1.0, 2.0])
    c = x.clone()
    assert c.grad_fn is not None and type(c.grad_fn).__name__ == "CloneBackward0"
    assert not np.shares_memory(c.data, x.data)
    np.testing.assert_array_equal(c.detach().numpy(), x.detach().numpy())
    (c * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_detach_method():
    x = leaf([1.0, 2.0])
    d = (x * 2).detach()
    assert d.grad_fn is None and not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), [2.0, 4.0])


def test_iteration_and_len():
    v = Variable(np.arange(6.0).reshape(3, 2))
    rows = list(v)
    assert len(rows) == 3 and all(isinstance(r, Variable) for r in rows)
    np.testing.assert_array_equal(rows[2].numpy(), [4.0, 5.0])
    with pytest.raises(TypeError):
        len(Variable(np.array(1.0)))


@pytest.mark.parametrize(
    ("method", "dtype"),
    [
        ("float", np.float32),
        ("double", np.float64),
        ("long", np.int64),
        ("int", np.int32),
        ("half", np.float16),
        ("bool", np.bool_),
    ],
)
def test_cast_methods(method, dtype):
    x = leaf([1.5, 0.0, -2.0], dtype=np.float64 if method != "double" else np.float32)
    y = getattr(x, method)()
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.detach().numpy(), x.detach().numpy().astype(dtype))
    if np.dtype(dtype).kind == "f":
        assert y.requires_grad
        y.sum().backward()
        assert x.grad.dtype == x.dtype
        np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))
    else:  # integer and bool results never require grad, as in PyTorch
        assert not y.requires_grad and y.grad_fn is None


def test_cast_method_is_identity_for_same_dtype():
    x = leaf([1.0], dtype=np.float32)
    assert x.float() is x


# --- repr ------------------------------------------------------------------------------------


def test_repr_shows_values_and_grad_fn():
    x = Variable(np.ones((2, 2)), requires_grad=True)
    y = x + 2
    text = repr(y)
    assert text == "tensor([[3., 3.],\n        [3., 3.]], dtype=torch.float64, grad_fn=<AddBackward0>)"
    assert "requires_grad=True" in repr(x) and "grad_fn" not in repr(x)
    f32 = Variable(np.array([1.5, -2.25], dtype=np.float32))
    assert repr(f32) == "tensor([ 1.5000, -2.2500])"  # float32 is the default: not shown
    assert "dtype" not in repr(Variable(np.array([1, 2])))
    assert str(y) == repr(y)
    assert "MeanBackward0" in repr(y.mean())


def test_repr_numbers_are_the_values():
    import re

    a = np.array([[1.0, 2.5], [-3.0, 4.125]], dtype=np.float32)
    text = repr(Variable(a, requires_grad=True))
    numbers = [float(n) for n in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", text)]
    assert numbers == a.ravel().tolist()
    assert text.endswith("requires_grad=True)")


# --- operators: scalars, arrays and Variables on either side ------------------------------------------

OPERATORS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "**": operator.pow,
}


@pytest.mark.parametrize("symbol", list(OPERATORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_python_scalar_on_either_side_keeps_dtype(symbol, dtype):
    op = OPERATORS[symbol]
    x = leaf([0.5, 1.0, 2.0], dtype=dtype)
    for left, right in ((x, 1.5), (1.5, x), (x, 2), (2, x)):
        out = op(left, right)
        assert isinstance(out, Variable) and out.dtype == dtype, (symbol, left, right)
        expected = op(
            np.asarray(left.data if isinstance(left, Variable) else left, dtype=np.float64),
            np.asarray(right.data if isinstance(right, Variable) else right, dtype=np.float64),
        )
        np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-6)
        assert out.requires_grad


@pytest.mark.parametrize("symbol", list(OPERATORS))
def test_numpy_array_on_either_side_returns_variable(symbol):
    op = OPERATORS[symbol]
    x = leaf([0.5, 1.0, 2.0])
    a = np.array([1.0, 2.0, 3.0])
    for left, right in ((x, a), (a, x)):
        out = op(left, right)
        assert isinstance(out, Variable) and out.requires_grad
        np.testing.assert_allclose(out.detach().numpy(), op(host(left), host(right)))
    out = op(a, x)
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == (3,)


def test_numpy_array_times_variable():
    v = leaf([1.0, 2.0, 3.0], dtype=np.float32)
    out = np.ones(3) * v
    assert isinstance(out, Variable) and out.requires_grad
    assert out.dtype == np.float64  # a float64 array promotes, as a float64 tensor does in torch
    out32 = np.ones(3, dtype=np.float32) * v
    assert out32.dtype == np.float32
    assert (np.float64(2.0) * v).dtype == np.float32  # a NumPy float scalar acts as a Python float
    assert (v * np.float64(2.0)).dtype == np.float32


def test_matmul_operator_with_arrays():
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x = leaf(b)
    left = a @ x
    assert isinstance(left, Variable)
    np.testing.assert_allclose(left.detach().numpy(), a @ b)
    right = Variable(a) @ b
    np.testing.assert_allclose(right.numpy(), a @ b)
    left.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a.T @ np.ones((3, 2)))


def test_unary_operators():
    x = leaf([-1.0, 2.0])
    np.testing.assert_array_equal((-x).detach().numpy(), [1.0, -2.0])
    np.testing.assert_array_equal(abs(x).detach().numpy(), [1.0, 2.0])
    assert type((-x).grad_fn).__name__ == "NegBackward0"


@needs_torch
@pytest.mark.parametrize("symbol", list(OPERATORS) + ["@"])
def test_operator_gradients_match_torch(symbol):
    rng = np.random.default_rng(12)
    a, b = rng.uniform(0.5, 2, (3, 3)), rng.uniform(0.5, 2, (3,))
    op = operator.matmul if symbol == "@" else OPERATORS[symbol]
    x, y = leaf(a), leaf(b)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (op(x, y) * op(2.0, y) if symbol != "@" else op(x, y) * 2.0).sum().backward()
    (op(tx, ty) * op(2.0, ty) if symbol != "@" else op(tx, ty) * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)


# --- comparisons -----------------------------------------------------------------------------


@pytest.mark.parametrize("symbol", ["<", "<=", ">", ">=", "==", "!="])
def test_comparisons_return_masks(symbol):
    op = {
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
        "==": operator.eq,
        "!=": operator.ne,
    }[symbol]
    x = leaf([1.0, 2.0, 3.0])
    for other in (2.0, np.array([3.0, 2.0, 1.0]), leaf([3.0, 2.0, 1.0])):
        mask = op(x, other)
        assert isinstance(mask, Variable) and mask.dtype == np.bool_
        assert not mask.requires_grad and mask.grad_fn is None
        np.testing.assert_array_equal(mask.detach().numpy(), op(x.detach().numpy(), host(other)))
    reflected = op(2.0, x)
    np.testing.assert_array_equal(reflected.detach().numpy(), op(2.0, x.detach().numpy()))


def test_comparison_mask_selects_and_assigns():
    x = leaf([-1.0, 2.0, -3.0, 4.0])
    picked = x[x > 0]
    np.testing.assert_array_equal(picked.detach().numpy(), [2.0, 4.0])
    picked.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0, 1.0])
    y = Variable(x.detach().numpy().copy())
    y[y < 0] = 0
    np.testing.assert_array_equal(y.numpy(), [0.0, 2.0, 0.0, 4.0])


def test_variable_is_hashable_and_eq_is_elementwise():
    x = leaf([1.0])
    assert {x: 1}[x] == 1
    assert isinstance(x == x, Variable)


# --- indexing against torch ------------------------------------------------------------------------

INDEX_KEYS = {
    "int": 1,
    "neg-int": -1,
    "slice": slice(1, 3),
    "step": slice(None, None, 2),
    "neg-step-range": slice(-3, None, 2),
    "tuple": (1, 2),
    "row-slice-col-int": (slice(None), 0),
    "none": (None, 1),
    "ellipsis": (Ellipsis, 1),
    "ellipsis-none": (Ellipsis, None),
    "int-array": np.array([0, 2]),
    "repeated-int-array": np.array([0, 0, 3, 0]),
    "2d-int-array": np.array([[0, 1], [1, 1]]),
    "list": [3, 1, 1],
    "two-int-arrays": (np.array([0, 1, 1]), np.array([2, 2, 0])),
    "slice-and-int-array": (slice(1, None), np.array([2, 2])),
    "bool-mask-full": "mask-full",
    "bool-mask-rows": "mask-rows",
}


def _key_pair(name, shape, rng):
    key = INDEX_KEYS[name]
    if isinstance(key, str) and key == "mask-full":
        mask = rng.random(shape) > 0.4
        return Variable(mask), torch.tensor(mask)
    if isinstance(key, str) and key == "mask-rows":
        mask = np.array([True, False, True, True])
        return mask, torch.tensor(mask)
    if isinstance(key, tuple):
        return key, tuple(torch.tensor(k) if isinstance(k, np.ndarray) else k for k in key)
    if isinstance(key, np.ndarray):
        return key, torch.tensor(key)
    return key, key


@needs_torch
@pytest.mark.parametrize("name", list(INDEX_KEYS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_indexing_matches_torch(name, dtype):
    rng = np.random.default_rng(13)
    a = rng.standard_normal((4, 3, 2)).astype(dtype)
    key, t_key = _key_pair(name, a.shape, rng)
    x, tx = Variable(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, t_out = x[key], tx[t_key]
    assert out.shape == tuple(t_out.shape) and out.dtype == dtype
    np.testing.assert_array_equal(out.detach().numpy(), t_out.detach().numpy())
    w = rng.standard_normal(out.shape).astype(dtype)
    (out * Variable(w)).sum().backward()
    (t_out * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_repeated_indices_accumulate_gradient():
    x = leaf([10.0, 20.0, 30.0])
    y = x[np.array([0, 0, 2, 0])]
    np.testing.assert_array_equal(y.detach().numpy(), [10.0, 10.0, 30.0, 10.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0])


def test_index_with_variable_of_indices():
    x = leaf(np.arange(5.0))
    idx = Variable(np.array([4, 1]))
    np.testing.assert_array_equal(x[idx].detach().numpy(), [4.0, 1.0])


def test_indexing_out_of_range_raises():
    with pytest.raises(IndexError):
        leaf([1.0, 2.0])[5]


def test_getitem_second_derivative():
    x = leaf([1.0, 2.0, 3.0])
    (g,) = engine.grad((x[np.array([0, 0, 2])] ** 3).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [6.0, 0.0, 27.0])
    (h,) = engine.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), [12.0, 0.0, 18.0])


# --- cat / stack ---------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_and_stack_match_torch(dim):
    rng = np.random.default_rng(14)
    arrays = [rng.standard_normal((2, 3)) for _ in range(3)]
    xs = [leaf(a) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    w_cat = rng.standard_normal(np.concatenate(arrays, axis=dim).shape)
    w_stack = rng.standard_normal(np.stack(arrays, axis=dim).shape)
    out = (engine.cat(xs, dim) * Variable(w_cat)).sum() + (engine.stack(xs, dim=dim) * Variable(w_stack)).sum()
    t_out = (torch.cat(txs, dim) * torch.tensor(w_cat)).sum() + (
        torch.stack(txs, dim=dim) * torch.tensor(w_stack)
    ).sum()
    np.testing.assert_allclose(out.item(), t_out.item(), rtol=1e-12)
    out.backward()
    t_out.backward()
    for x, tx in zip(xs, txs):
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_cat_of_mixed_grad_requirements():
    a, b = leaf([1.0, 2.0]), Variable(np.array([3.0]))
    out = engine.cat([a, b])
    np.testing.assert_array_equal(out.detach().numpy(), [1.0, 2.0, 3.0])
    (out * Variable(np.array([1.0, 2.0, 3.0]))).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0])
    assert b.grad is None


# --- softmax family: stability -----------------------------------------------------------------------


@pytest.mark.parametrize("values", [[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0], [1e4, 0.0, -1e4]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_softmax_family_is_stable(values, dtype):
    x = leaf(values, dtype=dtype)
    shifted = np.asarray(values, dtype=np.float64) - max(values)
    expected_log = shifted - np.log(np.exp(shifted).sum())
    sm, lsm, lse = engine.softmax(x, 0), engine.log_softmax(x, 0), engine.logsumexp(x, 0)
    for v in (sm, lsm, lse):
        assert np.all(np.isfinite(v.detach().numpy())) and v.dtype == dtype
    np.testing.assert_allclose(sm.detach().numpy(), np.exp(expected_log), rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(lsm.detach().numpy(), expected_log, rtol=1e-5)
    np.testing.assert_allclose(lse.item(), max(values) + np.log(np.exp(shifted).sum()), rtol=1e-6)
    assert abs(sm.detach().numpy().sum() - 1) < 1e-5
    (g,) = engine.grad((lsm * Variable(np.array([1.0, 0.0, 0.0], dtype=dtype))).sum(), x)
    assert np.all(np.isfinite(g.numpy()))
    np.testing.assert_allclose(g.numpy(), np.array([1.0, 0.0, 0.0]) - np.exp(expected_log), rtol=1e-5, atol=1e-7)


@needs_torch
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_family_large_inputs_match_torch(fn):
    a = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]])
    x, tx = leaf(a), torch.tensor(a, requires_grad=True)
    out, t_out = getattr(engine, fn)(x, 1), getattr(torch, fn)(tx, 1)
    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), rtol=1e-12)
    w = np.arange(6.0).reshape(2, 3)
    (out * Variable(w)).sum().backward()
    (t_out * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-14)


# --- max / min --------------------------------------------------------------------------------


def test_max_min_api():
    a = np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    x = leaf(a)
    m = x.max()
    assert m.shape == () and m.item() == 6.0 and m.requires_grad
    values, indices = x.max(1)
    np.testing.assert_array_equal(values.detach().numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 2])
    assert indices.dtype == np.int64 and not indices.requires_grad
    values, indices = x.min(0, keepdim=True)
    assert values.shape == (1, 3)
    np.testing.assert_array_equal(indices.numpy(), [[0, 1, 0]])
    assert engine.max(x, 1).values.shape == (2,)
    both = engine.max(x, Variable(np.full((2, 3), 3.5)))
    np.testing.assert_array_equal(both.detach().numpy(), np.maximum(a, 3.5))
    low = engine.min(x, leaf(np.full(3, 3.5)))
    np.testing.assert_array_equal(low.detach().numpy(), np.minimum(a, 3.5))
    assert x.min().item() == 1.0


@needs_torch
def test_max_min_match_torch():
    rng = np.random.default_rng(15)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    x, y = leaf(a), leaf(b)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out = (
        x.max()
        + x.min(1)[0].sum() * 2
        + x.max(0, keepdim=True).values.sum() * 3
        + (engine.max(x, y) * engine.min(x, y)).sum()
    )
    t_out = (
        tx.max()
        + tx.min(1)[0].sum() * 2
        + tx.max(0, keepdim=True).values.sum() * 3
        + (torch.max(tx, ty) * torch.min(tx, ty)).sum()
    )
    np.testing.assert_allclose(out.item(), t_out.item(), rtol=1e-12)
    out.backward()
    t_out.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(x.max(1).indices.numpy(), tx.max(1).indices.numpy())


# --- norm, var, shape helpers via methods ------------------------------------------------------------


@needs_torch
def test_reduction_methods_match_torch():
    rng = np.random.default_rng(16)
    a = rng.standard_normal((3, 4))
    x, tx = leaf(a), torch.tensor(a, requires_grad=True)
    out = (
        x.norm()
        + x.norm(1.0)
        + x.norm(float("inf"))
        + x.var()
        + x.var(1).sum()
        + x.mean(0).sum()
        + x.sum(1, keepdim=True).sum()
        + x.var(0, unbiased=False).sum()
    )
    t_out = (
        tx.norm()
        + tx.norm(1.0)
        + tx.norm(float("inf"))
        + tx.var()
        + tx.var(1).sum()
        + tx.mean(0).sum()
        + tx.sum(1, keepdim=True).sum()
        + tx.var(0, unbiased=False).sum()
    )
    np.testing.assert_allclose(out.item(), t_out.item(), rtol=1e-12)
    out.backward()
    t_out.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)


@needs_torch
def test_shape_methods_match_torch():
    rng = np.random.default_rng(17)
    a = rng.standard_normal((2, 3, 4))
    x, tx = leaf(a), torch.tensor(a, requires_grad=True)
    w = rng.standard_normal((4, 6))

    def chain(v, wv):
        return (
            (v.reshape(6, 4).t().unsqueeze(0).squeeze(0).transpose(0, 1).view(6, 4).permute(1, 0) * wv)
            .flatten()
            .expand(2, 24)
            .sum()
        )

    out, t_out = chain(x, Variable(w)), chain(tx, torch.tensor(w))
    np.testing.assert_allclose(out.item(), t_out.item(), rtol=1e-12)
    out.backward()
    t_out.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


# --- constructors --------------------------------------------------------------------------------


def test_factory_functions():
    assert engine.ones(2, 2).shape == (2, 2) and engine.ones(2, 2).dtype == np.float32
    assert engine.ones((2, 3)).shape == (2, 3)
    np.testing.assert_array_equal(engine.zeros(3).numpy(), np.zeros(3))
    assert engine.full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    assert engine.randn(3, 4).shape == (3, 4) and engine.randn(3).dtype == np.float32
    r = engine.rand(1000)
    assert r.numpy().min() >= 0 and r.numpy().max() < 1
    assert engine.arange(5).numpy().tolist() == [0, 1, 2, 3, 4] and engine.arange(5).dtype == np.int64
    assert engine.arange(1, 4, dtype="float64").dtype == np.float64
    x = engine.randn(2, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    assert engine.zeros_like(x).shape == (2,) and engine.ones_like(x).dtype == np.float32
    assert engine.tensor([1.0, 2.0]).dtype == np.float32  # Python floats become float32
    assert engine.tensor([1, 2]).dtype == np.int64
    assert engine.ones(2, dtype="float64").dtype == np.float64


def test_manual_seed_reproduces():
    engine.manual_seed(42)
    a = engine.randn(5).numpy()
    engine.manual_seed(42)
    np.testing.assert_array_equal(engine.randn(5).numpy(), a)
    assert not np.array_equal(engine.randn(5).numpy(), a)


def test_variable_from_list_and_scalar():
    assert Variable([1.0, 2.0]).dtype == np.float32
    assert Variable(3.0).shape == () and Variable(3.0).dtype == np.float32
    assert Variable(np.float64(3.0)).dtype == np.float64
    assert math.isclose(Variable([0.1]).item(), 0.1, rel_tol=1e-7)


# --- where with scalars -------------------------------------------------------------------------


def test_where_with_integer_variables_and_scalars():
    i = Variable(np.array([1, 2, 3]))
    np.testing.assert_array_equal(engine.where(i > 1, i, 0).numpy(), [0, 2, 3])
    np.testing.assert_array_equal(engine.where(i > 2, 0, i).numpy(), [1, 2, 0])
    assert engine.where(i > 1, i, 0).dtype == np.int64


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_where_with_scalar_matches_torch(dtype):
    a = np.array([-1.0, 2.0, -3.0], dtype=dtype)
    x, tx = Variable(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, t_out = engine.where(x > 0, x, 0.5), torch.where(tx > 0, tx, 0.5)
    assert out.dtype.name == str(t_out.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(out.detach().numpy(), t_out.detach().numpy())
    (out * 3).sum().backward()
    (t_out * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
