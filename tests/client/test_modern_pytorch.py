"""Today's PyTorch surface (issue 13, section 2), each feature through the engine, the embedded
client and a live server (the `torch_like` fixture), checked against PyTorch where numbers are
involved; and current tutorial-style programs (tests/modern_programs.py) run with only the
module changed."""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest
from client_testkit import ROOT

import client
import engine
from engine import backend
from engine.modern import ALIASES, FUNCTION_ALIASES
from tests import modern_programs as programs


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def values(v):
    return np.asarray(v.detach().numpy() if hasattr(v, "detach") else v)


# --- dtypes ---------------------------------------------------------------------------------

DTYPE_NAMES = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "long": "int64",
    "int64": "int64",
    "int": "int32",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}


def test_dtype_constants_compare_with_variables_dtypes(torch_like, oracle):
    for name, numpy_name in DTYPE_NAMES.items():
        constant = getattr(torch_like, name)
        assert constant == np.dtype(numpy_name) and str(getattr(oracle, name)) == f"torch.{numpy_name}", name
        made = torch_like.zeros(2, dtype=constant)
        assert made.dtype == constant and made.dtype == getattr(torch_like, numpy_name)
    x = torch_like.tensor([1.5, 2.5])
    assert x.dtype == torch_like.float32 and x.dtype != torch_like.float64
    assert torch_like.tensor([1, 2]).dtype == torch_like.long
    assert torch_like.get_default_dtype() == torch_like.float32
    assert torch_like.is_floating_point(x) and not torch_like.tensor([1]).is_floating_point()


@pytest.mark.parametrize("target", ["float64", "int64", "float16", "bool", "int32"])
def test_to_and_type_cast_like_torch(torch_like, oracle, target):
    data = [[1.5, -2.0], [0.0, 3.25]]
    ours, theirs = torch_like.tensor(data), oracle.tensor(data)
    for convert in (
        lambda t, m: t.to(getattr(m, target)),
        lambda t, m: t.type(getattr(m, target)),
        lambda t, m: t.to("cpu", getattr(m, target)),
        lambda t, m: t.to(dtype=getattr(m, target)),
    ):
        got, want = convert(ours, torch_like), convert(theirs, oracle)
        assert str(want.dtype) == str(got.dtype)
        np.testing.assert_array_equal(values(got), want.numpy())
    assert ours.to(torch_like.float32) is ours and ours.to(ours) is ours


def test_cast_with_to_is_differentiable(torch_like, oracle):
    x, t = torch_like.tensor([1.0, 2.0], requires_grad=True), oracle.tensor([1.0, 2.0], requires_grad=True)
    (x.to(torch_like.float64) ** 2).sum().backward()
    (t.to(oracle.float64) ** 2).sum().backward()
    assert x.grad.dtype == torch_like.float32
    np.testing.assert_allclose(values(x.grad), t.grad.numpy())


CONSTRUCTORS = {
    "zeros": lambda m, **k: m.zeros(2, 3, **k),
    "zeros size=": lambda m, **k: m.zeros(size=(2, 3), **k),
    "ones": lambda m, **k: m.ones((2, 3), **k),
    "empty": lambda m, **k: m.empty(2, 3, **k),
    "full": lambda m, **k: m.full((2, 3), 1.5, **k),
    "randn size=": lambda m, **k: m.randn(size=(2, 3), **k),
    "rand": lambda m, **k: m.rand(2, 3, **k),
    "tensor": lambda m, **k: m.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], **k),
    "arange": lambda m, **k: m.arange(0, 6, 1, **k),
    "linspace": lambda m, **k: m.linspace(-1, 1, 6, **k),
    "eye": lambda m, **k: m.eye(2, 3, **k),
    "normal": lambda m, **k: m.normal(0.0, 1.0, (2, 3), **k),
    "zeros_like": lambda m, **k: m.zeros_like(m.ones(2, 3), **k),
    "ones_like": lambda m, **k: m.ones_like(m.ones(2, 3), **k),
    "full_like": lambda m, **k: m.full_like(m.ones(2, 3), 7.0, **k),
    "rand_like": lambda m, **k: m.rand_like(m.ones(2, 3), **k),
    "randn_like": lambda m, **k: m.randn_like(m.ones(2, 3), **k),
    "empty_like": lambda m, **k: m.empty_like(m.ones(2, 3), **k),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_every_constructor_takes_dtype_device_and_requires_grad(torch_like, name):
    make = CONSTRUCTORS[name]
    v = make(torch_like, dtype=torch_like.float64, device="cpu", requires_grad=True)
    assert v.numel() == 6 and v.dtype == torch_like.float64 and v.requires_grad and v.is_leaf
    default = torch_like.int64 if name == "arange" else torch_like.float32
    assert make(torch_like, device=torch_like.device("cpu")).dtype == default
    (v * v).sum().backward()
    np.testing.assert_allclose(values(v.grad), 2 * values(v))
    if not torch_like.cuda.is_available():
        with pytest.raises(RuntimeError, match="not available"):
            make(torch_like, device="cuda")
    with pytest.raises(RuntimeError, match="floating point"):
        make(torch_like, dtype=torch_like.long, requires_grad=True)


