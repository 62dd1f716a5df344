"""torch.autograd as PyTorch ships it today (issue 22, items 5 and 6), three ways: on the client
(embedded and against a live server: the `session` fixture), on the engine, and on PyTorch in
float64, the oracle. Each program is written once against a module `m` (`client`, `engine` or
`torch`): gradcheck/gradgradcheck keywords, `autograd.functional` on tensors and tuples,
`grad_fn.next_functions`, forward-mode AD (`forward_ad`, custom Function `jvp`), `func.jvp/vjp/grad`,
and on the client, that forward mode is one request of `jvp` nodes."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(22)
X = RNG.standard_normal(4)
Y = RNG.standard_normal(4)
V = RNG.standard_normal(4)
W = RNG.standard_normal((3, 4))
TOL = dict(rtol=1e-9, atol=1e-12)
MODULES = (
    ("client", client, client.tensor),
    ("engine", engine, engine.tensor),
    ("torch", torch, lambda a, requires_grad=False: torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)),
)


def host(v):
    if v is None:
        return None
    if isinstance(v, (tuple, list)):
        return [host(x) for x in v]
    return np.asarray(v.detach().numpy(), dtype=np.float64)


def three_ways(program, *arrays, requires_grad=False):
    """program(m, *leaves) -> tensors (nested tuples allowed) on the client, the engine and torch;
    asserts the three agree (same structure, values to 1e-9) and returns the client's as arrays."""
    results = {}
    for name, m, make in MODULES:
        leaves = [make(np.array(a, dtype=np.float64), requires_grad=requires_grad) for a in arrays]
        results[name] = host(program(m, *leaves))
    for name in ("client", "engine"):
        _same(results[name], results["torch"], name)
    return results["client"]


def _same(got, want, where):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: structure {got!r} vs {want!r}"
        for g, w in zip(got, want):
            _same(g, w, where)
        return
    assert got is not None and got.shape == want.shape, f"{where}: {got!r} vs {want!r}"
    np.testing.assert_allclose(got, want, err_msg=where, **TOL)


def functional(m):
    return m.autograd.functional


# ------------------------------------------------------------------ torch.autograd.functional


def test_vjp_and_jvp_on_tensors_and_tuples(session):
    def program(m, x, y, v):
        F = functional(m)
        f = lambda a: (a.exp() * 2).sin()  # noqa: E731
        g = lambda a, b: (a * b, (a - b).sum())  # noqa: E731
        out1, vjp1 = F.vjp(f, x, v)
        outs, vjps = F.vjp(g, (x, y), (v, m.ones((), dtype=m.float64)))
        _, jvp1 = F.jvp(f, x, v)
        _, jvps = F.jvp(g, (x, y), (v, v))
        _, scalar = F.vjp(lambda a: (a * a).sum(), x)  # v may be left out for a one-element output
        return [out1, vjp1, tuple(outs), tuple(vjps), jvp1, tuple(jvps), scalar]

    three_ways(program, X, Y, V)


def test_jacobian_hessian_vhp_hvp_with_torch_keywords(session):
    def program(m, x, y, v):
        F = functional(m)
        f = lambda a, b: (a.tanh() * b, a.sum() * b.pow(2).sum())  # noqa: E731
        s = lambda a: (a.sin() * a.pow(3)).sum()  # noqa: E731
        jac = F.jacobian(f, (x, y), create_graph=False, strict=False, vectorize=True, strategy="forward-mode")
        single = F.jacobian(lambda a: a.exp(), x)
        hess = F.hessian(s, x, vectorize=False, outer_jacobian_strategy="reverse-mode")
        pair = F.hessian(lambda a, b: (a * b.exp()).sum(), (x, y))
        _, vh = F.vhp(s, x, v)
        _, hv = F.hvp(s, x, v, strict=False)
        return [tuple(tuple(r) for r in jac), single, hess, tuple(tuple(r) for r in pair), vh, hv]

    three_ways(program, X, Y, V)


def test_a_jacobian_of_thousands_of_rows_over_a_large_constant_is_computed(session):
    # torch.func's tutorial (jacfwd vs jacrev): 2048 rows through a 2048 x 32 weight. Each row was priced
    # with the weight in its recorded graph (a 1.2 GiB "peak", refused), and sent a one-hot seed of 2048
    # numbers (16 MiB a request); now a row's graph holds what it differentiates and seeds are made there
    w, b, x = RNG.standard_normal((2048, 32)), RNG.standard_normal(2048), RNG.standard_normal(32)

    def program(m, x):
        weight, bias = (m.tensor(a) if m is not torch else torch.tensor(a) for a in (w, b))
        return m.func.jacrev(lambda v: m.nn.functional.linear(v, weight, bias).tanh())(x)

    jacobian = three_ways(program, x)
    assert jacobian.shape == (2048, 32)


