"""Higher-order gradients through the client (issue 13.1): `create_graph=True` gives lazy Variables
standing for `grad` nodes (graph format 1.1), sent with the next request.

Every program is written once against a module `m` (`client`, `engine` or `torch`) and run three
ways: through the client (embedded and against a live server: the `session` fixture), on the
engine, and on PyTorch in float64, the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

RNG = np.random.default_rng(13)
X = RNG.standard_normal((3, 4))
W1 = RNG.standard_normal((4, 5)) * 0.5
W2 = RNG.standard_normal((5, 1)) * 0.5
V = RNG.standard_normal((3, 4))
pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")  # torch's


def host(v):
    return None if v is None else np.asarray(v.detach().numpy(), dtype=np.float64)


def three_ways(program, *arrays):
    """program(m, *leaves) -> list of tensors, run on the client (current session), the engine and
    PyTorch (float64 leaves that require grad); asserts the three agree and returns the client's."""
    torch = pytest.importorskip("torch")
    results = {}
    for name, m, make in (
        ("client", client, client.tensor),
        ("engine", engine, engine.tensor),
        ("torch", torch, lambda a, requires_grad: torch.tensor(a, requires_grad=requires_grad)),
    ):
        leaves = [make(a.copy(), requires_grad=True) for a in arrays]
        results[name] = [host(v) for v in program(m, *leaves)]
    for name in ("client", "engine"):
        for got, want in zip(results[name], results["torch"]):
            assert (got is None) == (want is None), name
            if want is not None:
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=name)
    return results["client"]


def test_hessian_vector_product_is_one_request(recorder):
    def program(m, x, v):
        f = (x.tanh() * x.pow(3)).sum()
        (g,) = m.autograd.grad(f, x, create_graph=True)
        (hv,) = m.autograd.grad(g, x, grad_outputs=v, retain_graph=True)
        (hv_dot,) = m.autograd.grad((g * v).sum(), x)
        return [g, hv, hv_dot]

    _, hv, hv_dot = three_ways(program, X, V)
    np.testing.assert_allclose(hv, hv_dot, rtol=1e-12)
    assert recorder.paths() == ["/backward", "/backward"]  # one request per grad(); g came back with the first
    assert recorder.calls[0][2]["graph"]["version"] == "1.1"
    assert any(node["op"] == "grad" for node in recorder.calls[0][2]["graph"]["nodes"])


@pytest.mark.parametrize("fn", ["sin", "exp", "tanh", "sigmoid", "cube", "log"])
def test_second_and_third_derivatives_of_elementwise_functions(session, fn):
    def program(m, x):
        y = x.pow(3) if fn == "cube" else getattr(x.abs() if fn == "log" else x, fn)()
        (d1,) = m.autograd.grad(y.sum(), x, create_graph=True)
        (d2,) = m.autograd.grad(d1.sum(), x, create_graph=True)
        (d3,) = m.autograd.grad(d2.sum(), x)
        return [d1, d2, d3]

    *_, d3 = three_ways(program, X)
    if fn == "cube":
        np.testing.assert_allclose(d3, np.full_like(X, 6.0))


def critic(x, w1, w2):
    return x.mm(w1).tanh().mm(w2).sum()


def test_gradient_penalty_trains(session):
    def program(m, x, w1, w2):
        losses = []
        for _ in range(4):
            (gx,) = m.autograd.grad(critic(x, w1, w2), x, create_graph=True)
            penalty = (gx.norm() - 1) ** 2
            penalty.backward()
            losses.append(penalty.detach())
            for w in (w1, w2):
                w.data -= 0.1 * w.grad.data
                w.grad = None
        return [*losses, w1, w2, x.grad]

    *losses, _, _, x_grad = three_ways(program, X, W1, W2)
    assert losses[-1] < losses[0]  # the penalty falls as the critic trains
    assert x_grad is not None