@pytest.mark.parametrize(
    "call",
    [
        "linspace(-3.14, 3.14, 7)",
        "linspace(0, 1, 5, dtype=m.float64)",
        "eye(3)",
        "eye(2, 4)",
        "arange(4.0)",
        "arange(5)",
        "arange(1, 2.5, 0.5)",
        "full((2,), 3)",
        "full((2,), 3.0)",
        "full((), True)",
        "zeros(())",
    ],
)
def test_constructors_match_torch(torch_like, oracle, call):
    got = eval("m." + call, {"m": torch_like})
    want = eval("m." + call, {"m": oracle})
    assert str(want.dtype) == str(got.dtype) and tuple(want.shape) == got.shape
    np.testing.assert_allclose(values(got), want.numpy(), rtol=1e-6, atol=1e-6)


def test_manual_seed_repeats_draws(torch_like):
    torch_like.manual_seed(5)
    first = values(torch_like.randn(4)), values(torch_like.rand(2, 2)), values(torch_like.randint(0, 10, (5,)))
    torch_like.manual_seed(5)
    again = values(torch_like.randn(4)), values(torch_like.rand(2, 2)), values(torch_like.randint(0, 10, (5,)))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert again[2].dtype == np.int64 and ((0 <= again[2]) & (again[2] < 10)).all()


# --- devices --------------------------------------------------------------------------------


def test_devices_map_onto_the_backend(torch_like, oracle):
    cpu = torch_like.device("cpu")
    assert cpu == "cpu" and cpu == oracle.device("cpu").type and str(cpu) == "cpu" and cpu.type == "cpu"
    assert repr(torch_like.device("cuda:0")) == repr(oracle.device("cuda:0"))
    assert torch_like.device("cuda", 0) == torch_like.device("cuda:0") != torch_like.device("cuda")
    with pytest.raises(RuntimeError):
        torch_like.device("tpu")
    on_gpu = torch_like.cuda.is_available()
    remote = torch_like is client and not client.current_session().embedded
    assert on_gpu == (not remote and backend.device == "cuda")  # the server runs with GRADSERVE_DEVICE=cpu
    assert torch_like.accelerator.is_available() == on_gpu
    assert torch_like.accelerator.current_accelerator() == (torch_like.device("cuda") if on_gpu else None)
    x = torch_like.ones(3)
    assert x.device == torch_like.device("cuda" if on_gpu else "cpu") and x.is_cuda == on_gpu
    assert x.to("cpu") is x and x.cpu() is x and x.to(torch_like.device("cpu")) is x
    if not on_gpu:
        for move in (lambda: x.cuda(), lambda: x.to("cuda"), lambda: torch_like.set_default_device("cuda")):
            with pytest.raises(RuntimeError, match="not available"):
                move()
    torch_like.set_default_device("cpu")
    assert torch_like.get_default_device() == "cpu"
    device = "cuda" if torch_like.cuda.is_available() else "cpu"  # the tutorials' idiom
    assert torch_like.zeros(2, device=device).to(device).device == device
    if remote:  # the server's device is asked once per session
        assert client.current_session().stats["/info"] == 1


# --- in-place updates -------------------------------------------------------------------------


