"""A PyTorch program imports as it is written with its first word changed: torch's module paths
(`import torch.autograd.forward_ad as fwAD`, `from torch.distributions import Normal`...) on the engine,
the embedded client and a live server (`torch_like`), and what the tutorials built on them call
(`torch.func`'s model ensembling and `linearize`, `once_differentiable`, `utils.checkpoint`,
`nn.utils.rnn.pad_sequence`, the forward-mode AD tutorial), against PyTorch."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values

IMPORTS = [
    ("autograd.forward_ad", ["dual_level", "make_dual", "unpack_dual"]),
    ("autograd.functional", ["jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"]),
    ("autograd.gradcheck", ["gradcheck", "gradgradcheck"]),
    ("autograd.function", ["Function", "FunctionCtx", "once_differentiable"]),
    ("distributions", ["Normal", "Categorical", "kl_divergence"]),
    ("distributions.normal", ["Normal"]),
    ("testing", ["assert_close"]),
    ("special", ["expit", "erf"]),
    ("linalg", ["norm", "inv", "matrix_exp", "householder_product"]),
    ("amp", ["autocast", "GradScaler"]),
    ("cuda.amp", ["autocast"]),
    ("func", ["vmap", "grad", "jacrev", "functional_call", "stack_module_state", "linearize"]),
    ("random", ["manual_seed", "seed", "get_rng_state", "set_rng_state", "fork_rng"]),
    ("optim.optimizer", ["Optimizer"]),
    ("optim.lr_scheduler", ["StepLR"]),
    ("nn.utils", ["clip_grad_norm_", "parameters_to_vector", "weight_norm", "spectral_norm", "remove_spectral_norm"]),
    ("nn.utils.rnn", ["pad_sequence"]),
    ("nn.utils.parametrize", ["register_parametrization", "remove_parametrizations", "cached"]),
    ("nn.utils.parametrizations", ["weight_norm", "orthogonal", "spectral_norm"]),
    ("nn.grad", ["conv2d_input", "conv2d_weight"]),
    ("nn.parameter", ["Parameter"]),
    ("nn.modules.module", ["Module"]),
    ("nn.modules.linear", ["Linear"]),
    ("nn.modules", ["Linear", "Conv2d", "Module"]),
    ("nn.modules.loss", ["_Loss", "_WeightedLoss", "MSELoss"]),
    ("utils.data.dataloader", ["DataLoader"]),
    ("utils.data.dataset", ["Dataset", "TensorDataset"]),
    ("utils.checkpoint", ["checkpoint", "checkpoint_sequential"]),
]


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("path, names", IMPORTS, ids=[p for p, _ in IMPORTS])
def test_torch_module_paths_import_with_the_first_word_changed(torch_like, oracle, path, names):
    root = torch_like.__name__
    namespace = {}
    exec(f"from {root}.{path} import {', '.join(names)}", namespace)
    exec(f"import {root}.{path} as alias", namespace)
    assert all(callable(namespace[n]) for n in names)
    torch_module = importlib.import_module(f"torch.{path}")  # the names are torch's there too
    assert all(hasattr(torch_module, n) for n in names)


def test_a_path_that_does_not_exist_still_fails_as_a_missing_module(torch_like):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{torch_like.__name__}.autograd.no_such_thing")


def test_model_ensembling_tutorial_matches_a_loop_over_the_models(torch_like):
    nn = torch_like.nn
    stack_module_state = importlib.import_module(f"{torch_like.__name__}.func").stack_module_state
    functional_call, vmap = torch_like.func.functional_call, torch_like.func.vmap
    torch_like.manual_seed(0)
    models = [nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)) for _ in range(4)]
    batches = torch_like.randn(4, 8, 6)
    params, buffers = stack_module_state(models)
    assert tuple(params["0.weight"].shape) == (4, 5, 6) and params["0.weight"].requires_grad
    assert params["0.weight"].grad_fn is None  # new leaves
    base = models[0].to("meta")

    def fmodel(p, b, x):
        return functional_call(base, (p, b), (x,))

    stacked = vmap(fmodel)(params, buffers, batches)
    looped = torch_like.stack([m(x) for m, x in zip(models, batches)])
    np.testing.assert_allclose(values(stacked), values(looped), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="Expected at least one model"):
        stack_module_state([])
    models[1].eval()
    with pytest.raises(RuntimeError, match="same training/eval mode"):
        stack_module_state(models)


def test_linearize_gives_jvps_as_torch_func(torch_like, oracle):
    x = np.random.default_rng(0).standard_normal(5)
    t = np.linspace(-1, 1, 5)
    out, jvp_fn = torch_like.func.linearize(lambda v: (v.sin() * v).sum(), torch_like.tensor(x))
    want_out, want_fn = oracle.func.linearize(lambda v: (v.sin() * v).sum(), oracle.tensor(x))
    np.testing.assert_allclose(values(out), want_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(values(jvp_fn(torch_like.tensor(t))), want_fn(oracle.tensor(t)).numpy(), rtol=1e-12)


def test_once_differentiable_backward_runs_without_a_graph(torch_like):
    once_differentiable = importlib.import_module(f"{torch_like.__name__}.autograd.function").once_differentiable

    class Cube(torch_like.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x**2

    x = torch_like.tensor([1.0, 2.0], requires_grad=True)
    (g,) = torch_like.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert values(g).tolist() == [3.0, 12.0]
    if torch_like.__name__ == "engine":  # the engine runs backward in Python: no graph on what it returns
        assert not g.requires_grad


def test_pad_sequence_equals_torch(torch_like, oracle):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((n, 3)) for n in (4, 2, 3)]
    pad_sequence = importlib.import_module(f"{torch_like.__name__}.nn.utils.rnn").pad_sequence
    for kwargs in ({}, {"batch_first": True, "padding_value": -1.0}, {"batch_first": True, "padding_side": "left"}):
        ours = pad_sequence([torch_like.tensor(a) for a in arrays], **kwargs)
        theirs = oracle.nn.utils.rnn.pad_sequence([oracle.tensor(a) for a in arrays], **kwargs)
        np.testing.assert_array_equal(values(ours), theirs.numpy())
    with pytest.raises(ValueError, match="padding_side"):
        pad_sequence([torch_like.tensor(a) for a in arrays], padding_side="middle")


def test_checkpoint_gives_torchs_values_gradients_and_warnings(torch_like, oracle):
    checkpoint = importlib.import_module(f"{torch_like.__name__}.utils.checkpoint").checkpoint
    rng = np.random.default_rng(2)
    w, b, x = rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal((2, 3))
    results = []
    for lib, check in ((torch_like, checkpoint), (oracle, oracle.utils.checkpoint.checkpoint)):
        lin = lib.nn.Linear(3, 3)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(w, dtype=lib.float32))
            lin.bias.copy_(lib.tensor(b, dtype=lib.float32))
        xs = lib.tensor(x, dtype=lib.float32, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = check(lambda v, lin=lin: lin(v).tanh(), xs, use_reentrant=False)
            out.sum().backward()
            plain = check(lin, lib.tensor(x, dtype=lib.float32))  # no input requires grad, reentrant by default
        results.append((values(out), values(xs.grad), values(lin.weight.grad), plain.requires_grad,
                        sorted(str(c.message)[:40] for c in caught)))  # fmt: skip
    ours, theirs = results
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ours[3] is theirs[3] is False
    assert ours[4] == theirs[4] and len(ours[4]) == 2  # the use_reentrant warning and "None of the inputs..."


def test_forward_ad_tutorial_unpacks_the_tangent_given(torch_like):
    fwAD = importlib.import_module(f"{torch_like.__name__}.autograd.forward_ad")
    primal, tangent = torch_like.randn(4, 4), torch_like.randn(4, 4)
    with fwAD.dual_level():
        dual = fwAD.make_dual(primal, tangent)
        assert fwAD.unpack_dual(dual).tangent is tangent
        assert fwAD.unpack_dual(fwAD.make_dual(primal, tangent.T)).tangent is not tangent
        out = dual**2 + torch_like.ones(4, 4)
        np.testing.assert_allclose(
            values(fwAD.unpack_dual(out).tangent), 2 * values(primal) * values(tangent), rtol=1e-6
        )
    assert fwAD.unpack_dual(out).tangent is None


@pytest.mark.parametrize("dims", [1, 2])
def test_nn_grad_conv_gradients_equal_torchs(torch_like, oracle, dims):
    nn_grad = importlib.import_module(f"{torch_like.__name__}.nn.grad")
    rng = np.random.default_rng(3)
    shape, w_shape = (2, 4) + (7,) * dims, (6, 2) + (3,) * dims  # groups=2
    x, w = rng.standard_normal(shape), rng.standard_normal(w_shape)
    kwargs = dict(stride=2, padding=1, dilation=1, groups=2)
    out = getattr(oracle.nn.functional, f"conv{dims}d")(oracle.tensor(x), oracle.tensor(w), **kwargs)
    g = rng.standard_normal(tuple(out.shape))
    for kind, ours_args, theirs_args in (
        ("input", (shape, torch_like.tensor(w)), (shape, oracle.tensor(w))),
        ("weight", (torch_like.tensor(x), w_shape), (oracle.tensor(x), w_shape)),
    ):
        name = f"conv{dims}d_{kind}"
        ours = getattr(nn_grad, name)(*ours_args, torch_like.tensor(g), **kwargs)
        theirs = getattr(oracle.nn.grad, name)(*theirs_args, oracle.tensor(g), **kwargs)
        np.testing.assert_allclose(values(ours), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_torch_vmap_is_func_vmap(torch_like):
    assert torch_like.vmap is torch_like.func.vmap
    rows = torch_like.vmap(lambda v: v.sum())(torch_like.ones(3, 4))
    assert values(rows).tolist() == [4.0, 4.0, 4.0]


def test_fork_rng_restores_the_default_generator_as_torch_random_does(torch_like):
    random = importlib.import_module(f"{torch_like.__name__}.random")
    random.manual_seed(5)
    with random.fork_rng():
        inside = values(torch_like.rand(3))
    after = values(torch_like.rand(3))
    np.testing.assert_array_equal(inside, after)  # the draws inside left no trace
    with random.fork_rng(enabled=False):
        torch_like.rand(3)
    assert not np.array_equal(values(torch_like.rand(3)), after)


def test_modules_imported_by_torchs_paths_are_the_sides_own(torch_like, oracle):
    """`from torch.nn.modules import Linear` and a loss of the program's own on `_Loss` (engine.nn.modules was
    the generic file of the module classes, whose unbound Linear failed when made)."""
    namespace = {}
    root = torch_like.__name__
    exec(f"from {root}.nn.modules import Linear\nfrom {root}.nn.modules.loss import _Loss", namespace)
    assert namespace["Linear"] is torch_like.nn.Linear

    def forward(self, input, target):
        d = (input - target).abs()
        near = (d < 1).double()
        out = 0.5 * d * d * near + (d - 0.5) * (1 - near)
        return out.mean() if self.reduction == "mean" else out.sum()

    results = []
    for lib, linear, base in (
        (torch_like, namespace["Linear"], namespace["_Loss"]),
        (oracle, oracle.nn.Linear, oracle.nn.modules.loss._Loss),
    ):
        layer = linear(3, 2).double()
        with lib.no_grad():
            layer.weight.copy_(lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], dtype=lib.float64))
            layer.bias.fill_(0.1)
        x = lib.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], dtype=lib.float64)
        loss = type("Huberish", (base,), {"forward": forward})(reduction="sum")(
            layer(x), lib.zeros(2, 2, dtype=lib.float64)
        )
        loss.backward()
        results.append((float(loss.item()), layer.weight.grad.detach().numpy().copy()))
    assert results[0][0] == pytest.approx(results[1][0])
    np.testing.assert_allclose(results[0][1], results[1][1])
