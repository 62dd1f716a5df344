"""The engine's core semantics on CuPy: every registry sample, gradchecks, the seed programs and
a deep graph, run with `engine.backend.use("cuda")` and compared with the NumPy results.

Skipped (with the reason) where CuPy is missing or sees no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_testkit import call_op, sample_arrays, sample_cases, to_variables

import engine
from engine import Function, Variable, backend, grad, no_grad
from tests.seed_programs import my_relu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not backend.gpu_available(), reason="no GPU: CuPy is not installed or sees no CUDA device"),
]

CASES = sample_cases()
GRADCHECKED = (
    "mul",
    "div",
    "exp",
    "tanh",
    "pow",
    "matmul",
    "sum",
    "amax",
    "norm",
    "softmax",
    "getitem",
    "setitem",
    "index_add",
    "cat",
    "expand",
    "where",
    "clamp",
)


@pytest.fixture
def cuda():
    backend.use("cuda")
    try:
        yield
    finally:
        backend.use("cpu")


def host(v):
    return None if v is None else backend.to_numpy(v.data if isinstance(v, Variable) else v)


def on_gpu(v) -> bool:
    return type(v.data).__module__.split(".")[0] == "cupy"


def run_case(name, index, dtype, seed):
    """Forward value and input gradients of one registry sample on the active backend, on the host."""
    op = engine.OPS[name]
    sample = op.samples[index]
    inputs = to_variables(sample_arrays(sample, np.random.default_rng(seed)), dtype)
    attrs = op.check_attrs(dict(sample.attrs))
    out = op.call(inputs, attrs)
    grads = []
    wrt = [v for v in inputs if v.requires_grad]
    if op.differentiable and wrt and out.dtype.kind == "f":
        cotangent = np.random.default_rng(seed + 1).standard_normal(out.shape).astype(out.dtype)
        grads = grad(out, wrt, Variable(cotangent), allow_unused=True)
    return out, [host(g) for g in grads]


def test_backend_switch(cuda):
    assert backend.device == "cuda"
    v = Variable(np.arange(3.0))
    assert on_gpu(v) and v.device == "cuda"
    assert isinstance(v.numpy(), np.ndarray)
    assert "device='cuda'" in repr(v)
    assert on_gpu(engine.randn(2, 2)) and on_gpu(engine.ones(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_sample_matches_numpy(name, index, dtype):
    expected, expected_grads = run_case(name, index, dtype, seed=index)
    backend.use("cuda")
    try:
        out, grads = run_case(name, index, dtype, seed=index)
        assert on_gpu(out)
    finally:
        backend.use("cpu")
    assert out.dtype == expected.dtype and out.shape == expected.shape
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    if dtype == np.float32 and engine.OPS[name].kernel == "blas":
        # cuBLAS/cuSOLVER round float32 in another order than OpenBLAS/LAPACK, and a decomposition's gradient
        # (its 1 / (s_i^2 - s_j^2) terms) amplifies that: svd's differed by 3e-5 on an H200
        tol["rtol"] = 1e-4
    np.testing.assert_allclose(host(out), host(expected), **tol)
    assert len(grads) == len(expected_grads)
    for g, e in zip(grads, expected_grads):
        assert (g is None) == (e is None)
        if g is not None:
            np.testing.assert_allclose(g, e, **tol)


@pytest.mark.parametrize(
    ("name", "index"), [c for c in CASES if c[0] in GRADCHECKED], ids=[f"{n}-{i}" for n, i in CASES if n in GRADCHECKED]
)
def test_gradcheck_on_gpu(cuda, name, index):
    op = engine.OPS[name]
    sample = op.samples[index]
    inputs = to_variables(sample_arrays(sample, np.random.default_rng(index)), np.float64)
    assert all(on_gpu(v) for v in inputs)
    fn = call_op(op, op.check_attrs(dict(sample.attrs)))
    assert engine.gradcheck(fn, inputs)
    if op.twice_differentiable:
        assert engine.gradgradcheck(fn, inputs)


def test_tutorial_on_gpu(cuda):
    x = Variable(np.ones((2, 2)), requires_grad=True)
    y = x + 2
    out = (y * y * 3).mean()
    assert type(y.grad_fn).__name__ == "AddBackward0" and type(out.grad_fn).__name__ == "MeanBackward0"
    out.backward()
    assert on_gpu(x.grad)
    np.testing.assert_array_equal(host(x.grad), np.full((2, 2), 4.5))


def test_semantics_on_gpu(cuda):
    x = Variable(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    with no_grad():
        assert (x * 2).grad_fn is None
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(host(x.grad), 4 * host(x))
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward()
    y = x * 1
    y[y < 0] = 0
    (y * 5).sum().backward()
    np.testing.assert_array_equal(host(x.grad), 4 * host(x) + np.array([5.0, 0.0, 5.0]))
    (g,) = grad((x**3).sum(), x, create_graph=True)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(host(h), 6 * host(x))
    assert bool(x.norm() < 1000)


MyReLU = my_relu(Function)


def _train(relu, steps=20):
    rng = np.random.default_rng(5)
    xa, ya = rng.standard_normal((64, 1000)).astype(np.float32), rng.standard_normal((64, 10)).astype(np.float32)
    w1 = Variable(rng.standard_normal((1000, 100)).astype(np.float32), requires_grad=True)
    w2 = Variable(rng.standard_normal((100, 10)).astype(np.float32), requires_grad=True)
    x, y = Variable(xa), Variable(ya)
    losses = []
    for _ in range(steps):
        loss = (relu(x.mm(w1)).mm(w2) - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        w1.data -= 1e-6 * w1.grad.data
        w2.data -= 1e-6 * w2.grad.data
        w1.grad.zero_()
        w2.grad.zero_()
    return np.array(losses)


def test_two_layer_net_on_gpu_matches_numpy():
    expected = _train(lambda h: h.clamp(min=0))
    backend.use("cuda")
    try:
        clamp = _train(lambda h: h.clamp(min=0))
        custom = _train(MyReLU.apply)
    finally:
        backend.use("cpu")
    assert clamp[-1] < clamp[0]
    np.testing.assert_allclose(clamp, expected, rtol=1e-4)
    np.testing.assert_allclose(custom, clamp, rtol=1e-6)


def test_deep_chain_on_gpu(cuda):
    x = Variable(np.ones(3), requires_grad=True)
    y = x
    for _ in range(20_000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(host(x.grad), np.full(3, 1.0001**20_000), rtol=1e-9)