def test_sgd_step_in_place_keeps_the_leaf(torch_like, oracle):
    data = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    results = []
    for m in (torch_like, oracle):
        w = m.tensor(data, requires_grad=True)
        ident = id(w)
        for _ in range(3):
            loss = (w * w * w).sum()
            loss.backward()
            with m.no_grad():
                w -= 0.1 * w.grad
                w += 0.01
                w *= 1.5
                w /= 2.0
            w.grad = None
        assert id(w) == ident and w.is_leaf and w.requires_grad and w.grad is None and w.grad_fn is None
        results.append(values(w))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


@pytest.mark.parametrize(
    "call",
    [
        "add_(y)",
        "add_(y, alpha=-0.5)",
        "sub_(y)",
        "sub_(y, alpha=2)",
        "mul_(y)",
        "div_(y)",
        "pow_(2)",
        "neg_()",
        "exp_()",
        "abs_()",
        "sin_()",
        "cos_()",
        "tanh_()",
        "sigmoid_()",
        "relu_()",
        "clamp_(min=0)",
        "clamp_(-0.5, 0.5)",
        "zero_()",
        "fill_(2.5)",
        "copy_(y)",
        "sign_()",
        "sqrt_()",
        "log_()",
    ],
)
def test_in_place_methods_match_torch(torch_like, oracle, call):
    x0 = np.array([0.25, -1.5, 2.0], np.float32)
    y0 = np.array([0.5, 2.0, -3.0], np.float32)
    if call.startswith(("sqrt", "log")):
        x0 = np.abs(x0)
    got = {}
    for m in (torch_like, oracle):
        x, y = m.tensor(x0), m.tensor(y0)
        out = eval("x." + call, {"x": x, "y": y})
        assert out is x
        got[m] = values(x)
    np.testing.assert_allclose(got[torch_like], got[oracle], rtol=1e-6)


def test_in_place_on_a_leaf_that_requires_grad_raises_torchs_error(torch_like, oracle):
    for m in (torch_like, oracle):
        w = m.ones(3, requires_grad=True)
        for update in (lambda w=w: w.__isub__(1), lambda w=w: w.add_(1), lambda w=w: w.zero_(), lambda w=w: w.mul_(2)):
            with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
                update()
        assert values(w).tolist() == [1.0, 1.0, 1.0]


def test_in_place_type_and_shape_errors(torch_like, oracle):
    for m in (torch_like, oracle):
        ints = m.tensor([1, 2])
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            ints += 0.5
        ints *= 3
        assert values(ints).tolist() == [3, 6] and ints.dtype == m.int64
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            m.zeros(3).add_(m.ones(2, 3))


def test_in_place_on_non_leaves_is_recorded(torch_like, oracle):
    data = np.array([0.5, -1.0, 2.0], np.float32)
    grads, names = [], []
    for m in (torch_like, oracle):
        w = m.tensor(data, requires_grad=True)
        h = w * 2
        h.mul_(w)
        h += 1
        h.clamp_(min=0)
        h.sum().backward()
        grads.append(values(w.grad))
        names.append(type(h.grad_fn).__name__)
    np.testing.assert_allclose(grads[0], grads[1])
    assert names[0].startswith("Clamp") and names[1].startswith("Clamp")


def test_in_place_after_use_is_caught_at_backward(torch_like, oracle):
    for m in (torch_like, oracle):
        w = m.tensor([1.0, 2.0], requires_grad=True)
        b = w * 2
        c = b * b
        b.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            c.sum().backward()


def test_grad_zero_and_grad_none(torch_like):
    w = torch_like.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    assert values(w.grad).tolist() == [6.0, 6.0]
    w.grad.zero_()
    (w * w).sum().backward()
    assert values(w.grad).tolist() == [2.0, 4.0]
    w.grad = None
    (w * 5).sum().backward()
    assert values(w.grad).tolist() == [5.0, 5.0]


# --- functions and methods under PyTorch's names ----------------------------------------------


def test_every_registry_op_torch_has_is_there_under_its_name(torch_like, oracle):
    """The check that found the gaps: each name the registry computes that PyTorch spells the
    same (a torch.* function, a Tensor method, an in-place `<name>_`), and each alias."""
    computed = set(engine.OPS) | {m for op in engine.OPS.values() for m in op.methods}
    functions = {n for n in computed if hasattr(oracle, n)} | set(ALIASES) | set(FUNCTION_ALIASES)
    methods = {n for n in computed if hasattr(oracle.Tensor, n)} | set(ALIASES)
    methods |= {"where", "dot", "mv", "outer", "square", "std", "all", "any", "to", "cpu", "item", "tolist", "numpy"}
    missing_functions = sorted(n for n in functions if not callable(getattr(torch_like, n, None)))
    missing_methods = sorted(n for n in methods if not callable(getattr(torch_like.Variable, n, None)))
    assert not missing_functions and not missing_methods
    for alias in (*ALIASES, *FUNCTION_ALIASES):
        assert hasattr(oracle, alias), alias


