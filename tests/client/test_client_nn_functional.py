"""`torch.nn.functional` (issue 22) through the engine, the embedded client and a live server (the
`torch_like` fixture), against PyTorch: each function's values and gradients across its keyword
options (tests/nn_functional_cases.py), its errors, dropout's statistics, and a softmax-regression
program written from scratch, printed line by line as PyTorch prints it."""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest

import client
import engine
from tests import modern_programs as programs
from tests import nn_programs
from tests.nn_functional_cases import CASES

TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-5)}


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def values(v):
    return None if v is None else np.asarray(v.detach().numpy())


def run(m, case, dtype, names=None):
    """(values of every output, gradients of the inputs that require grad) of `case` on module `m`; its first
    output's grad_fn name appended to `names`."""
    tensors = []
    for i, array in enumerate(case.arrays):
        if array.dtype.kind == "f":
            tensors.append(m.tensor(array.astype(dtype), requires_grad=i not in case.data))
        else:
            tensors.append(m.tensor(array))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broadcasting and implicit-dim warnings, as PyTorch gives them
        out = case.call(m, *tensors)
    outs = out if isinstance(out, tuple) else (out,)
    grads, node = [], outs[0].grad_fn
    if names is not None:
        names.append(None if node is None else node.name())
    if outs[0].requires_grad:
        cotangent = np.random.default_rng(0).standard_normal(tuple(outs[0].shape)).astype(dtype)
        (outs[0] * m.tensor(cotangent)).sum().backward()
        grads = [values(t.grad) for t in tensors if t.requires_grad]
    return [values(o) for o in outs], grads


# the cases whose grad_fn is not named as PyTorch's (see engine.nn.node_names): PyTorch's CPU attention kernel
# and its view after a bias-free bilinear
NAMED_OTHERWISE = ("scaled_dot_product_attention", "bilinear-no-bias")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_values_and_gradients_match_torch(torch_like, oracle, case, dtype):
    got_name, want_name = [], []
    got_values, got_grads = run(torch_like, case, dtype, got_name)
    want_values, want_grads = run(oracle, case, dtype, want_name)
    if not case.id.startswith(NAMED_OTHERWISE):  # grad_fn names, PyTorch's (engine.grad_fn_names)
        assert got_name == want_name
    assert len(got_values) == len(want_values) and len(got_grads) == len(want_grads)
    for i, (got, want) in enumerate(zip(got_values, want_values)):
        assert got.shape == want.shape, f"output {i}: shape {got.shape} vs torch {want.shape}"
        assert got.dtype == want.dtype, f"output {i}: dtype {got.dtype} vs torch {want.dtype}"
        np.testing.assert_allclose(got, want, **TOLERANCE[dtype], err_msg=f"output {i}")
    for i, (got, want) in enumerate(zip(got_grads, want_grads)):
        assert got is not None and got.dtype == want.dtype, f"gradient {i}"
        np.testing.assert_allclose(got, want, **TOLERANCE[dtype], err_msg=f"gradient {i}")


# --- errors -------------------------------------------------------------------------------------

