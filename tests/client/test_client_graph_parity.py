"""PyTorch-parity of autograd's graph surface on the engine and the client (embedded and through a live server),
each compared with what PyTorch 2.13 gives: inference tensors, multi-grad hooks, gradient edges."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _inference_flags(torch):
    x = torch.ones(2, 2, requires_grad=True)
    with torch.inference_mode():
        made = [torch.ones(2), x * 2, torch.tensor([1.0]), (x * 2)[0], torch.nn.functional.relu(x).sum()]
        with torch.inference_mode(False):
            made.append(torch.ones(2))
        with torch.no_grad():
            made.append(torch.zeros(1))
    with torch.no_grad():
        made.append(torch.zeros(1))
    base = made[1]
    made += [x, base + 1, base.clone(), base.view(4), base[1], base.t()]
    return [t.is_inference() for t in made] + [torch.is_inference(base), base.requires_grad]


def test_tensors_made_in_inference_mode_are_inference_tensors_as_torchs(torch_like, oracle):
    assert _inference_flags(torch_like) == _inference_flags(oracle)


SCALARS = """
x = torch.ones(1, requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    int(x)
    with torch.no_grad():
        float(x)
    float(x * 2)
    complex(x)
seen = [(str(w.message), w.category.__name__) for w in caught]
"""


def test_float_of_a_tensor_requiring_grad_warns_once_as_torchs(torch_like, oracle):
    from engine import surface

    surface.SCALAR_WARNED.clear()  # (once a process, as PyTorch's TORCH_WARN_ONCE: its own runs in a new one)
    scope = {"torch": torch_like, "warnings": warnings}
    exec(SCALARS, scope)  # noqa: S102
    program = f"import torch, warnings\n{SCALARS}\nprint(repr(seen))"
    torchs = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    ((want, want_category),) = eval(torchs.stdout)  # noqa: S307  (the repr of a list of strings)
    ((message, category),) = scope["seen"]
    assert category == want_category == "UserWarning"
    assert want.startswith(message + " (Triggered internally at ")  # (PyTorch's names its C++ source line)


def _strict_refusals(torch):
    """Each strict-mode case's (exception type, message), or "ok"."""
    F = torch.autograd.functional
    x, y = torch.ones(3, dtype=torch.float64) * 0.5, torch.ones(2, dtype=torch.float64)
    const = lambda a, *rest: torch.ones(1, dtype=torch.float64).sum()  # noqa: E731
    square, cube = (lambda a, *rest, k=k: (a**k).sum() for k in (2, 3))
    twice = lambda a, *rest: (a * 2).sum()  # noqa: E731
    cases = {
        "vjp unused": lambda: F.vjp(twice, (x, y), strict=True),
        "vjp constant": lambda: F.vjp(const, x, strict=True),
        "vjp create_graph": lambda: F.vjp(twice, x, create_graph=True, strict=True),
        "jvp unused": lambda: F.jvp(lambda a, b: a * 2, (x, y), (x, y), strict=True),
        "jvp constant": lambda: F.jvp(lambda a: torch.ones(3, dtype=torch.float64), x, x, strict=True),
        "jacobian unused": lambda: F.jacobian(lambda a, b: a * 2, (x, y), strict=True),
        "jacobian create_graph": lambda: F.jacobian(lambda a: a * 2, x, create_graph=True, strict=True),
        "hessian ok": lambda: F.hessian(cube, x, strict=True),
        "hessian product create_graph": lambda: F.hessian(lambda a: (a * a).sum(), x, create_graph=True, strict=True),
    }
    for name, f in (("hessian", F.hessian), ("vhp", F.vhp), ("hvp", F.hvp)):
        extra, one = ((), ()) if name == "hessian" else (((x, y),), (x,))
        cases[f"{name} linear"] = lambda f=f, e=one: f(twice, x, *e, strict=True)
        cases[f"{name} unused"] = lambda f=f, e=extra: f(square, (x, y), *e, strict=True)
        cases[f"{name} constant"] = lambda f=f, e=extra: f(const, (x, y), *e, strict=True)
        cases[f"{name} not strict"] = lambda f=f, e=extra: f(twice, (x, y), *e)
    out = {}
    for name, case in cases.items():
        try:
            case()
            out[name] = "ok"
        except RuntimeError as e:
            out[name] = str(e)
    return out


# the client cannot tell that a recorded gradient does not depend on an input (a lazy `grad` node requires grad)
CLIENT_CANNOT_TELL = ("vjp create_graph", "jacobian create_graph", "hessian linear", "vhp linear", "hvp linear")


def test_autograd_functional_strict_refusals_are_torchs(torch_like, oracle):
    got, want = _strict_refusals(torch_like), _strict_refusals(oracle)
    if torch_like.__name__ == "client":
        for name in CLIENT_CANNOT_TELL:
            assert got.pop(name) == "ok" and want.pop(name) != "ok"
        assert "create_graph=True" in want.pop("hessian product create_graph")
        got.pop("hessian product create_graph")
    assert got == want
    assert "hessian linear" not in got or "While computing the hessian" in got["hessian linear"]


def _no_grad_views(torch):
    x = torch.ones(3, 2, requires_grad=True)
    y = x * 2
    with torch.no_grad():
        made = [
            x[0],
            x.view(6),
            x.t(),
            y[0],
            y.reshape(6),
            x.detach(),
            x[:, 0],
            x.unsqueeze(0),
            x.expand(2, 3, 2),
            x + 0,
        ]
    flags = [(v.requires_grad, v.is_leaf, v.grad_fn is None) for v in made]
    used = made[0] * 2
    try:
        made[1].mul_(2)
        refused = None
    except RuntimeError as e:
        refused = str(e)
    return flags, used.requires_grad, type(used.grad_fn).__name__, refused


def test_a_view_made_in_no_grad_mode_of_a_base_requiring_grad_requires_grad_as_torchs(oracle):
    """The engine's; the client's such a view does not require grad (README, Known limitations: marking it would
    fetch its value, a round trip for every `weight.t()` of a model run under `no_grad()` through a server)."""
    import engine

    assert _no_grad_views(engine) == _no_grad_views(oracle)


def _multi_grad_hooks(torch):
    """PyTorch's docs example of register_multi_grad_hook, more backwards, mode "any", and the refusals."""
    graph = torch.autograd.graph
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    c, d = a * b, a * b
    seen, firsts = [], []
    handle = graph.register_multi_grad_hook((a, b, c, d), lambda grads: seen.append([_listed(g) for g in grads]))
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,), retain_graph=True)
    (c.sum() + d.sum()).backward(retain_graph=True)
    torch.autograd.grad(d.sum(), [d], retain_graph=True)
    handle.remove()
    c.sum().backward(retain_graph=True)
    with graph.register_multi_grad_hook((a, b, c), lambda g: firsts.append(g.tolist()), mode="any"):
        (c * 2).sum().backward(retain_graph=True)
        (d * 3).sum().backward(retain_graph=True)
    (c * 2).sum().backward()
    refused = []
    for tensors, mode, kind in (((a,), "some", ValueError), ((a, torch.ones(2)), "all", AssertionError)):
        with pytest.raises(kind) as caught:
            graph.register_multi_grad_hook(tensors, print, mode=mode)
        refused.append(str(caught.value))
    return seen, firsts, refused, a.grad.tolist()


def _listed(g):
    return None if g is None else g.tolist()


def test_register_multi_grad_hook_is_torchs(torch_like, oracle):
    assert _multi_grad_hooks(torch_like) == _multi_grad_hooks(oracle)


def _gradient_edges(torch):
    graph = torch.autograd.graph
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    z = (y**2).sum()
    edge, leaf = graph.get_gradient_edge(y), graph.get_gradient_edge(x)
    del y  # (the edge keeps its node)
    out = [type(edge).__name__, type(edge.node).__name__, edge.output_nr, type(leaf.node).__name__, leaf.output_nr]
    out.append([g.tolist() for g in torch.autograd.grad(z, edge, retain_graph=True)])
    out.append([g.tolist() for g in torch.autograd.grad(z, (leaf, edge), retain_graph=True)])
    z.backward(inputs=[leaf])
    out.append(x.grad.tolist())
    with pytest.raises(RuntimeError) as caught:
        graph.get_gradient_edge(torch.ones(2))
    return [*out, str(caught.value), tuple(graph.GradientEdge._fields)]


def test_gradient_edges_are_torchs_and_serve_as_inputs_of_grad_and_backward(torch_like, oracle):
    assert _gradient_edges(torch_like) == _gradient_edges(oracle)