@pytest.mark.parametrize(
    "call",
    [
        "torch.exp(x)",
        "torch.log(p)",
        "torch.sin(x)",
        "torch.cos(x)",
        "torch.tanh(x)",
        "torch.sigmoid(x)",
        "torch.relu(x)",
        "torch.sqrt(p)",
        "torch.abs(x)",
        "torch.sum(x)",
        "torch.sum(x, dim=0, keepdim=True)",
        "torch.mean(x, 1)",
        "x.mean(dim=0, keepdim=True)",
        "torch.max(x)",
        "torch.max(x, 1).values",
        "torch.max(x, 1).indices",
        "torch.min(x, dim=0)[0]",
        "torch.argmax(x, dim=1)",
        "torch.softmax(x, dim=1)",
        "torch.log_softmax(x, 1)",
        "torch.cat([x, x], dim=0)",
        "torch.stack((x, x), 1)",
        "torch.where(x > 0, x, y)",
        "torch.clamp(x, min=0)",
        "torch.clamp(x, -0.5, 0.5)",
        "torch.reshape(x, (3, 2))",
        "torch.transpose(x, 0, 1)",
        "torch.permute(x, (1, 0))",
        "torch.unsqueeze(x, 0)",
        "torch.squeeze(x.unsqueeze(0))",
        "torch.flatten(x)",
        "torch.matmul(x, y.t())",
        "torch.mm(x, y.t())",
        "torch.pow(x, 2)",
        "torch.maximum(x, y)",
        "torch.minimum(x, y)",
        "torch.norm(x)",
        "torch.var(x)",
        "torch.std(x)",
        "torch.logsumexp(x, 1)",
        "x.pow(3)",
        "x.exp()",
        "x.clamp(min=0)",
        "x.t()",
        "x.view(-1)",
        "x.T",
        "x.mT",
        "x.abs().sum()",
        "torch.dot(x[0], y[0])",
        "torch.mv(x, y[0])",
        "torch.outer(x[0], y[1])",
        "torch.square(x)",
        "torch.multiply(x, y)",
        "torch.subtract(x, y)",
        "torch.divide(x, p)",
        "torch.negative(x)",
        "x.clip(-0.1, 0.1)",
        "torch.concat([x, y])",
        "torch.matmul(input=x, other=y.t())",
        "torch.add(x, y, alpha=2)",
        "x.sub(y, alpha=0.5)",
        "x.add(other=y)",
        "torch.pow(input=x, exponent=2)",
        "torch.cat(tensors=[x, y], dim=1)",
        "x.where(x > 0, y)",
        "torch.greater(x, y)",
        "x.all()",
        "(x > 0).any(dim=1)",
        "torch.rsqrt(p)",
        "torch.reciprocal(p)",
        "x.swapaxes(0, 1)",
        "x.type_as(torch.tensor([1], dtype=torch.float64))",
        "x.view_as(y)",
        "x.new_zeros(2, 2)",
        "x.new_ones((2,))",
        "x[0].expand_as(x)",
        "torch.isclose(x, y)",
    ],
)
def test_functions_and_methods_match_torch(torch_like, oracle, call):
    rng = np.random.default_rng(11)
    x0, y0 = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    results = []
    for m in (torch_like, oracle):
        x = m.tensor(x0, requires_grad=True)
        y, p = m.tensor(y0), m.tensor(np.abs(x0) + 0.5)
        out = eval(call, {"torch": m, "x": x, "y": y, "p": p})
        if out.requires_grad:
            out.sum().backward()
        results.append((values(out), None if x.grad is None else values(x.grad), str(out.dtype)))
    (got, got_grad, got_dtype), (want, want_grad, want_dtype) = results
    assert want_dtype == got_dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if want_grad is not None:
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-5, atol=1e-6)


