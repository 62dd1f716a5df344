"""`nn.Module` hooks as PyTorch has them: forward pre-hooks and forward hooks (replacing arguments and output,
`with_kwargs`, `prepend`), full backward hooks (grad_input and grad_output, a returned grad_input replacing it,
a first layer whose input needs no gradient) and full backward pre-hooks, removable handles (the Grad-CAM recipe is
in tests/client/test_client_module_hooks.py, on the engine, the embedded client and a server). Each
program runs on the engine and on torch in float64; the client refuses a backward hook that replaces a gradient."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def arrays(values):
    return [np.asarray(v.detach().numpy()) if hasattr(v, "detach") else np.asarray(v) for v in values]


def same(program, rtol=1e-10):
    got, want = arrays(program(engine)), arrays(program(torch))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)
    return got


def linear(m, weight, bias):
    layer = m.nn.Linear(*reversed(weight.shape)).double()
    with m.no_grad():
        layer.weight.copy_(m.tensor(weight))
        layer.bias.copy_(m.tensor(bias))
    return layer


W, B, X = RNG.standard_normal((2, 3)), RNG.standard_normal(2), RNG.standard_normal((4, 3))


def test_forward_hooks_replace_arguments_and_output_in_order():
    def program(m):
        layer, seen = linear(m, W, B), []
        layer.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        layer.register_forward_pre_hook(lambda mod, args, kwargs: (args, kwargs), with_kwargs=True)
        layer.register_forward_hook(lambda mod, args, out: out + 1)
        first = layer.register_forward_hook(lambda mod, args, out: seen.append(out), prepend=True)
        x = m.tensor(X, requires_grad=True)
        y = layer(x)
        first.remove()
        (y * y).sum().backward()
        return [y, seen[0], x.grad, layer(x)]

    got = same(program)
    np.testing.assert_allclose(got[1], 2 * X @ W.T + B)


def test_full_backward_hooks_see_and_replace_grad_input():
    def program(m):
        layer, log = linear(m, W, B), []
        layer.register_full_backward_pre_hook(lambda mod, go: (go[0] * 0.5,))
        layer.register_full_backward_hook(lambda mod, gi, go: log.extend([gi[0], go[0]]))
        handle = layer.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,))
        x = m.tensor(X, requires_grad=True)
        (layer(x) ** 2).sum().backward()
        hooked = x.grad.clone()
        handle.remove()
        x.grad = None
        (layer(x) ** 2).sum().backward()
        return [*log[:2], hooked, x.grad, layer.weight.grad]

    same(program)


def test_a_first_layers_backward_hook_gets_none_for_its_input():
    def program(m):
        layer, log = linear(m, W, B), []
        layer.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
        with pytest.warns(UserWarning, match="no inputs require gradients"):
            (layer(m.tensor(X)) ** 2).sum().backward()
        (grad_input, grad_output) = log[0]
        assert grad_input == (None,)
        return [grad_output[0], layer.bias.grad]

    same(program)


def test_a_client_module_runs_forward_hooks_and_refuses_a_backward_hook_that_replaces_a_gradient():
    """(tests/client/test_client_module_hooks.py has the client's backward hooks against torch.)"""
    layer = linear(client, W, B)
    kept = []
    layer.register_forward_hook(lambda mod, args, out: kept.append(out))
    y = layer(client.tensor(X))
    np.testing.assert_allclose(kept[0].detach().numpy(), y.detach().numpy())
    layer.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,))
    x = client.tensor(X, requires_grad=True)
    with pytest.raises(NotImplementedError, match="the server computed the whole backward in one request"):
        (layer(x) ** 2).sum().backward()
    assert x.grad is None and layer.weight.grad is None
