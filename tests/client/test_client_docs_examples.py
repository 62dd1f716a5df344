"""Examples of PyTorch's API documentation (tests/docs_examples_programs.py: every torch.optim optimizer with its
common options, LBFGS, per-parameter options and add_param_group, state_dict round trips mid-training, step hooks,
the lr_scheduler examples step by step and ReduceLROnPlateau, clip_grad_norm_/clip_grad_value_ and the parameter
vector, weight_norm and spectral_norm, detect_anomaly, forward-mode AD, nn.Module's hooks, modes and introspection,
nn.init, F.cross_entropy/nll_loss/kl_div's options, F.pad, one_hot, affine_grid, grid_sample, interpolate and
gumbel_softmax, and 75 torch/Tensor one-liners) run on the engine, the embedded client and a live server
(`torch_like`), each compared with what PyTorch 2.13 gives for the same program. Then what they needed fixed: a
grid reused by two backwards, grid_sample's border clamp on the border itself, optimizer step hooks, a recorded
buffer loaded from its own state_dict on the client."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests import docs_examples_programs as programs
from tests.client.test_client_tutorial_autograd import assert_same, host
from tests.tutorial_training_programs import data, init


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def run(program, torch, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (float() of a loss that requires grad: LBFGS's closure)
        return host(program(torch, **options))


# the client's backward is one request computed by the server: a module's backward hook reads its gradients there
# but cannot replace them (README's known limitations); with `replace=False` the rest of the program is compared
CLIENT_OPTIONS = {"module_hooks_and_modes": {"replace": False}}


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_docs_example_gives_torchs_results(torch_like, oracle, name):
    program = programs.PROGRAMS[name]
    options = CLIENT_OPTIONS.get(name, {}) if torch_like.__name__ == "client" else {}
    got, want = run(program, torch_like, **options), run(program, oracle, **options)
    if name == "anomaly_detection" and torch_like.__name__ == "client":  # the server's 422 says where it failed
        assert got.pop("raised").endswith(want.pop("raised"))
    assert_same(got, want, name)


def test_a_client_module_hook_replacing_grad_input_is_refused_clearly_where_the_engine_replaces_it(torch_like):
    if torch_like.__name__ != "client":  # the engine replaces the gradient (its values compared with PyTorch above)
        assert programs.module_hooks_and_modes(torch_like)
        return
    with pytest.raises(NotImplementedError, match="returned a new gradient: the server computed the whole backward"):
        programs.module_hooks_and_modes(torch_like)


def _grid_twice(m):
    """A grid from affine_grid sampled twice, each sample's backward reaching theta (PyTorch's node saves nothing,
    so the second needs no retain_graph), with grid points exactly on the image's border (no gradient there)."""
    F = m.nn.functional
    image = m.tensor(np.arange(12.0, dtype=np.float32).reshape(1, 1, 3, 4) ** 1.5)
    theta = m.tensor([[[1.2, 0.0, 0.0], [0.0, 1.0, 0.1]]], requires_grad=True)
    grid = F.affine_grid(theta, [1, 1, 3, 4], align_corners=True)
    grads = []
    for padding in ("border", "reflection", "zeros"):
        (g,) = m.autograd.grad(F.grid_sample(image, grid, padding_mode=padding, align_corners=True).sum(), theta)
        grads.append(g)
    return [grid, grads, grid.grad_fn.name()]


def test_a_grid_serves_two_backwards_and_has_no_gradient_on_the_border_as_in_torch(torch_like, oracle):
    got, want = host(_grid_twice(torch_like)), host(_grid_twice(oracle))
    assert got[2] == want[2] == "AffineGridGeneratorBackward0"
    assert_same(got, want, "grid")


def _step_hooks(m):
    """Step hooks as PyTorch calls them: args hold the optimizer, a pre-hook's (args, kwargs) replace step's, a
    removed hook is not called, and a step's own `super().step()` runs them once."""
    p = m.nn.Parameter(m.ones(2))
    p.grad = m.tensor([1.0, -2.0])
    optimizer, seen = m.optim.SGD([p], lr=0.1), []

    def pre(opt, args, kwargs):
        seen.append(["pre", len(args), args[0] is opt, sorted(kwargs)])
        return args, {"closure": lambda: m.tensor(3.0)}

    handle = optimizer.register_step_pre_hook(pre)
    optimizer.register_step_post_hook(lambda opt, args, kwargs: seen.append(["post", sorted(kwargs)]))
    loss = optimizer.step()
    handle.remove()
    optimizer.step(closure=None)
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: 3)
    with pytest.raises(RuntimeError, match=r"must return None or a tuple of \(new_args, new_kwargs\), but got 3"):
        optimizer.step()
    return [seen, float(loss), p]


def test_optimizer_step_hooks_as_torchs(torch_like, oracle):
    got, want = _step_hooks(torch_like), _step_hooks(oracle)
    assert got[0] == want[0] and got[1] == want[1] == 3.0
    assert_same(host(got[2]), host(want[2]), "stepped")


def test_buffers_updated_by_a_recorded_forward_load_their_own_state_as_torchs(torch_like, oracle):
    """A BatchNorm after a conv, its running statistics not computed yet on the client, loaded back from its own
    state_dict (it lost its value: 'NoneType' object has no attribute 'holder')."""

    def loaded(m):
        nn = m.nn
        model = init(m, nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, bias=False), nn.BatchNorm2d(2)))
        model(m.tensor(data(1, 2, 1, 4, 4)))
        state = model.state_dict()
        model.load_state_dict(state)
        return [model[1].running_mean, model[1].running_var, model(m.tensor(data(2, 2, 1, 4, 4)))]

    assert_same(host(loaded(torch_like)), host(loaded(oracle)), "loaded")