def test_double_backward_through_mm(session):
    def program(m, x, w):
        y = x.mm(w).pow(2).sum()
        (gx,) = m.autograd.grad(y, x, create_graph=True)
        (gx * gx).sum().backward()
        return [gx, x.grad, w.grad]

    three_ways(program, X, W1)


@pytest.mark.parametrize("reduction", ["softmax", "logsumexp"])
def test_double_backward_through_softmax_and_logsumexp(session, reduction):
    def program(m, x):
        y = (x.softmax(1) * m.tensor(V)).sum() if reduction == "softmax" else x.logsumexp(1).pow(2).sum()
        (g,) = m.autograd.grad(y, x, create_graph=True)
        g.pow(2).sum().backward()
        return [g, x.grad]

    three_ways(program, X)


def test_custom_function_with_a_differentiable_backward(session):
    def program(m, x):
        class Cube(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * a * a

            @staticmethod
            def backward(ctx, grad_output):
                (a,) = ctx.saved_tensors
                return 3 * a * a * grad_output

        (d1,) = m.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
        (d2,) = m.autograd.grad(d1.sum(), x)
        return [d1, d2]

    _, d2 = three_ways(program, X)
    np.testing.assert_allclose(d2, 6 * X)


@pytest.mark.parametrize("saves", ["output", "output and input"])
def test_custom_function_that_saves_its_output_is_differentiated_through_it(session, saves):
    """PyTorch's tutorial pattern `result = i.exp(); ctx.save_for_backward(result)`: the second derivative
    goes through the saved output (it was 0 on the engine, the embedded client and the server)."""

    def program(m, x):
        class Exp(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                result = a.exp()
                ctx.save_for_backward(result, a) if saves == "output and input" else ctx.save_for_backward(result)
                return result

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output * ctx.saved_tensors[0]

        (d1,) = m.autograd.grad(Exp.apply(x).sum(), x, create_graph=True)
        (d2,) = m.autograd.grad((d1 * d1).sum(), x)
        return [d1, d2]

    _, d2 = three_ways(program, X)
    np.testing.assert_allclose(d2, 2 * np.exp(2 * X))


def test_engine_gradgradcheck_of_a_custom_function_that_saves_its_output():
    class Exp(engine.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            result = a.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            (result,) = ctx.saved_tensors
            return grad_output * result

    x = engine.tensor(RNG.standard_normal(4), requires_grad=True)
    assert engine.gradcheck(Exp.apply, (x,)) and engine.gradgradcheck(Exp.apply, (x,))


def test_backward_create_graph_accumulates_a_lazy_grad(recorder):
    def program(m, x):
        y = (x.pow(3) * x.sin()).sum()
        y.backward(create_graph=True)
        y.backward(create_graph=True)
        twice = x.grad
        x.grad = None
        twice.pow(2).sum().backward()
        return [twice, x.grad]

    x = client.tensor(X, requires_grad=True)
    (x.pow(3)).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None and x.grad.requires_grad and recorder.calls == []  # nothing sent yet
    three_ways(program, X)
    paths = recorder.paths()
    assert paths.count("/backward") == 1  # the backward through the twice-accumulated grad: one request


def test_retained_tapes_with_grad_nodes(mode, request):
    url = request.getfixturevalue("server").url if mode == "remote" else None
    with client.connect(url, tapes=True) as s:
        x = client.tensor(X, requires_grad=True)
        w = client.tensor(W1, requires_grad=True)
        (gx,) = client.grad(critic(x, w, client.tensor(W2)), x, create_graph=True)
        penalty = (gx.norm() - 1) ** 2
        penalty.backward(retain_graph=True)
        first = w.grad.numpy().copy()
        before = s.stats["/backward"]
        penalty.backward()
        assert s.stats["/backward"] == before + 1
        np.testing.assert_allclose(w.grad.numpy(), 2 * first, rtol=1e-12)
        with pytest.raises(RuntimeError, match="second time"):
            penalty.backward()
