"""torch.autograd.graph on the client, embedded and against a server (and on the engine, for the same results):
`Node`, `name()`, `metadata`, `save_on_cpu` (a server's memory is its own: the gradients are the same) and
`disable_saved_tensors_hooks` work; saved-tensor hooks, grad_fn hooks and `_saved_<name>` raise a
NotImplementedError that says why (pack, unpack and hooks are user code, and the backward is computed by the
server). tests/test_saved_tensor_hooks.py has the engine's side in full."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine


def test_torch_s_module_path_imports_on_the_client():
    import client.autograd.graph as graph
    from client.autograd.graph import Node, save_on_cpu

    assert graph.Node is Node and graph.save_on_cpu is save_on_cpu is client.autograd.graph.save_on_cpu


def test_grad_fn_is_a_node_with_a_name_and_metadata(torch_like):
    m = torch_like
    a = m.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = a * a
    assert isinstance(y.grad_fn, m.autograd.graph.Node)
    assert (
        y.grad_fn.name() == "MulBackward0"
        and y.grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"
    )
    y.grad_fn.metadata["step"] = 3
    assert y.grad_fn.metadata == {"step": 3}


def test_save_on_cpu_gives_the_same_gradients(torch_like):
    m = torch_like
    m.manual_seed(0)
    model = m.nn.Sequential(m.nn.Linear(6, 8), m.nn.Tanh(), m.nn.Linear(8, 2))
    x = m.randn(3, 6)
    model(x).sum().backward()
    plain = [np.array(p.grad.tolist()) for p in model.parameters()]
    model.zero_grad()
    with m.autograd.graph.save_on_cpu(pin_memory=True):
        y = model[0](x).tanh()
    model[2](y).sum().backward()
    for p, g in zip(model.parameters(), plain):
        np.testing.assert_array_equal(np.array(p.grad.tolist()), g)


def test_disable_saved_tensors_hooks_refuses_save_on_cpu(torch_like):
    m = torch_like
    with m.autograd.graph.disable_saved_tensors_hooks("not in this region"):
        with pytest.raises(RuntimeError, match="^not in this region$"):
            with m.autograd.graph.save_on_cpu():
                pass


def test_the_client_refuses_what_would_run_user_code_in_its_backward(session):
    a = client.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = a * a
    with pytest.raises(NotImplementedError, match="saved_tensors_hooks on the client"):
        with client.autograd.graph.saved_tensors_hooks(lambda x: x, lambda x: x):
            pass
    with pytest.raises(NotImplementedError, match="register_hook of a client Variable's grad_fn"):
        y.grad_fn.register_hook(lambda gi, go: None)
    with pytest.raises(NotImplementedError, match="register_prehook of a client Variable's grad_fn"):
        y.grad_fn.register_prehook(lambda go: None)
    with pytest.raises(NotImplementedError, match="`_saved_self` of a client Variable's grad_fn"):
        _ = y.grad_fn._saved_self
    y.sum().backward()  # and the graph still runs
    np.testing.assert_array_equal(a.grad.tolist(), [2.0, 4.0])
    assert engine.autograd.graph.saved_tensors_hooks is not client.autograd.graph.saved_tensors_hooks
