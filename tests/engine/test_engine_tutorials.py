"""The seed programs: PyTorch 0.3's autograd tutorials, adapted to the engine's API, as tests.

Where torch is installed it is the oracle for the numbers; the closed-form values the
tutorials print (3, 4.5, 2x, 3) are asserted directly.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import engine
from engine import Function, Variable, grad, no_grad
from tests.seed_programs import my_relu

try:
    import torch
except ImportError:  # the torch comparisons below skip; everything else still runs
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (used as the oracle)")


MyReLU = my_relu(Function)  # the seed's custom ReLU (tests/seed_programs.py)


# --- autograd tutorial ---------------------------------------------------------------------


def test_tutorial_mean_of_square():
    x = Variable(np.ones((2, 2)), requires_grad=True)
    y = x + 2
    z = y * y * 2
    out = z.mean()
    assert type(y.grad_fn).__name__ == "AddBackward0"
    assert x.grad_fn is None and x.is_leaf and not y.is_leaf
    assert type(out.grad_fn).__name__ == "MeanBackward0"
    assert out.shape == () and out.item() == 18.0
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 3.0))
    assert x.grad.dtype == np.float64 and x.grad.grad_fn is None and not x.grad.requires_grad


def test_tutorial_mean_of_square_times_three():
    x = Variable(np.ones((2, 2)), requires_grad=True)
    y = x + 2
    out = (y * y * 3).mean()
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 4.5))


def test_tutorial_grad_fn_chain_names():
    x = Variable(np.ones((2, 2)), requires_grad=True)
    z = (x + 2) * (x + 2) * 2
    assert z.grad_fn.name == "MulBackward0"
    parents = [f for f, _ in z.grad_fn.next_functions]
    assert parents[0].name == "MulBackward0" and parents[1] is None  # the constant 2 has no node
    inner = [type(f).__name__ for f, _ in parents[0].next_functions]
    assert inner == ["AddBackward0", "AddBackward0"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tutorial_nonscalar_backward_with_gradient(seed):
    engine.manual_seed(seed)
    x = engine.randn(3, requires_grad=True)
    y = x * 2
    k = 1
    while y.norm().item() < 1000:
        y = y * 2
        k += 1
    assert y.norm().item() >= 1000
    gradient = Variable(np.array([0.1, 1.0, 0.0001]))
    y.backward(gradient)
    assert x.grad.dtype == x.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), gradient.numpy() * 2.0**k, rtol=1e-6)
    np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy() * 2.0**k, rtol=1e-6)


def test_tutorial_polynomial_backward_with_ones():
    rng = np.random.default_rng(3)
    x = Variable(rng.standard_normal((2, 3)), requires_grad=True)
    y = Variable(rng.standard_normal((2, 3)), requires_grad=True)
    z = x**2 + 3 * y
    z.backward(gradient=np.ones((2, 3)))
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(y.grad.numpy(), np.full((2, 3), 3.0))


@needs_torch
@pytest.mark.parametrize("combine", ["add", "div"])
def test_tutorial_grad_with_grad_outputs_broadcast(combine):
    rng = np.random.default_rng(4)
    xa, ya = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    za = rng.uniform(0.5, 2.0, 5)
    go = rng.standard_normal((5, 5))
    x, y, z = (Variable(a, requires_grad=True) for a in (xa, ya, za))
    tx, ty, tz = (torch.tensor(a, requires_grad=True) for a in (xa, ya, za))
    out = x.mm(y) + z if combine == "add" else x.mm(y) / z
    t_out = tx.mm(ty) + tz if combine == "add" else tx.mm(ty) / tz
    grads = grad(out, [x, y, z], grad_outputs=Variable(go))
    t_grads = torch.autograd.grad(t_out, [tx, ty, tz], grad_outputs=torch.tensor(go))
    for g, tg, v in zip(grads, t_grads, (x, y, z)):
        assert g.shape == v.shape
        np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-10)
    assert x.grad is None and y.grad is None and z.grad is None


# --- the two-layer network ---------------------------------------------------------------------

N, D_IN, H, D_OUT = 64, 1000, 100, 10
STEPS, LR = 50, 1e-6


def _net_data():
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s).astype(np.float32) for s in ((N, D_IN), (N, D_OUT), (D_IN, H), (H, D_OUT))]


RELUS = {"clamp": lambda h: h.clamp(min=0), "MyReLU": MyReLU.apply, "relu": engine.relu}


@functools.cache
def _losses(relu_name):
    """The engine's losses with one ReLU spelling (cached: several tests compare the same runs)."""
    return _train_engine(RELUS[relu_name])


def _train_engine(relu):
    xa, ya, w1a, w2a = _net_data()
    x, y = Variable(xa), Variable(ya)
    w1 = Variable(w1a.copy(), requires_grad=True)
    w2 = Variable(w2a.copy(), requires_grad=True)
    losses = []
    for _ in range(STEPS):
        y_pred = relu(x.mm(w1)).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        assert loss.dtype == np.float32
        losses.append(loss.item())
        loss.backward()
        w1.data -= LR * w1.grad.data
        w2.data -= LR * w2.grad.data
        w1.grad.zero_()
        w2.grad.zero_()
    assert w1.dtype == np.float32 and w2.dtype == np.float32
    return np.array(losses)


