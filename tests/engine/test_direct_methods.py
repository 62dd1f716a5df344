"""A plain op method call (`x.mm(w)`, `x.tanh()`, `x.sum()`, `x.clamp(min=0)`) goes straight to the op's
`apply_op` (`engine.eager.direct_methods`); every other call takes the op function. Both must give the same
values, nodes, dtypes and errors, under autocast too."""

import sys

import numpy as np
import pytest

import engine


def _pair(dtype=np.float32):
    rng = np.random.default_rng(0)
    x = engine.tensor(rng.standard_normal((4, 3)).astype(dtype), requires_grad=True)
    w = engine.tensor(rng.standard_normal((3, 5)).astype(dtype), requires_grad=True)
    return x, w


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plain_method_calls_equal_the_op_functions(dtype):
    x, w = _pair(dtype)
    cases = [
        (x.mm(w), engine.mm(x, w)),
        (x.tanh(), engine.tanh(x)),
        (x.pow(2), engine.pow(x, 2)),
        (x.pow(x * 0 + 3), engine.pow(x, x * 0 + 3)),
        (x.sum(), engine.sum(x)),
        (x.clamp(min=0), engine.clamp(x, min=0)),
        (x.clamp(-0.5, 0.5), engine.clamp(x, -0.5, 0.5)),
        (x.exp(), engine.exp(x)),
    ]
    for method, function in cases:
        assert method.dtype == function.dtype and method.shape == function.shape
        np.testing.assert_array_equal(method.detach().numpy(), function.detach().numpy())
        assert method.grad_fn.name() == function.grad_fn.name()
    loss = x.mm(w).tanh().clamp(min=-0.5).pow(2).sum()
    gx, gw = engine.grad(loss, [x, w])
    ref = engine.sum(engine.pow(engine.clamp(engine.tanh(engine.mm(x, w)), min=-0.5), 2))
    rx, rw = engine.grad(ref, [x, w])
    np.testing.assert_array_equal(gx.numpy(), rx.numpy())
    np.testing.assert_array_equal(gw.numpy(), rw.numpy())


def test_other_calls_keep_the_functions_behaviour():
    x, w = _pair()
    with engine.autocast("cpu", dtype=engine.float16):  # mm casts under autocast, tanh does not
        assert x.mm(w).dtype == engine.float16 and x.tanh().dtype == engine.float32
    assert x.mm(mat2=w).shape == (4, 5)
    assert x.sum(1).shape == (4,) and x.sum(dim=0, keepdim=True).shape == (1, 3)
    assert x.clamp(min=engine.zeros(4, 3)).grad_fn.name() == "WhereBackward0"
    ints = engine.tensor(np.arange(3))
    assert ints.pow(2).dtype == engine.int64 and ints.sum().dtype == engine.int64
    for method, function in [
        (lambda: x.mm(w, 1), lambda: engine.mm(x, w, 1)),
        (lambda: x.tanh(1), lambda: engine.tanh(x, 1)),
        (lambda: x.mm(), lambda: engine.mm(x)),
        (lambda: x.mm(x), lambda: engine.mm(x, x)),
        (lambda: x.clamp(min=True), lambda: engine.clamp(x, min=True)),
    ]:
        with pytest.raises(Exception) as got:
            method()
        with pytest.raises(type(got.value)) as expected:
            function()
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        x.clamp()


def test_reflected_operators_and_transposes():
    x, _ = _pair()
    assert (1 - x).grad_fn.name() == "RsubBackward1" and (2 / x).grad_fn.name() == "MulBackward0"
    assert (2**x).grad_fn.name() == "PowBackward2" and (1 + x).grad_fn.name() == "AddBackward0"
    np.testing.assert_array_equal((1 - x).detach().numpy(), 1 - x.detach().numpy())
    base = engine.tensor(np.ones((2, 3), np.float32))
    view = base.T  # a view sharing memory and version counter
    base.add_(1)
    assert view._version == base._version == 1 and float(view[0, 0]) == 2.0


def test_a_plain_method_call_is_two_frames_above_apply_op():
    x, w = _pair()
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        x.mm(w)
        x.tanh()
    finally:
        sys.setprofile(None)
    layers = ("mm", "tanh", "direct", "cast_then_call", "fn", "coerce", "apply_op")  # (not what the forwards call)
    assert [name for name in called if name in layers] == ["mm", "direct", "apply_op", "tanh", "direct", "apply_op"]
