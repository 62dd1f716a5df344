"""Convolution and pooling on the engine (issue 25): `torch.nn.functional`'s conv and pool functions
against PyTorch's, values and the gradients of every input, over a grid of strides, paddings,
dilations, groups and kernel shapes (tests/conv_programs.py) in float64 and float32; gradcheck and
gradgradcheck of the registry ops with square kernels (the registry's own samples are kept small for
the memory sweep); the shape errors of hostile attributes; the work the budgets count; and a
LeNet-style CNN trained by SGD, equal to PyTorch's run of the same program."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from engine import costs
from engine.attrs import AttrError
from engine.registry import OPS
from engine.shapes import ShapeError
from tests import conv_programs as programs

F = engine.nn.functional
# float64: tight; float32: torch.testing's float32 tolerance (rtol 1.3e-6, atol 1e-5)
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=1.3e-6, atol=1e-5)}


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", programs.CASES, ids=[f"{c.function}-{c.id}" for c in programs.CASES])
def test_values_and_gradients_match_torch(torch, case, dtype):
    got, got_grads = programs.run_case(engine, case, dtype)
    want, want_grads = programs.run_case(torch, case, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE[dtype], err_msg="output")
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **TOLERANCE[dtype], err_msg=f"gradient of input {i}")


@pytest.mark.parametrize(
    "kwargs", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}]
)
def test_max_pool_indices_and_gradients_match_torch_with_ties_and_nans(torch, kwargs):
    x = np.random.default_rng(3).integers(-2, 3, (2, 3, 7, 8)).astype(np.float64)  # ties: the first maximum
    x[0, 0, 1, 1:3] = x[1, 2, 4, 4] = np.nan  # nan wins a window (the last nan, in PyTorch's scan)
    values, indices = F.max_pool2d(engine.tensor(x), return_indices=True, **kwargs)
    want_values, want_indices = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kwargs)
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())
    ours, theirs = engine.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    F.max_pool2d(ours, **kwargs).sum().backward()
    torch.nn.functional.max_pool2d(theirs, **kwargs).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


# --- gradcheck and gradgradcheck (float64) ------------------------------------------------------

CHECKED = [
    ("conv2d", ((2, 2, 5, 4), (3, 2, 3, 3), (3,)), {"stride": 2, "padding": 1}),
    ("conv2d", ((1, 4, 4, 5), (4, 2, 2, 3)), {"groups": 2, "padding": "same", "dilation": (2, 1)}),
    ("conv1d", ((2, 2, 6), (2, 2, 3), (2,)), {"dilation": 2, "padding": 1}),
    ("max_pool2d", ((1, 2, 5, 6),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d", ((1, 2, 5, 6),), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ("avg_pool1d", ((1, 2, 7),), {"kernel_size": 2, "ceil_mode": True}),
    ("adaptive_avg_pool2d", ((1, 2, 5, 7),), {"output_size": (2, 3)}),
    ("im2col", ((1, 2, 4, 5),), {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}),
    ("col2im", ((1, 8, 6),), {"output_size": (3, 4), "kernel_size": 2, "stride": (1, 2), "padding": (0, 1)}),
]


def _checked_call(name, count, attrs):
    op = OPS[name]
    if op.variadic:
        return lambda *vs: getattr(engine, name)(list(vs), **attrs)
    return lambda *vs: getattr(engine, name)(*vs, **attrs)


@pytest.mark.parametrize(("name", "shapes", "attrs"), CHECKED, ids=[f"{c[0]}-{i}" for i, c in enumerate(CHECKED)])
def test_gradcheck_and_gradgradcheck(name, shapes, attrs):
    rng = np.random.default_rng(7)
    inputs = [engine.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    call = _checked_call(name, len(inputs), attrs)
    assert engine.gradcheck(call, inputs)
    assert engine.gradgradcheck(call, inputs)


def test_gradcheck_catches_a_wrong_col2im(monkeypatch):
    # im2col's gradient is col2im: a col2im that drops one tap fails im2col's gradcheck
    op = OPS["col2im"]
    forward = op.forward

    def dropping(xp, cols, **attrs):
        cols = cols.copy()
        cols[:, 0] = 0
        return forward(xp, cols, **attrs)

    monkeypatch.setattr(op, "forward", dropping)
    x = engine.tensor(np.random.default_rng(0).standard_normal((1, 1, 4, 4)), requires_grad=True)
    with pytest.raises(engine.GradcheckError):
        engine.gradcheck(lambda v: engine.im2col(v, kernel_size=2), [x])


# --- hostile attributes -------------------------------------------------------------------------

X, W = np.zeros((1, 4, 6, 6)), np.zeros((2, 4, 3, 3))


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), stride=0), AttrError, "stride"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), stride=-1), AttrError, "stride"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), padding=-1), AttrError, "padding"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), padding="full"), AttrError, "padding"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), dilation=2**40), ShapeError, "Kernel size"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(np.zeros((2, 4, 7, 3)))), ShapeError, "Kernel size"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(np.zeros((2, 3, 3, 3))), groups=3), ShapeError, "groups"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(np.zeros((3, 2, 3, 3))), groups=2), ShapeError, "divisible"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), groups=0), ShapeError, "groups"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), stride=2, padding="same"), ShapeError, "strided"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), stride=(1, 2, 3)), ShapeError, "stride"),
        (lambda: F.conv2d(engine.tensor(X), engine.tensor(W), engine.tensor(np.zeros(3))), ShapeError, "bias"),
        (lambda: F.conv2d(engine.tensor(X[0, 0]), engine.tensor(W)), ShapeError, "input"),
        (lambda: F.max_pool2d(engine.tensor(X), kernel_size=0), AttrError, "kernel_size"),
        (lambda: F.max_pool2d(engine.tensor(X), kernel_size=2, padding=2), ShapeError, "half"),
        (lambda: F.max_pool2d(engine.tensor(X), kernel_size=7), ShapeError, "Output size is too small"),
        (lambda: F.avg_pool2d(engine.tensor(X), kernel_size=2, divisor_override=0), ShapeError, "divisor"),
        (lambda: F.max_pool2d(engine.tensor(X.astype(np.int64)), kernel_size=2), ShapeError, "floating"),
        (lambda: F.fold(engine.tensor(np.zeros((1, 8, 5))), (3, 3), 2), ShapeError, "sliding blocks"),
    ],
)
def test_hostile_attributes_are_refused_with_a_message(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()


def test_shape_rules_refuse_what_the_forward_refuses():
    conv = OPS["conv2d"]
    with pytest.raises(ShapeError, match="Kernel size"):
        conv.infer([(1, 4, 6, 6), (2, 4, 3, 3)], [np.float32] * 2, conv.check_attrs({"dilation": 2**62}))
    assert conv.infer([(1, 4, 6, 6), (2, 4, 3, 3)], [np.float32] * 2, conv.check_attrs({"padding": "same"})) == (
        (1, 2, 6, 6),
        np.float32,
    )
    assert conv.arity_error(1, conv.check_attrs({})) is not None and conv.arity_error(4, conv.check_attrs({}))
    assert conv.arity_error(3, conv.check_attrs({})) is None


# --- cost -----------------------------------------------------------------------------------------


def test_a_convolutions_work_is_its_multiply_adds_on_the_blas_kernel():
    conv = OPS["conv2d"]
    attrs = conv.check_attrs({"stride": 2, "padding": 1, "groups": 2})
    shapes = [(8, 4, 32, 32), (6, 2, 3, 3), (6,)]
    out = conv.infer(shapes, [np.float32] * 3, attrs)[0]
    assert out == (8, 6, 16, 16)
    macs = 8 * 6 * (16 * 16) * (4 // 2) * 9
    _, work = conv.cost(shapes, out, attrs, ["float32"])
    assert 2 * macs <= work <= 2 * macs + costs.ELEMENT_OP * (8 * 4 * 9 * 256 + math.prod(out))
    _, half = conv.cost(shapes, out, attrs, ["float16"])
    assert half == pytest.approx(
        work * costs.FACTORS.blas_float16, rel=1e-6
    )  # "blas": NumPy's float16 products are slow


# --- a CNN trained by SGD -------------------------------------------------------------------------


def torch_state(torch, seed=0):
    torch.manual_seed(seed)
    model = programs.lenet(torch).double()
    return {name: value.detach().numpy().copy() for name, value in model.state_dict().items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_lenet_trains_as_in_torch(torch, dtype):
    state = torch_state(torch)
    images, labels = programs.lenet_data()
    losses, weights = programs.train_lenet(engine, state, images, labels, dtype)
    want_losses, want_weights = programs.train_lenet(torch, state, images, labels, dtype)
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses, want_losses, **tolerance)
    assert losses[-1] < losses[0]  # it learns
    for name, value in want_weights.items():
        np.testing.assert_allclose(weights[name], value, **tolerance, err_msg=name)


def test_modules_initialise_as_pytorch_does():
    conv = engine.nn.Conv2d(3, 8, (3, 5), groups=1)
    assert conv.weight.shape == (8, 3, 3, 5) and conv.bias.shape == (8,)
    fan_in = 3 * 15
    weight = conv.weight.detach().numpy()
    assert np.abs(weight).max() <= 1 / math.sqrt(fan_in) and np.abs(weight).max() > 0.8 / math.sqrt(fan_in)
    assert np.abs(conv.bias.detach().numpy()).max() <= 1 / math.sqrt(fan_in)
    assert repr(conv) == "Conv2d(3, 8, kernel_size=(3, 5), stride=(1, 1))"
    assert repr(engine.nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert engine.nn.Flatten()(engine.zeros(2, 3, 4)).shape == (2, 12)


def test_the_top_level_functions_take_pytorchs_positional_form():
    """`engine.conv2d(input, weight, bias=None, stride=1, ...)` as `torch.conv2d`; the list form stays."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    want = torch.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), 2, 1).numpy()
    ex, ew, eb = engine.tensor(x), engine.tensor(w), engine.tensor(b)
    for got in (
        engine.conv2d(ex, ew, eb, 2, 1),
        engine.conv2d(input=ex, weight=ew, bias=eb, stride=2, padding=1),
        engine.conv2d([ex, ew, eb], stride=2, padding=1),
    ):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    no_bias = torch.conv1d(torch.tensor(x[:, :, 0]), torch.tensor(w[:, :, 0]), None, 1, 1).numpy()
    np.testing.assert_allclose(engine.conv1d(ex[:, :, 0], ew[:, :, 0], None, 1, 1).numpy(), no_bias, rtol=1e-12)
    with pytest.raises(ValueError, match=r"takes 2 or 3 inputs \(input, weight\[, bias\]\), got 1"):
        engine.conv2d(ex)