def test_strict_refuses_an_independent_input_as_torch_does(session):
    for _, m, make in MODULES:
        x, y = make(X.copy()), make(Y.copy())
        with pytest.raises(RuntimeError, match="independent of input 1"):
            functional(m).vjp(lambda a, b: a * 2, (x, y), make(V.copy()), strict=True)
        with pytest.raises(RuntimeError, match="can only be None"):
            functional(m).vjp(lambda a: a * 2, x)


def test_create_graph_keeps_results_differentiable(session):
    def program(m, x, v):
        _, hv = functional(m).hvp(lambda a: (a.pow(3) * a.cos()).sum(), x, v, create_graph=True)
        (g,) = m.autograd.grad(hv.sum(), x)
        return [hv, g]

    three_ways(program, X, V, requires_grad=True)


# ------------------------------------------------------------------ gradcheck and gradgradcheck


def test_gradcheck_accepts_torchs_keywords(session):
    for name, m, make in MODULES:
        x = make(X.copy(), requires_grad=True)
        f = lambda a: (a.sin() * a).sum()  # noqa: E731
        assert m.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True), name
        assert m.autograd.gradcheck(f, (x,), check_forward_ad=True, check_undefined_grad=False, fast_mode=True), name
        assert m.autograd.gradgradcheck(f, (x,), check_fwd_over_rev=True, fast_mode=False), name
        assert m.autograd.gradcheck(lambda a: a * a.detach(), (x,), raise_exception=False) is False, name


# ------------------------------------------------------------------ next_functions, is_leaf, retain_grad


def _names(fn):
    return [None if f is None else type(f).__name__.rstrip("0123456789").removesuffix("Backward") for f, _ in fn]


def test_next_functions_in_torchs_order(session):
    seen = {}
    for name, _m, make in MODULES:
        b = make(X.copy(), requires_grad=True)
        y = (2 * b, b * 2, 2 + b, b.exp() * b, (b * b.detach()).sum())
        seen[name] = [_names(t.grad_fn.next_functions) for t in y]
        assert [type(f).__name__ for f, _ in (2 * b).grad_fn.next_functions] == ["AccumulateGrad", "NoneType"], name
        assert (2 * b).grad_fn.next_functions[0][0].variable is b, name
    assert seen["client"] == seen["engine"] == seen["torch"]


def test_is_leaf_retain_grad_and_requires_grad_false(session):
    def program(m, x):
        assert x.is_leaf
        y = x.exp()
        assert not y.is_leaf and y.grad_fn is not None
        y.retain_grad()
        (y * y).sum().backward()
        z = m.tensor(np.array(X), requires_grad=True).requires_grad_(False)
        assert not z.requires_grad and z.is_leaf
        return [y.grad, x.grad]

    three_ways(program, X, requires_grad=True)


# ------------------------------------------------------------------ forward-mode AD


def _dual_program(m, x, v):
    fwAD = m.autograd.forward_ad
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, v)
        y = (dual.tanh() * (dual @ dual.exp())).log_softmax(0)
        primal, tangent = fwAD.unpack_dual(y)
        assert fwAD.unpack_dual(x).tangent is None
        return [primal, tangent]


def test_forward_ad_dual_tensors(session):
    three_ways(_dual_program, X, V)


def test_forward_ad_tangent_is_one_request_of_jvp_nodes(recorder):
    x, v = client.tensor(X.copy()), client.tensor(V.copy())
    _, tangent = _dual_program(client, x, v)
    tangent.detach().numpy()
    assert recorder.paths() == ["/forward"]
    nodes = recorder.calls[0][2]["graph"]["nodes"]
    assert [n["op"] for n in nodes].count("jvp") == 1


