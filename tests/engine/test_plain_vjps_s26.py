"""The vjps that compute on the arrays where nothing records (a backward without create_graph: sum's, clamp's,
pow's of a constant exponent, sub's, tanh's, permute's, and grad()'s sum of a leaf's gradients) give what
their recorded form gives (create_graph=True) and what PyTorch gives: values, dtypes, shapes, 0-d tensors, the
boundaries and NaNs of clamp's mask, and a `.grad` a program may update in place."""

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")

DTYPES = ["float16", "float32", "float64"]


def _pair(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.5, 1.5, shape).astype(dtype)
    return engine.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


PROGRAMS = {
    "clamp_min": lambda m, x: m.clamp(x, min=0.0).sum(),
    "clamp_max": lambda m, x: (m.clamp(x, max=0.25) * x).sum(),
    "clamp_both": lambda m, x: m.clamp(x, -0.5, 0.5).pow(2).sum(),
    "pow_2": lambda m, x: (x.pow(2) * 3).sum(),
    "pow_3": lambda m, x: x.pow(3).sum(),
    "pow_half_of_positive": lambda m, x: (x * x + 1).pow(0.5).sum(),
    "sub_both": lambda m, x: (x.tanh() - x * 2).pow(2).sum(),
    "sub_y_only": lambda m, x: (1.0 - x).pow(2).sum(),
    "tanh": lambda m, x: (x.tanh() * x).sum(),
    "permute": lambda m, x: (
        x.permute((*range(1, x.dim()), 0)[: x.dim()]).tanh() * 2
    ).sum(),  # (1, 2, 0): not its inverse
    "full_sum_twice": lambda m, x: x.sum() * x.sum(),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_plain_gradients_equal_recorded_ones_and_pytorch(name, shape, dtype):
    program = PROGRAMS[name]
    x, tx = _pair(shape, dtype)
    (plain,) = engine.grad(program(engine, x), [x])
    (recorded,) = engine.grad(program(engine, x), [x], create_graph=True)
    (expected,) = torch.autograd.grad(program(torch, tx), [tx])
    assert plain.dtype == recorded.dtype == x.dtype and tuple(plain.shape) == shape
    assert isinstance(plain._data, np.ndarray) and not plain.requires_grad and plain.grad_fn is None
    np.testing.assert_array_equal(plain.detach().numpy(), recorded.detach().numpy())
    tol = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(plain.numpy(), expected.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("bounds", [{"min": 0.0}, {"max": 0.0}, {"min": -1.0, "max": 1.0}])
def test_clamp_gradient_at_its_bounds_and_at_nan_is_pytorchs(bounds):
    values = np.array([-1.0, 0.0, 1.0, np.nan, -2.0, 2.0], dtype=np.float32)
    x, tx = engine.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    engine.clamp(x, **bounds).sum().backward()
    torch.clamp(tx, **bounds).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())  # 1 at a bound (inclusive), 0 at NaN


def test_a_full_sums_gradient_in_grad_is_a_program_own_array():
    x, tx = _pair((3, 4), "float32")
    x.sum().backward()
    tx.sum().backward()
    x.grad += 1  # the 0-stride gradient view was copied into `.grad`: it can be written, as PyTorch's
    tx.grad += 1
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    x.grad.zero_()
    (g,) = engine.grad(x.sum(), [x])
    with pytest.raises(ValueError):
        g._data[0, 0] = 5  # grad()'s result is the read-only view it always was (no memory of x's size written)
    assert np.all(x.grad.numpy() == 0)


def test_a_grad_input_reached_twice_sums_its_gradients_on_the_arrays_and_recorded():
    x, tx = _pair((2, 3), "float64")
    w = engine.tensor(np.full((2, 3), 0.5), requires_grad=True)
    (plain,) = engine.grad((x * w).sum() + x.sum(), [x])  # x's gradient from mul's and from sum's node
    (recorded,) = engine.grad((x * w).sum() + x.sum(), [x], create_graph=True)
    tw = torch.full((2, 3), 0.5, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad((tx * tw).sum() + tx.sum(), [tx])
    np.testing.assert_array_equal(plain.numpy(), expected.numpy())
    assert recorded.requires_grad and not plain.requires_grad  # the recorded sum has w's graph (through mul)
    (second,) = engine.grad(recorded.sum(), [w])
    np.testing.assert_array_equal(second.numpy(), np.ones((2, 3)))


def test_hvp_of_a_tanh_mlp_equals_pytorchs():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in [(5, 4), (4, 6), (6, 3), (5, 3), (4, 6), (6, 3)]]
    x, w1, w2, y, v1, v2 = arrays

    def hvp(m, tensor, grad):
        tw1, tw2 = tensor(w1).requires_grad_(), tensor(w2).requires_grad_()
        loss = (tensor(x).mm(tw1).tanh().mm(tw2) - tensor(y)).pow(2).sum()
        g1, g2 = grad(loss, [tw1, tw2], create_graph=True)
        return grad((g1 * tensor(v1)).sum() + (g2 * tensor(v2)).sum(), [tw1, tw2])

    ours = hvp(engine, engine.tensor, engine.grad)
    theirs = hvp(torch, torch.tensor, torch.autograd.grad)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-12)


def test_hooks_see_and_replace_the_gradients_the_plain_vjps_read():
    x, tx = _pair((2, 3), "float32")
    seen = []
    for m, v in ((engine, x), (torch, tx)):
        h = m.clamp(v, min=0.0)
        h.register_hook(lambda g, seen=seen: (seen.append(g.numpy().copy()), g * 3)[1])
        (h.pow(2) - v).sum().backward()
    np.testing.assert_array_equal(seen[0], seen[1])
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
