"""The everyday PyTorch surface (issue 22, item 4) on the engine: every program of
tests/everyday_programs.py against PyTorch (values, dtypes, requires_grad, gradients), the new
ops' gradients by finite differences in float64, the dtypes' printing and comparisons,
`set_default_dtype`, and `.data` as PyTorch's."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import engine
from engine import Variable
from tests import everyday_programs as programs

NEW_UNARY = ("floor", "ceil", "round", "trunc", "log10", "log2", "exp2")


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_program_matches_torch(name, oracle):
    source = programs.PROGRAMS[name]
    programs.assert_same_run(programs.run(engine, source), programs.run(oracle, source), name)


# --- gradients by finite differences (float64) ---------------------------------------------------


def leaf(values):
    return Variable(np.asarray(values, dtype=np.float64), requires_grad=True)


@pytest.mark.parametrize("name", NEW_UNARY)
def test_unary_gradients_by_finite_differences(name):
    rng = np.random.default_rng(1)
    x = leaf(rng.uniform(0.3, 2.7, (3, 4)) + 0.01)  # away from integers and halves, where rounding jumps
    fn = getattr(engine, name)
    assert engine.gradcheck(fn, [x]) and engine.gradgradcheck(fn, [x])


@pytest.mark.parametrize("name", ["fmod", "remainder"])
def test_modular_gradients_by_finite_differences_and_torch(name, oracle):
    x = leaf([[5.3, -5.3, 2.2], [-7.9, 0.4, 3.3]])
    y = leaf([[1.7, 1.7, -0.9], [2.1, -1.3, 0.6]])
    assert engine.gradcheck(getattr(engine, name), [x, y])
    getattr(engine, name)(x, y).sum().backward()
    tx, ty = (oracle.tensor(v.detach().numpy(), requires_grad=True) for v in (x, y))
    getattr(oracle, name)(tx, ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())  # -trunc(x / y) resp. -floor(x / y)


@pytest.mark.parametrize(
    "values",
    [[[2.0, 0.0, 3.0, 1.5]], [[0.0, 0.0, 2.0, -1.0]], [[0.0, 0.0, 0.0, 2.0]], [[1.2, -0.7, 3.0, 0.9]]],
    ids=["one zero", "two zeros", "three zeros", "no zero"],
)
def test_prod_gradients_at_zeros_by_finite_differences_and_torch(values, oracle):
    x = leaf(values)
    for fn in (lambda v: v.prod(), lambda v: v.prod(1), lambda v: engine.prod(v * v, dim=1, keepdim=True)):
        assert engine.gradcheck(fn, [x]) and engine.gradgradcheck(fn, [x])
    x.prod(1).sum().backward()
    t = oracle.tensor(values, dtype=oracle.float64, requires_grad=True)
    t.prod(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())


def test_floor_divide_has_no_gradient_and_pytorch_refuses_one(oracle):
    x = leaf([1.5, -2.5, 3.7])
    q = x // 2
    assert q.tolist() == [0.0, -2.0, 1.0] and not q.requires_grad and q.grad_fn is None
    t = oracle.tensor([1.5, -2.5, 3.7], requires_grad=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        (t // 2).sum().backward()
    (q * x).sum().backward()  # the quotient is a constant of the graph
    assert x.grad.tolist() == [0.0, -2.0, 1.0]


def test_index_add_and_index_put_gradients_by_finite_differences():
    x, source = leaf(np.arange(12.0).reshape(4, 3) / 7), leaf(np.linspace(-1, 1, 9).reshape(3, 3))
    index = engine.tensor([0, 3, 0])
    assert engine.gradcheck(lambda a, b: engine.index_add(a, 0, index, b, alpha=1.5), [x, source])
    assert engine.gradcheck(lambda a, b: a.index_put((index,), b, accumulate=True), [x, source])
    assert engine.gradcheck(lambda a, b: a.index_put((index[:2],), b[:2]), [x, source])


# --- dtypes ------------------------------------------------------------------------------------


def test_dtypes_print_as_torch_and_compare_as_numpy(oracle):
    x = engine.ones(2)
    assert str(x.dtype) == repr(x.dtype) == str(engine.float32) == str(oracle.float32) == "torch.float32"
    assert str(engine.long) == "torch.int64" and str(engine.double) == str(oracle.double)
    assert x.dtype == engine.float32 == np.float32 == np.dtype("float32") == "float32"
    assert np.float32 == x.dtype and np.dtype("float32") == x.dtype and x.dtype != engine.float64
    assert x.dtype != np.int64 and not (x.dtype == "float64")
    assert x.dtype.is_floating_point and not engine.int64.is_floating_point and engine.int8.is_signed
    assert x.dtype.itemsize == 4 and engine.float16.itemsize == 2 and x.dtype.kind == "f" and x.dtype.name == "float32"
    assert {np.dtype("float32"): "a"}[x.dtype] == "a" and {engine.float32: "b"}[np.dtype("float32")] == "b"
    assert len({engine.float32, engine.float, np.dtype("float32"), x.dtype}) == 1
    assert engine.finfo(x.dtype).eps == oracle.finfo(oracle.float32).eps
    assert engine.finfo().max == oracle.finfo().max and engine.iinfo(engine.int32).max == 2**31 - 1
    assert np.zeros(2, dtype=engine.float64).dtype == np.float64 and np.dtype(x.dtype) is np.dtype("float32")
    assert pickle.loads(pickle.dumps(x.dtype)) is x.dtype
    assert x.to(engine.float64).dtype == engine.double and x.numpy().dtype == np.float32


def test_set_default_dtype_changes_floating_factories_only(oracle):
    assert engine.get_default_dtype() == engine.float32 and str(engine.get_default_dtype()) == "torch.float32"
    try:
        engine.set_default_dtype(engine.float64)
        oracle.set_default_dtype(oracle.float64)
        made = {
            "tensor([1.0])": (engine.tensor([1.0]), oracle.tensor([1.0])),
            "tensor(2.5)": (engine.tensor(2.5), oracle.tensor(2.5)),
            "zeros": (engine.zeros(2), oracle.zeros(2)),
            "randn": (engine.randn(2), oracle.randn(2)),
            "arange(0.5)": (engine.arange(0.5, 3), oracle.arange(0.5, 3)),
            "full": (engine.full((2,), 1.5), oracle.full((2,), 1.5)),
            "tensor([1])": (engine.tensor([1, 2]), oracle.tensor([1, 2])),
            "arange(3)": (engine.arange(3), oracle.arange(3)),
            "x + 1.5": (engine.tensor([1.0]) + 1.5, oracle.tensor([1.0]) + 1.5),
        }
        for what, (ours, theirs) in made.items():
            assert str(ours.dtype) == str(theirs.dtype), what
        assert engine.get_default_dtype() == engine.float64
        with pytest.raises(TypeError, match="floating"):
            engine.set_default_dtype(engine.int64)
    finally:
        engine.set_default_dtype(engine.float32)
        oracle.set_default_dtype(oracle.float32)
    assert engine.tensor([1.0]).dtype == engine.float32 and engine.zeros(1).dtype == engine.float32


# --- .data, casts and what was already there -----------------------------------------------------


def test_data_is_outside_autograd_and_shares_storage(oracle):
    for torch in (engine, oracle):
        p = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (p * p).sum().backward()
        d = p.data
        assert d.requires_grad is False and d.grad_fn is None
        d[0] = 5.0  # writes through to p
        assert p.detach().numpy().tolist() == [5.0, 2.0, 3.0]
        p.data += -0.5 * p.grad  # in place, a Variable on the right
        assert d.tolist() == [4.0, 0.0, 0.0] and p.requires_grad and p.grad_fn is None
        p.data.copy_(torch.tensor([7.0, 8.0, 9.0]))
        assert p.detach().numpy().tolist() == [7.0, 8.0, 9.0] and d.tolist() == [7.0, 8.0, 9.0]


def test_casts_keep_gradients_like_torch(oracle):
    source = "out = (x.double() * 2).float() + x.type(torch.float64).float()"
    programs.assert_same_run(programs.run(engine, source), programs.run(oracle, source), source)
    for method in ("float", "double", "long", "int", "bool", "half"):
        assert str(getattr(engine.ones(1), method)().dtype) == str(getattr(oracle.ones(1), method)().dtype)


def test_bad_reduction_keywords_are_refused():
    x = engine.ones(2, 3)
    with pytest.raises(TypeError, match="axes"):
        x.sum(axes=1)
    with pytest.raises(TypeError, match="multiple values"):
        x.max(1, axis=1)
    with pytest.raises(TypeError, match="keepdimz"):
        x.std(keepdimz=True)