def test_keyword_inputs_missing_or_doubled_are_type_errors(torch_like):
    x = torch_like.ones(2, 2)
    with pytest.raises(TypeError, match=r"matmul\(\) takes 2 input\(s\) \(input, other\) but 1 were given"):
        torch_like.matmul(input=x)
    with pytest.raises(TypeError, match=r"cat\(\) takes a sequence of inputs \(tensors\)"):
        torch_like.cat(dim=0)
    with pytest.raises(TypeError):
        torch_like.pow(x, 2, exponent=3)
    with pytest.raises(TypeError, match="size"):
        torch_like.zeros(2, size=(2,))


def test_size_shape_ndim_numel_item_tolist_numpy(torch_like, oracle):
    data = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    for m in (torch_like, oracle):
        x = m.tensor(data, dtype=m.float64, requires_grad=True)
        assert x.size(0) == 2 and tuple(x.size()) == (2, 3) and tuple(x.shape) == (2, 3) and x.ndim == 2
        assert x.numel() == 6 and m.numel(x) == 6 and x.dim() == 2 and x.nelement() == 6
        assert x.sum().item() == 21.0 and isinstance(x.sum().item(), float)
        assert x.tolist() == data and x[1].tolist() == data[1]
        assert x.detach().numpy().dtype == np.float64 and (x * 2).detach().numpy().tolist() == [[2, 4, 6], [8, 10, 12]]
        assert m.is_tensor(x) and isinstance(x, m.Tensor) and not m.is_tensor(data)
    assert not isinstance(torch_like.tensor([1]), torch_like.FloatTensor)
    assert isinstance(torch_like.tensor([1.0]), torch_like.FloatTensor)


def test_tensor_with_dtype_and_requires_grad(torch_like, oracle):
    for m in (torch_like, oracle):
        x = m.tensor([1, 2, 3], dtype=m.float64, requires_grad=True)
        assert x.dtype == m.float64 and x.requires_grad and x.is_leaf
        (x**2).sum().backward()
        assert values(x.grad).tolist() == [2.0, 4.0, 6.0]


# --- grad mode ----------------------------------------------------------------------------------


def test_grad_mode_decorators_and_contexts(torch_like):
    w = torch_like.ones(2, requires_grad=True)

    @torch_like.no_grad()
    def called(v):
        return v * 2

    @torch_like.no_grad
    def bare(v):
        return v * 2

    @torch_like.inference_mode()
    def inference(v):
        return v * 2

    assert not called(w).requires_grad and not bare(w).requires_grad and not inference(w).requires_grad
    assert torch_like.is_grad_enabled()
    with torch_like.no_grad():
        with torch_like.enable_grad():
            assert (w * 2).requires_grad

        @torch_like.enable_grad()
        def enabled(v):
            return v * 2

        assert enabled(w).requires_grad
    with torch_like.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    assert torch_like.is_grad_enabled()

    @torch_like.set_grad_enabled(False)
    def disabled(v):
        return v * 2

    assert torch_like.is_grad_enabled() and not disabled(w).requires_grad and torch_like.is_grad_enabled()
    torch_like.set_grad_enabled(False)
    try:
        assert not (w * 2).requires_grad
    finally:
        torch_like.set_grad_enabled(True)
    assert (w * 2).requires_grad


# --- custom Functions ---------------------------------------------------------------------------


def test_legacy_function_instance(torch_like, oracle):
    class Scaled(torch_like.autograd.Function):
        def __init__(self, factor):
            self.factor = factor

        def forward(self, input, other):
            self.save_for_backward(input, other)
            return input * other * self.factor

        def backward(self, grad_output):
            input, other = self.saved_tensors
            assert self.needs_input_grad == (True, False)
            return grad_output * other * self.factor, None

    x0 = np.array([1.0, -2.0, 3.0], np.float32)
    x, y = torch_like.tensor(x0, requires_grad=True), torch_like.tensor([2.0, 2.0, 2.0])
    for factor in (3.0, 3.0, 5.0):
        out = Scaled(factor)(x, y)
        out.sum().backward()
    assert type(out.grad_fn).__name__ == "ScaledBackward"
    np.testing.assert_allclose(values(out), x0 * 2 * 5)
    np.testing.assert_allclose(values(x.grad), np.full(3, 2 * (3 + 3 + 5), np.float32))


def test_static_function_called_as_an_instance_says_to_use_apply(torch_like):
    class Square(torch_like.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match=r"Square.apply"):
        Square()(torch_like.ones(2, requires_grad=True))