LOGITS = np.zeros((3, 5))
ERRORS = {
    "float target": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor([0.0, 1.0, 2.0])),
        RuntimeError,
        "expected target dtype to be Long or Byte, but got Float",
    ),
    "int32 target": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor(np.array([0, 1, 2], np.int32))),
        RuntimeError,
        "expected target dtype to be Long or Byte, but got Int",
    ),
    "batch mismatch": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor([0, 1])),
        ValueError,
        r"Expected input batch_size \(3\) to match target batch_size \(2\)\.",
    ),
    "probabilities of integers": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.zeros(3, 5, dtype=m.long)),
        RuntimeError,
        "Expected floating point type for target with class probabilities, got Long",
    ),
    "spatial target shape": (
        lambda m: m.nn.functional.cross_entropy(m.zeros(2, 5, 4), m.zeros(2, 3, dtype=m.long)),
        RuntimeError,
        r"Expected target size \[2, 4\], got \[2, 3\]",
    ),
    "class weights": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor([0, 1, 2]), weight=m.ones(4)),
        RuntimeError,
        "weight tensor should be defined either for all 5 classes or no classes but got weight tensor of shape: "
        r"\[4\]",
    ),
    "label smoothing": (
        lambda m: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor([0, 1, 2]), label_smoothing=1.5),
        RuntimeError,
        r"label_smoothing must be between 0\.0 and 1\.0\. Got: 1\.5",
    ),
    "reduction": (
        lambda m: m.nn.functional.mse_loss(m.zeros(2), m.zeros(2), reduction="avg"),
        ValueError,
        "avg is not a valid value for reduction",
    ),
    "one_hot of floats": (
        lambda m: m.nn.functional.one_hot(m.tensor([1.0, 2.0])),
        RuntimeError,
        "one_hot is only applicable to index tensor of type LongTensor.",
    ),
    "one_hot too large": (
        lambda m: m.nn.functional.one_hot(m.tensor([1, 5]), 3),
        RuntimeError,
        "Class values must be smaller than num_classes.",
    ),
    "bce sizes": (
        lambda m: m.nn.functional.binary_cross_entropy(m.rand(3), m.rand(3, 1)),
        ValueError,
        "Using a target size .* that is different to the input size .* Please ensure they have the same size.",
    ),
    "bce with logits sizes": (
        lambda m: m.nn.functional.binary_cross_entropy_with_logits(m.rand(3), m.rand(3, 1)),
        ValueError,
        r"Target size .*\[3, 1\].* must be the same as input size .*\[3\]",
    ),
    "embedding of floats": (
        lambda m: m.nn.functional.embedding(m.tensor([1.0, 2.0]), m.ones(4, 3)),
        RuntimeError,
        "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
        "but got .*FloatTensor instead",
    ),
    "layer_norm shape": (
        lambda m: m.nn.functional.layer_norm(m.zeros(2, 3), (4,)),
        RuntimeError,
        r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\], but got input of size\s?\[2, 3\]",
    ),
    "batch_norm of one value": (
        lambda m: m.nn.functional.batch_norm(m.zeros(1, 3), m.zeros(3), m.ones(3), training=True),
        ValueError,
        "Expected more than 1 value per channel when training",
    ),
    "batch_norm eval without stats": (
        lambda m: m.nn.functional.batch_norm(m.zeros(2, 3), None, None),
        RuntimeError,
        "running_mean must be defined in evaluation mode",
    ),
    "dropout probability": (
        lambda m: m.nn.functional.dropout(m.zeros(2), 1.5),
        ValueError,
        "dropout probability has to be between 0 and 1, but got 1.5",
    ),
    "pad length": (
        lambda m: m.nn.functional.pad(m.zeros(2, 3), (1,)),
        RuntimeError,
        "Padding length must be divisible by 2",
    ),
    "pad too long": (
        lambda m: m.nn.functional.pad(m.zeros(2, 3), (1, 1, 1, 1, 1, 1)),
        RuntimeError,
        "Padding length should be less than or equal to two times the input dimension but got padding length 6 "
        "and input of dimension 2",
    ),
    "gelu approximation": (
        lambda m: m.nn.functional.gelu(m.zeros(2), approximate="fast"),
        RuntimeError,
        "approximate argument must be either none or tanh.",
    ),
    "smooth_l1 beta": (
        lambda m: m.nn.functional.smooth_l1_loss(m.zeros(2), m.zeros(2), beta=-1.0),
        RuntimeError,
        "smooth_l1_loss does not support negative values for beta.",
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_like_torch(torch_like, oracle, name):
    call, kind, message = ERRORS[name]
    with pytest.raises(kind, match=message):
        call(oracle)
    with pytest.raises(kind, match=message):
        call(torch_like)


def test_warnings_like_torch(torch_like, oracle):
    for m in (oracle, torch_like):
        with pytest.warns(UserWarning, match="Implicit dimension choice for softmax has been deprecated"):
            m.nn.functional.softmax(m.zeros(2, 3))
        with pytest.warns(UserWarning, match=r"Using a target size .* that is different to the input size"):
            m.nn.functional.mse_loss(m.zeros(2, 3), m.zeros(3))
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            loss = m.nn.functional.l1_loss(m.ones(2, 3), m.zeros(2, 3), size_average=False)
        assert loss.item() == 6.0


@pytest.mark.parametrize("weighted", [False, True])
def test_every_target_ignored_gives_nan_like_torch(torch_like, oracle, weighted):
    for m in (torch_like, oracle):
        logits = m.tensor(LOGITS, requires_grad=True)
        weight = m.ones(5, dtype=m.float64) if weighted else None
        loss = m.nn.functional.cross_entropy(logits, m.tensor([-100, -100, -100]), weight=weight, label_smoothing=0.1)
        assert np.isnan(loss.item())


def test_unsupported_options_say_so(torch_like):
    F = torch_like.nn.functional
    with pytest.raises(NotImplementedError, match="interpolate: mode 'trilinear' is not supported"):
        F.interpolate(torch_like.zeros(1, 1, 2, 2, 3), scale_factor=2, mode="trilinear")
    with pytest.raises(ValueError, match="Anti-alias option is restricted to bilinear, bicubic, and lanczos modes"):
        F.interpolate(torch_like.zeros(1, 1, 2, 3), scale_factor=2, mode="nearest", antialias=True)
    with pytest.raises(NotImplementedError, match="sparse"):
        F.embedding(torch_like.tensor([1]), torch_like.ones(3, 2), sparse=True)
    with pytest.raises(TypeError, match="generator must be a Generator"):
        F.dropout(torch_like.ones(3), generator=object())


# --- dropout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_dropout_zeroes_a_fraction_p_and_scales_the_rest(torch_like, p):
    torch_like.manual_seed(0)
    x = torch_like.ones(200, 50, requires_grad=True)
    out = torch_like.nn.functional.dropout(x, p, generator=None)
    out.sum().backward()
    y, g = values(out), values(x.grad)
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / (1 - p), rtol=1e-6)
    np.testing.assert_array_equal(g, y)  # d(x * mask / (1 - p)) / dx is the mask / (1 - p)
    assert abs((~kept).mean() - p) < 0.03
    torch_like.manual_seed(0)
    again = values(torch_like.nn.functional.dropout(torch_like.ones(200, 50), p))
    np.testing.assert_array_equal(again, y)  # manual_seed decides the draws
    assert torch_like.nn.functional.dropout(x, 1.0).sum().item() == 0.0


