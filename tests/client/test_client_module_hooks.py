"""A module's full backward hooks on the client, against torch, on the engine, the embedded client and a live server:
the Grad-CAM recipe (a forward hook keeping a layer's activation, a backward hook its output's gradient) gives
PyTorch's map and input gradient, and a first layer's hook gets None for an input that needs no gradient. (A hook
that replaces a gradient is refused on the client: tests/engine/test_module_hooks.py.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
IMAGE = RNG.standard_normal((1, 3, 8, 8))
WEIGHTS: dict = {}


def _grad_cam(m):
    net = m.nn.Sequential(
        m.nn.Conv2d(3, 4, 3, padding=1),
        m.nn.ReLU(),
        m.nn.Conv2d(4, 5, 3, padding=1),
        m.nn.ReLU(),
        m.nn.AdaptiveAvgPool2d(1),
        m.nn.Flatten(),
        m.nn.Linear(5, 3),
    ).double()
    if not WEIGHTS:
        WEIGHTS.update({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    net.load_state_dict({k: m.tensor(v) for k, v in WEIGHTS.items()})
    kept = {}
    net[2].register_forward_hook(lambda mod, args, out: kept.__setitem__("act", out))
    net[2].register_full_backward_hook(lambda mod, gi, go: kept.__setitem__("grad", go[0]))
    x = m.tensor(IMAGE, requires_grad=True)
    scores = net(x)
    scores[0, int(scores.argmax())].backward()
    weights = kept["grad"].mean((2, 3), keepdim=True)
    cam = m.nn.functional.relu((weights * kept["act"]).sum(1))
    return cam.detach().numpy(), x.grad.numpy()


def test_grad_cam_gives_pytorchs_map(torch_like):
    want = _grad_cam(torch)  # first: the weights are torch's initialisation
    got = _grad_cam(torch_like)
    assert want[0].shape == (1, 8, 8) and want[0].any()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


W, B = RNG.standard_normal((2, 3)), RNG.standard_normal(2)


def _first_layer(m):
    layer = m.nn.Linear(3, 2).double()
    with m.no_grad():
        layer.weight.copy_(m.tensor(W))
        layer.bias.copy_(m.tensor(B))
    log = []
    layer.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        (layer(m.tensor(np.arange(6.0).reshape(2, 3))) ** 2).sum().backward()
    (grad_input, grad_output) = log[0]
    return grad_input, grad_output[0].detach().numpy(), layer.weight.grad.numpy()


def test_a_first_layers_backward_hook_gets_none_for_its_input(torch_like):
    got, want = _first_layer(torch_like), _first_layer(torch)
    assert got[0] == want[0] == (None,)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
