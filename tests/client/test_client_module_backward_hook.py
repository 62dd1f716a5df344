"""`Module.register_backward_hook`, PyTorch's deprecated module backward hook that older Grad-CAM programs register:
`hook(module, grad_input, grad_output)` on the node that made the module's output. Its `grad_output` is PyTorch's
(checked against torch); its `grad_input` is that node's inputs' gradients, which PyTorch itself calls unreliable
(the engine's nodes are not PyTorch's: a Conv2d's output comes from the bias add); on the client (whose nodes take no
hooks) it is empty. A module takes one kind of backward hook, as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import engine

torch = pytest.importorskip("torch")


def _gradcam(t):
    """The older Grad-CAM: activations by a forward hook, their gradient by a backward hook, both on the conv."""
    t.manual_seed(0)
    conv, head = t.nn.Conv2d(2, 3, 3), t.nn.Linear(27, 4)
    rng = np.random.default_rng(0)
    with t.no_grad():
        conv.weight.copy_(t.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))
        conv.bias.copy_(t.tensor(rng.standard_normal(3).astype(np.float32)))
        head.weight.copy_(t.tensor(rng.standard_normal((4, 27)).astype(np.float32)))
        head.bias.zero_()
    kept = {}
    conv.register_forward_hook(lambda m, i, o: kept.__setitem__("activation", o.detach()))
    conv.register_backward_hook(lambda m, gi, go: kept.__setitem__("gradient", go[0].detach()))
    x = t.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    scores = head(t.relu(conv(x)).flatten(1))
    scores[0, int(scores.argmax())].backward()
    weights = kept["gradient"].mean(dim=(2, 3), keepdim=True)
    return t.relu((weights * kept["activation"]).sum(1)).numpy()


def test_an_older_gradcam_program_gets_pytorchs_map(torch_like):
    np.testing.assert_allclose(_gradcam(torch_like), _gradcam(torch), rtol=1e-5, atol=1e-6)


def test_a_module_takes_one_kind_of_backward_hook():
    for m in (engine, torch):
        layer = m.nn.Linear(2, 2)
        layer.register_backward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
            layer.register_full_backward_hook(lambda *a: None)


def test_a_returned_grad_input_replaces_the_nodes_input_gradients():
    layer = engine.nn.Linear(3, 2)
    layer.register_backward_hook(lambda m, gi, go: tuple(None if g is None else g * 0 for g in gi))
    x = engine.ones(4, 3, requires_grad=True)
    layer(x).sum().backward()
    assert float(x.grad.abs().sum()) == 0 and float(layer.weight.grad.abs().sum()) == 0
