"""Examples of PyTorch's API documentation (tests/docs_examples_programs.py: every torch.optim optimizer with its
common options, LBFGS, per-parameter options and add_param_group, state_dict round trips mid-training, the
lr_scheduler examples step by step and ReduceLROnPlateau, clip_grad_norm_/clip_grad_value_ and the parameter
vector, weight_norm's parametrization, autograd.Function's ctx (save_for_backward, mark_non_differentiable,
set_materialize_grads), detect_anomaly, forward-mode AD, nn.Module's hooks and modes, F.cross_entropy/nll_loss/
kl_div's options, F.pad, one_hot, affine_grid and grid_sample, gumbel_softmax) run on the engine, the embedded
client and a live server (`torch_like`), each compared with what PyTorch 2.13 gives for the same program. Then
what they needed fixed: a grid reused by two backwards, and grid_sample's border clamp on the border itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests import docs_examples_programs as programs
from tests.client.test_client_tutorial_autograd import assert_same, host


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


def test_a_client_module_hook_replacing_grad_input_is_refused_clearly(torch_like):
    if torch_like.__name__ != "client":
        pytest.skip("the engine replaces it (compared with PyTorch above)")
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