def test_inplace_activation_changes_its_input_like_torch(torch_like, oracle):
    for m in (torch_like, oracle):
        h = m.tensor([-1.0, 2.0], requires_grad=True) * 1
        out = m.nn.functional.relu(h, inplace=True)
        assert out is h and values(h).tolist() == [0.0, 2.0]
        with pytest.raises(RuntimeError, match="leaf"):
            m.nn.functional.relu(m.ones(2, requires_grad=True), inplace=True)


# --- one definition, every mode -----------------------------------------------------------------


def test_client_functional_is_the_engines_functions(oracle):
    import client.nn.functional as client_functional

    for name in engine.nn.functional.__all__:
        assert getattr(client_functional, name) is getattr(engine.nn.functional, name)
        assert callable(getattr(oracle.nn.functional, name)), f"torch.nn.functional has no {name}"
    assert client.nn.functional.cross_entropy is engine.nn.functional.cross_entropy


def test_a_remote_training_step_is_one_request(server):
    with client.connect(server.url) as session:
        w = client.zeros(2, 3, requires_grad=True)
        x, y = client.randn(8, 2), client.tensor([0, 1, 2, 0, 1, 2, 0, 1])
        loss = client.nn.functional.cross_entropy(
            client.nn.functional.linear(x, w.t()), y, label_smoothing=0.1, ignore_index=2
        )
        before = dict(session.stats)
        loss.backward()
        assert {k: v - before.get(k, 0) for k, v in session.stats.items()} == {"/backward": 1}
        assert w.grad.shape == (2, 3) and np.isfinite(loss.item())


# --- a program written from scratch -------------------------------------------------------------


def test_softmax_regression_prints_what_torch_prints(torch_like, oracle):
    ours, theirs = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(ours):
        nn_programs.softmax_regression(torch_like)
    with contextlib.redirect_stdout(theirs):
        nn_programs.softmax_regression(programs.with_numpy_draws(oracle))
    got, want = ours.getvalue().splitlines(), theirs.getvalue().splitlines()
    assert len(want) == 7 and got == want
