"""Forward-mode AD on the engine against PyTorch (float64): every registry op's samples through
`forward_ad` dual Variables and through `func.jvp`, a custom Function with `jvp`, dual levels'
rules, and gradcheck's `check_forward_ad`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine_testkit import sample_cases, sample_variables, to_torch, torch_call  # noqa: E402

import engine  # noqa: E402
from engine import Variable, func  # noqa: E402
from engine.autograd import forward_ad as fwAD  # noqa: E402

pytestmark = pytest.mark.torch
CASES = sample_cases(lambda op: op.differentiable)
NO_TANGENT_IN_TORCH = {"scatter_prod"}  # forward AD of torch's scatter_reduce(reduce="prod")
TOL = dict(rtol=1e-9, atol=1e-11)


def _tangents(inputs, seed):
    rng = np.random.default_rng(seed + 100)
    return [Variable(rng.standard_normal(v.shape)) if v.dtype.kind == "f" else None for v in inputs]


def _torch_jvp(name, inputs, tangents, attrs):
    t_inputs = [to_torch(v, requires_grad=False) for v in inputs]
    with torch.autograd.forward_ad.dual_level():
        duals = [
            x if t is None else torch.autograd.forward_ad.make_dual(x, torch.from_numpy(t.numpy().copy()))
            for x, t in zip(t_inputs, tangents)
        ]
        out = torch_call(name, duals, attrs)
        primal, tangent = torch.autograd.forward_ad.unpack_dual(out)
        return primal.detach().numpy(), None if tangent is None else tangent.numpy()


def _central_difference(op, inputs, tangents, attrs):
    """Where torch 2.13 silently gives no tangent (NO_TANGENT_IN_TORCH): the central difference along the tangents."""
    moved = [
        [x if t is None else Variable(x.numpy() + step * t.numpy()) for x, t in zip(inputs, tangents)]
        for step in (1e-6, -1e-6)
    ]
    return (op.call(moved[0], attrs).numpy() - op.call(moved[1], attrs).numpy()) / 2e-6


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_forward_ad_matches_torch_on_every_sample(name, index):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, seed=index, requires_grad=False)
    tangents = _tangents(inputs, index)
    want_primal, want_tangent = _torch_jvp(name, inputs, tangents, attrs)
    if name in NO_TANGENT_IN_TORCH:
        want_tangent = _central_difference(op, inputs, tangents, attrs)
    with fwAD.dual_level():
        duals = [x if t is None else fwAD.make_dual(x, t) for x, t in zip(inputs, tangents)]
        primal, tangent = fwAD.unpack_dual(op.call(duals, attrs))
    np.testing.assert_allclose(primal.numpy(), want_primal, **TOL)
    if want_tangent is None:  # torch gives none where the output is not differentiable
        assert tangent is None or not np.any(tangent.numpy())
    else:
        tolerance = dict(rtol=1e-6, atol=1e-8) if name in NO_TANGENT_IN_TORCH else TOL
        np.testing.assert_allclose(tangent.numpy(), want_tangent, err_msg=f"{name} tangent", **tolerance)


@pytest.mark.parametrize(("name", "index"), CASES[::3], ids=[f"{n}-{i}" for n, i in CASES[::3]])
def test_func_jvp_matches_torch_func_jvp(name, index):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, seed=index, requires_grad=False)
    floats = [i for i, v in enumerate(inputs) if v.dtype.kind == "f"]
    tangents = _tangents(inputs, index)

    def call(m_inputs, run):
        def f(*xs):
            args = list(m_inputs)
            for i, x in zip(floats, xs):
                args[i] = x
            return run(args)

        return f

    out, jv = func.jvp(
        call(inputs, lambda a: op.call(a, attrs)), tuple(inputs[i] for i in floats), tuple(tangents[i] for i in floats)
    )
    t_inputs = [to_torch(v, requires_grad=False) for v in inputs]
    t_out, t_jv = torch.func.jvp(
        call(t_inputs, lambda a: torch_call(name, a, attrs)),
        tuple(t_inputs[i] for i in floats),
        tuple(torch.from_numpy(tangents[i].numpy().copy()) for i in floats),
    )
    np.testing.assert_allclose(out.numpy(), t_out.numpy(), **TOL)
    if name in NO_TANGENT_IN_TORCH:
        want = _central_difference(op, inputs, [t if i in floats else None for i, t in enumerate(tangents)], attrs)
        np.testing.assert_allclose(jv.numpy(), want, rtol=1e-6, atol=1e-8)
    else:
        np.testing.assert_allclose(jv.numpy(), t_jv.numpy(), **TOL)


class Cube(engine.Function):
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


def _torch_cube():
    class TCube(torch.autograd.Function):
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

    return TCube


def test_custom_function_jvp_matches_torch():
    x, t = np.array([0.5, -1.5, 2.0]), np.array([1.0, 2.0, -0.5])
    with fwAD.dual_level():
        y = Cube.apply(fwAD.make_dual(Variable(x), Variable(t))).sin()
        got = fwAD.unpack_dual(y).tangent.numpy()
    TCube = _torch_cube()
    with torch.autograd.forward_ad.dual_level():
        ty = TCube.apply(torch.autograd.forward_ad.make_dual(torch.tensor(x), torch.tensor(t))).sin()
        want = torch.autograd.forward_ad.unpack_dual(ty).tangent.numpy()
    np.testing.assert_allclose(got, want, **TOL)


def test_custom_function_without_jvp_refuses_forward_mode_as_torch_does():
    class NoJvp(engine.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="must implement the jvp function"):
        NoJvp.apply(fwAD.make_dual(Variable(np.ones(2)), Variable(np.ones(2))))


def test_dual_level_rules_follow_torch():
    x = Variable(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(x, x)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="different size"):
            fwAD.make_dual(x, Variable(np.ones(3)))
        dual = fwAD.make_dual(x, Variable(np.array([3.0, 4.0])))
        unpacked = fwAD.unpack_dual(dual * 2)
        assert unpacked._fields == ("primal", "tangent")
        np.testing.assert_array_equal(unpacked.tangent.numpy(), [6.0, 8.0])
        assert fwAD.unpack_dual(unpacked.primal).tangent is None  # the primal is a view without the tangent
        assert fwAD.unpack_dual(x).tangent is None
        with pytest.raises(RuntimeError, match="Nested"):
            fwAD.enter_dual_level()
    assert fwAD.unpack_dual(dual).tangent is None  # tangents end with their level


def test_forward_over_reverse_through_duals_gives_the_hessian_vector_product():
    xs, vs = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    x = Variable(xs, requires_grad=True)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, Variable(vs))
        (g,) = engine.autograd.grad((dual.tanh() * dual.pow(3)).sum(), dual, create_graph=True)
        hv = fwAD.unpack_dual(g).tangent.detach().numpy()
    tx = torch.tensor(xs, requires_grad=True)
    want = torch.autograd.functional.hvp(lambda a: (a.tanh() * a.pow(3)).sum(), tx, torch.tensor(vs))[1]
    np.testing.assert_allclose(hv, want.numpy(), **TOL)


@pytest.mark.parametrize(
    "f",
    [lambda m, x, w: m.mm(x, w).sum(), lambda m, x, w: (m.mm(x, w).clamp(min=0) ** 2).sum()],
    ids=["mm", "clamp-pow"],
)
def test_a_gradient_through_a_dual_that_needs_no_grad_keeps_its_tangent(f):
    """A dual input that does not require grad (the data) reaches the weights' gradient through
    mm's vjp, `x.T @ g`: the transpose of a dual carries its tangent, as in PyTorch."""
    rng = np.random.default_rng(0)
    xs, ws, ts = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal((3, 4))

    def tangent_of_grad(m, fw):
        w = m.tensor(ws, requires_grad=True)
        with fw.dual_level():
            x = fw.make_dual(m.tensor(xs), m.tensor(ts))
            (g,) = m.autograd.grad(f(m, x, w), [w], create_graph=True)
            return fw.unpack_dual(g).tangent

    got, want = tangent_of_grad(engine, fwAD), tangent_of_grad(torch, torch.autograd.forward_ad)
    assert got is not None
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **TOL)