# --- today's tutorial programs, with only the import changed -----------------------------------


def test_two_layer_net_autograd(torch_like, oracle):
    losses, weights = programs.two_layer_net_autograd(torch_like)
    want_losses, want_weights = programs.two_layer_net_autograd(programs.with_numpy_draws(oracle))
    assert losses[-1] < losses[0] / 2
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(values(got), values(want), rtol=1e-4, atol=1e-5)


def test_legendre_fit_with_custom_function(torch_like, oracle):
    losses, coefficients = programs.legendre_fit(torch_like)
    want_losses, want_coefficients = programs.legendre_fit(oracle)
    assert losses[-1] < losses[0] * 0.6
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    np.testing.assert_allclose(coefficients, want_coefficients, rtol=1e-4, atol=1e-6)


def test_legacy_relu_net(torch_like, oracle):
    losses, weights = programs.legacy_relu_net(torch_like)
    seeded = programs.with_numpy_draws(oracle)  # PyTorch refuses legacy Functions: its clamp is the oracle
    seeded.manual_seed(1)
    x, y = seeded.randn(16, 8), seeded.randn(16, 2)
    w1, w2 = seeded.randn(8, 12, requires_grad=True), seeded.randn(12, 2, requires_grad=True)
    for step in range(len(losses)):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).mean()
        assert losses[step] == pytest.approx(loss.item(), rel=1e-5)
        loss.backward()
        with oracle.no_grad():
            for w in (w1, w2):
                w.sub_(1e-3 * w.grad)
                w.grad.zero_()
    np.testing.assert_allclose(values(weights[0]), w1.detach().numpy(), rtol=1e-5, atol=1e-6)


def assert_same_results(got: dict, want: dict):
    assert got.keys() == want.keys()
    for key in got:
        if isinstance(want[key], (bool, float)):
            assert got[key] == pytest.approx(want[key], rel=1e-6), key
        else:
            np.testing.assert_allclose(values(got[key]), values(want[key]), rtol=1e-6, err_msg=key)


def test_blitz_autograd(torch_like, oracle):
    got, want = programs.blitz_autograd(torch_like), programs.blitz_autograd(oracle)
    assert got["check"] is True
    assert_same_results(got, want)


def test_d2l_autograd(torch_like, oracle):
    got, want = programs.d2l_autograd(torch_like), programs.d2l_autograd(programs.with_numpy_draws(oracle))
    assert got["detach"] is True and got["control flow"] == pytest.approx(got["ratio"], rel=1e-6)
    assert_same_results(got, want)


def test_micrograd_sanity_against_torch(torch_like, oracle):
    got, want = programs.micrograd_sanity(torch_like), programs.micrograd_sanity(oracle)
    assert got.keys() == want.keys()
    for key in got:
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), key


def readme_program() -> tuple[str, str]:
    """The program of README.md's "Today's PyTorch programs" and the output shown under it."""
    section = (ROOT / "README.md").read_text().split("### Today's PyTorch programs", 1)[1]
    code, rest = section.split("```python\n", 1)[1].split("```\n", 1)
    output = rest.split("```\n", 1)[1].split("```", 1)[0]
    return code, output


def test_readme_program_runs_with_the_import_changed(torch_like, oracle):
    code, shown = readme_program()
    assert "import client as torch" in code
    ours = io.StringIO()
    with contextlib.redirect_stdout(ours):
        exec(code.replace("import client as torch", f"import {torch_like.__name__} as torch"), {"__name__": "readme"})
    assert ours.getvalue() == shown
    theirs = io.StringIO()
    with contextlib.redirect_stdout(theirs):
        exec(
            code.replace("import client as torch", ""),
            {"__name__": "readme", "torch": programs.with_numpy_draws(oracle)},
        )
    numbers = [[float(n) for n in re.findall(r"\d+\.\d+", text)] for text in (ours.getvalue(), theirs.getvalue())]
    assert len(numbers[0]) == 4
    np.testing.assert_allclose(numbers[0], numbers[1], atol=2e-4)


def test_import_star_shadows_no_builtin():
    for package in ("engine", "client"):
        names = {}
        exec(f"from {package} import *", names)
        assert "linspace" in names and "float32" in names
        assert not {"float", "int", "bool", "all", "any", "max"} & set(names)
