"""`engine.optim.sgd_in_place`: SGD's step on bare arrays, written in place (the server's resident update):
the same values as the engine's `SGD` bit for bit, and as `torch.optim.SGD` (the oracle) to rounding."""

from __future__ import annotations

import numpy
import pytest

import engine
from engine.optim import SGD, sgd_in_place

OPTIONS = [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.2, "weight_decay": 0.01},
    {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.1, "nesterov": True},
    {"lr": 0.01, "momentum": 0.5, "maximize": True, "weight_decay": 0.01},
    {"lr": 0.3, "maximize": True},
]


def _stepped(options, dtype, steps=4):
    """(the engine's SGD parameter, sgd_in_place's array, its state, the gradients) after `steps` steps."""
    rng = numpy.random.default_rng(3)
    w = rng.standard_normal((7, 5)).astype(dtype)
    grads = [rng.standard_normal((7, 5)).astype(dtype) for _ in range(steps)]
    param = engine.tensor(w.copy(), requires_grad=True)
    optimizer = SGD([param], **options)
    group = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
    array, state = w.copy(), {}
    for grad in grads:
        param.grad = engine.tensor(grad)
        optimizer.step()
        before = grad.copy()
        sgd_in_place(array, grad, state, group)
        numpy.testing.assert_array_equal(grad, before)  # the gradient is only read
    return param, optimizer, array, state, w, grads


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_equals_the_engines_sgd_bit_for_bit(options, dtype):
    param, optimizer, array, state, _, _ = _stepped(options, dtype)
    numpy.testing.assert_array_equal(array, param.detach().numpy())
    assert array.dtype == dtype
    if options.get("momentum"):
        expected = optimizer.state[param]["momentum_buffer"].numpy()
        numpy.testing.assert_array_equal(state["momentum_buffer"], expected)
    else:
        assert state == {}


@pytest.mark.parametrize("options", OPTIONS)
def test_equals_torch_optim_sgd(options):
    torch = pytest.importorskip("torch")
    _, _, array, _, w, grads = _stepped(options, numpy.float64)
    param = torch.tensor(w.copy(), requires_grad=True)
    optimizer = torch.optim.SGD([param], **options)
    for grad in grads:
        param.grad = torch.tensor(grad)
        optimizer.step()
    numpy.testing.assert_allclose(array, param.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_writes_the_array_it_is_given():
    array = numpy.ones(3)
    held = array
    sgd_in_place(array, numpy.full(3, 2.0), {}, {k: v for k, v in SGD([engine.tensor(array)]).defaults.items()})
    assert held is array
    numpy.testing.assert_array_equal(array, 1.0 - 1e-3 * 2.0)