def test_gradcheck_check_forward_ad_catches_a_wrong_jvp():
    class WrongJvp(Cube):
        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return 2 * x * x * t

    x = Variable(np.array([0.5, -1.5]), requires_grad=True)
    assert engine.autograd.gradcheck(
        Cube.apply, (x,), check_forward_ad=True, check_undefined_grad=False, fast_mode=True
    )
    assert engine.autograd.gradcheck(WrongJvp.apply, (x,))  # the backward is right
    with pytest.raises(engine.GradcheckError, match="forward-mode"):
        engine.autograd.gradcheck(WrongJvp.apply, (x,), check_forward_ad=True)
    assert engine.autograd.gradcheck(WrongJvp.apply, (x,), check_forward_ad=True, raise_exception=False) is False
    tx = torch.tensor([0.5, -1.5], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_torch_cube().apply, (tx,), check_forward_ad=True, fast_mode=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        engine.autograd.gradcheck(Cube.apply, (x,), not_a_keyword=True)
    assert engine.autograd.gradgradcheck(lambda a: (a.sin() * a).sum(), (x,), check_fwd_over_rev=True)


def test_grad_without_create_graph_inside_a_dual_level_keeps_the_tangents_torch_gives():
    """autograd.grad's detached gradients of a dual keep their tangents (forward-over-reverse without
    create_graph), through the vjps that otherwise run on the arrays (mm, clamp, pow, sum, mul, tanh, relu)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w_, x_ = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    got = {}
    for m in (torch, engine):
        fw = m.autograd.forward_ad
        x, w = m.tensor(x_, dtype=m.float64, requires_grad=True), m.tensor(w_, dtype=m.float64)
        with fw.dual_level():
            d = fw.make_dual(x, m.ones(2, 3, dtype=m.float64))
            y = (d.mm(w).clamp(min=0) ** 2 * 3 + d.tanh() + d.sigmoid().relu() / (d * d + 1)).sum()
            (g,) = m.autograd.grad(y, d)
            (h,) = m.autograd.grad((d**3 * d).mean(), x)
            got[m.__name__] = [fw.unpack_dual(v).tangent.numpy() for v in (g, h)]
            assert not g.requires_grad
    for a, b in zip(got["engine"], got["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-12)