def test_two_layer_net_loss_falls():
    losses = _losses("clamp")
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.01 * losses[0]
    assert np.all(np.diff(losses[-30:]) < 0)  # past the first overshoots it falls every step


def test_two_layer_net_with_custom_relu_matches_clamp():
    np.testing.assert_array_equal(_losses("MyReLU"), _losses("clamp"))


def test_two_layer_net_relu_op_matches_clamp():
    np.testing.assert_allclose(_losses("relu"), _losses("clamp"), rtol=1e-6)


@needs_torch
def test_two_layer_net_matches_torch():
    xa, ya, w1a, w2a = _net_data()
    x, y = torch.from_numpy(xa), torch.from_numpy(ya)
    w1 = torch.from_numpy(w1a.copy()).requires_grad_(True)
    w2 = torch.from_numpy(w2a.copy()).requires_grad_(True)
    losses = []
    for _ in range(STEPS):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 -= LR * w1.grad
            w2 -= LR * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
    np.testing.assert_allclose(_losses("clamp"), losses, rtol=1e-4)
    np.testing.assert_allclose(_losses("MyReLU"), losses, rtol=1e-4)


def test_two_layer_net_gradients_reset_with_none():
    xa, ya, w1a, w2a = _net_data()
    x, y = Variable(xa[:4]), Variable(ya[:4])
    w1 = Variable(w1a, requires_grad=True)
    w2 = Variable(w2a, requires_grad=True)

    def loss():
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()

    loss().backward()
    first = w2.grad.numpy().copy()
    loss().backward()
    np.testing.assert_allclose(w2.grad.numpy(), 2 * first, rtol=1e-6)
    w2.grad = None
    loss().backward()
    np.testing.assert_allclose(w2.grad.numpy(), first, rtol=1e-6)


# --- custom Function -----------------------------------------------------------------------


def test_custom_relu_function():
    x = Variable(np.array([-1.0, 2.0, -3.0, 4.0, 0.5]), requires_grad=True)
    y = MyReLU.apply(x)
    assert type(y.grad_fn).__name__ == "MyReLUBackward"
    assert y.requires_grad and not y.is_leaf
    np.testing.assert_array_equal(y.detach().numpy(), np.maximum(x.detach().numpy(), 0))
    (y * Variable(np.arange(5.0))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(x.detach().numpy() > 0, np.arange(5.0), 0.0))


def test_custom_relu_gradcheck():
    x = Variable(np.array([-1.0, 2.0, -3.0, 4.0, 0.5]), requires_grad=True)
    assert engine.gradcheck(MyReLU.apply, [x])


def test_custom_function_without_grad_records_nothing():
    x = Variable(np.array([-1.0, 2.0]))
    y = MyReLU.apply(x)
    assert y.grad_fn is None and not y.requires_grad
    with no_grad():
        z = MyReLU.apply(Variable(np.array([1.0]), requires_grad=True))
    assert z.grad_fn is None and not z.requires_grad


class MulAdd(Function):
    """out = a * b + b, with needs_input_grad deciding which gradients are computed."""

    calls = []

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + b

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        MulAdd.calls.append(ctx.needs_input_grad)
        grad_a = grad_output * b if ctx.needs_input_grad[0] else None
        grad_b = grad_output * (a + 1) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


def test_custom_function_two_inputs_needs_input_grad():
    rng = np.random.default_rng(6)
    a = Variable(rng.standard_normal(4), requires_grad=True)
    b = Variable(rng.standard_normal(4), requires_grad=True)
    MulAdd.calls.clear()
    out = MulAdd.apply(a, b)
    assert type(out.grad_fn).__name__ == "MulAddBackward"
    out.sum().backward()
    assert MulAdd.calls == [(True, True)]
    np.testing.assert_allclose(a.grad.numpy(), b.detach().numpy())
    np.testing.assert_allclose(b.grad.numpy(), a.detach().numpy() + 1)
    assert engine.gradcheck(MulAdd.apply, [a, b])

    c = Variable(rng.standard_normal(4))  # needs no gradient
    MulAdd.calls.clear()
    MulAdd.apply(c, b).sum().backward()
    assert MulAdd.calls == [(False, True)]
    assert c.grad is None


def test_custom_function_broadcast_gradient_is_summed():
    a = Variable(np.ones((3, 4)), requires_grad=True)
    b = Variable(np.arange(4.0), requires_grad=True)
    MulAdd.apply(a, b).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, 6.0))


def test_custom_function_saved_tensors_freed_after_backward():
    x = Variable(np.array([-1.0, 2.0]), requires_grad=True)
    y = MyReLU.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0])
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


@needs_torch
def test_custom_relu_matches_torch_custom_function():
    TorchReLU = my_relu(torch.autograd.Function)

    rng = np.random.default_rng(7)
    xa, wa = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    x, w = Variable(xa), Variable(wa, requires_grad=True)
    tw = torch.tensor(wa, requires_grad=True)
    (MyReLU.apply(x.mm(w)) ** 2).sum().backward()
    (TorchReLU.apply(torch.tensor(xa).mm(tw)) ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


class Scale(Function):
    """A Function with a non-Variable argument: it gets no gradient (None)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor, None


def test_custom_function_with_python_argument():
    x = Variable(np.array([1.0, 2.0]), requires_grad=True)
    y = Scale.apply(x, 3.0)
    (g,) = grad(y.sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])
    (Scale.apply(x, 2.0) ** 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 8 * x.detach().numpy())