def _cube(m):
    class Cube(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_forward(x)
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return 3 * x * x * t

    return Cube


def test_custom_function_with_jvp(session):
    def program(m, x, v):
        fwAD = m.autograd.forward_ad
        with fwAD.dual_level():
            y = _cube(m).apply(fwAD.make_dual(x, v)).sin()
            return [fwAD.unpack_dual(y).tangent]

    three_ways(program, X, V)


# ------------------------------------------------------------------ torch.func


def test_func_jvp_vjp_grad(session):
    def program(m, x, y, v):
        f = lambda a, b: (a.sin() * b).tanh()  # noqa: E731
        out, jv = m.func.jvp(f, (x, y), (v, v))
        out2, vjp_fn = m.func.vjp(f, x, y)
        ga, gb = vjp_fn(v)
        loss = lambda a, b: (a.exp() * b).sum()  # noqa: E731
        g = m.func.grad(loss)(x, y)
        g01 = m.func.grad(loss, argnums=(0, 1))(x, y)
        gv, value = m.func.grad_and_value(loss)(x, y)
        return [out, jv, out2, ga, gb, g, tuple(g01), gv, value]

    three_ways(program, X, Y, V)


def test_forward_over_reverse_hvp_with_func_is_one_request(session, recorder):
    def program(m, x, v):
        loss = lambda a: (a.sin() * a.pow(3)).sum()  # noqa: E731
        _, hv = m.func.jvp(m.func.grad(loss), (x,), (v,))
        return [hv]

    before = len(recorder.calls)
    three_ways(program, X, V)
    sent = recorder.calls[before:]
    assert [path for _, path, _ in sent] == ["/forward"]
    ops = [n["op"] for n in sent[0][2]["graph"]["nodes"]]
    assert "jvp" in ops and "grad" in ops


@pytest.mark.parametrize("create_graph", [False, True])
def test_materialize_grads_gives_zeros_for_an_unused_input_as_torch_does(session, create_graph):
    """`materialize_grads=True`: an input the outputs don't reach gets zeros of its shape (needing grad
    exactly when create_graph is set), `allow_unused` defaults to it, and False beside it is refused."""

    def program(m, x, u):
        gx, gu = m.autograd.grad((x * x).sum(), [x, u], materialize_grads=True, create_graph=create_graph)
        assert gu.requires_grad is create_graph and gu.grad_fn is None
        return gx, gu

    _, zeros = three_ways(program, X, W, requires_grad=True)
    assert zeros.shape == W.shape and not zeros.any()
    for _, m, make in MODULES:
        x, u = make(X, requires_grad=True), make(W, requires_grad=True)
        with pytest.raises(ValueError, match="allow_unused to be True or not passed when materialize_grads=True"):
            m.autograd.grad((x * x).sum(), [x, u], materialize_grads=True, allow_unused=False)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            m.autograd.grad((x * x).sum(), [x, u])


@pytest.mark.parametrize("create_graph", [False, True])
def test_is_grads_batched_gives_one_vjp_a_row_as_torch_does(session, create_graph):
    """`is_grads_batched=True`: each grad_output's first dimension is a batch, one vjp a row, stacked per input
    (torch's vmap); with two outputs the rows pair up, an unused input stays None, a materialized one gets
    zeros of its own shape (torch's), and with create_graph the rows differentiate again."""

    def program(m, x, u):
        out = (x * x).sin()
        rows = m.tensor(np.eye(4) + 0.5)
        (jac,) = m.autograd.grad(out, x, rows, is_grads_batched=True, create_graph=create_graph, retain_graph=True)
        assert jac.requires_grad is create_graph
        two = m.autograd.grad(
            [out, x.sum()],
            [x, u],
            [rows, m.tensor(np.arange(4.0))],
            is_grads_batched=True,
            allow_unused=True,
            retain_graph=True,
        )
        assert two[1] is None
        _, zeros = m.autograd.grad(
            out, [x, u], rows[:2], is_grads_batched=True, materialize_grads=True, retain_graph=True
        )
        again = m.autograd.grad(jac.sum(), x)[0] if create_graph else jac
        return jac, two[0], zeros, again

    jac, pair, zeros, _ = three_ways(program, X, W, requires_grad=True)
    assert jac.shape == (4, 4) and pair.shape == (4, 4) and zeros.shape == W.shape and not zeros.any()


def test_is_grads_batched_refuses_rows_that_do_not_fit_the_outputs(session):
    """A grad_output whose trailing shape is not its output's, or batches of different lengths, or a missing
    grad_output: the error torch gives, on both Variables."""
    for _, m, make in MODULES[:2]:
        x = make(X, requires_grad=True)
        out = x * 2
        with pytest.raises(
            RuntimeError, match=r"grad_output\[0\] has a shape of \(2, 3\) and output\[0\] has a shape of \(4,\)"
        ):
            m.autograd.grad(out, x, m.tensor(np.ones((2, 3))), is_grads_batched=True, retain_graph=True)
        with pytest.raises(RuntimeError, match="batch dimension"):
            m.autograd.grad(
                [out, out], x, [m.tensor(np.ones((2, 4))), m.tensor(np.ones((3, 4)))], is_grads_batched=True
            )
        with pytest.raises(ValueError, match=r"grad_outputs\[0\] is None"):
            m.autograd.grad(out.sum(), x, None, is_grads_batched=True)
