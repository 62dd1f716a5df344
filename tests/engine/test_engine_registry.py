"""Registry-driven checks: every op's vjps against finite differences, its samples, its infer rule.

Parametrized by op name and sample index from `engine.OPS`, so an op declared tomorrow is
checked here without a new test.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_testkit import call_op, differentiable_ops, sample_cases, sample_variables

import engine
from engine import Variable, grad_fn_names, registry, shapes
from engine.shapes import ShapeError

GRAD_CASES = sample_cases(lambda op: op.differentiable)
GRADGRAD_CASES = sample_cases(lambda op: op.differentiable and op.twice_differentiable)
ALL_CASES = sample_cases()


def _ids(cases):
    return [f"{name}-{i}" for name, i in cases]


def test_registry_is_populated():
    # The engine's whole surface comes from the registry; a broken import would leave it empty.
    assert len(engine.OPS) >= 40
    for name in ("add", "mul", "mm", "sum", "getitem", "setitem", "softmax", "cat"):
        assert name in engine.OPS
        assert callable(getattr(engine, name))


@pytest.mark.parametrize("name", sorted(engine.OPS))
def test_every_op_has_samples(name):
    op = engine.OPS[name]
    assert op.samples, (
        f"op {name!r} declares no samples, so nothing checks its gradients or its PyTorch twin: "
        f"add `samples=(Sample(...),)` to its defop"
    )


@pytest.mark.parametrize("name", differentiable_ops())
def test_every_differentiable_op_is_gradchecked(name):
    op = engine.OPS[name]
    cases = [c for c in GRAD_CASES if c[0] == name]
    assert cases, f"differentiable op {name!r} has no sample, so gradcheck never runs on it"
    # At least one sample must have a floating input for gradcheck to differentiate.
    floats = [any(v.requires_grad for v in sample_variables(op, i)[0]) for _, i in cases]
    assert any(floats), f"no sample of {name!r} has a floating input to differentiate"


@pytest.mark.parametrize("name", sorted(engine.OPS))
def test_every_op_has_an_infer_rule(name):
    assert engine.OPS[name].infer is not None, f"op {name!r} has no infer rule (shape/dtype inference)"


@pytest.mark.parametrize(("name", "index"), GRAD_CASES, ids=_ids(GRAD_CASES))
def test_gradcheck(name, index):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, seed=index)
    if not any(v.requires_grad for v in inputs):
        pytest.fail(f"sample {index} of {name!r} has no floating input")
    assert engine.gradcheck(call_op(op, attrs), inputs)


@pytest.mark.parametrize(("name", "index"), GRADGRAD_CASES, ids=_ids(GRADGRAD_CASES))
def test_gradgradcheck(name, index):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, seed=index)
    assert engine.gradgradcheck(call_op(op, attrs), inputs)


def _has_mask(inputs):
    return any(v.dtype == np.bool_ for v in inputs[1:])


@pytest.mark.parametrize(("name", "index"), ALL_CASES, ids=_ids(ALL_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_infer_matches_forward(name, index, dtype):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, dtype=dtype, seed=index)
    out = op.call(inputs, attrs)
    inferred = op.infer([v.shape for v in inputs], [v.dtype for v in inputs], attrs)
    shape, out_dtype = inferred
    if name == "getitem" and _has_mask(inputs):
        # A boolean mask's result length depends on the mask's values, which infer never sees:
        # the rule gives an upper bound (the mask's size), marked as such, never taken as exact.
        assert isinstance(shape, shapes.Bounded) and len(shape) == out.ndim
        assert all(b >= s for b, s in zip(shape, out.shape)) and np.dtype(out_dtype) == out.dtype
        return
    assert np.dtype(out_dtype) == out.dtype, f"{name}: infer says {out_dtype}, forward gives {out.dtype}"
    assert tuple(shape) == out.shape, f"{name}: infer says {shape}, forward gives {out.shape}"


FITTING_CASES = sample_cases(lambda op: op.node_class is not None and op.node_class.fits)


def test_fitting_ops_are_the_one_input_ops_that_keep_shapes():
    fitting = {name for name, _ in FITTING_CASES}
    assert {"tanh", "exp", "sum", "mean", "permute", "erf"} <= fitting
    assert not fitting & {"mul", "add", "mm", "matmul", "expand", "reshape", "sum_to", "cast"}


@pytest.mark.parametrize(("name", "index"), FITTING_CASES, ids=_ids(FITTING_CASES))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["f16", "f32", "f64"])
def test_fitting_ops_return_their_inputs_shapes_and_dtypes(name, index, dtype):
    """The backward walk trusts a node class whose `fits` is set to return each input's shape and dtype
    (it does not sum or cast them back): checked here for every sample in every float dtype."""
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, dtype=dtype, seed=index)
    out = op.call(inputs, attrs)
    assert out.dtype == np.dtype(dtype), f"{name}: a {np.dtype(dtype).name} input gives {out.dtype}"
    node = out.grad_fn
    with engine.no_grad():
        grads = node.vjp(Variable(np.ones(out.shape, out.numpy().dtype)), node.edges)
    for v, g in zip(inputs, grads):
        if v.requires_grad and g is not None:
            assert (g.shape, g.dtype) == (v.shape, v.dtype), (
                f"{name}: gradient {g.shape} {g.dtype} for {v.shape} {v.dtype}"
            )


ALIKE_CASES = sample_cases(lambda op: op.name in registry.ALIKE_FITS)


@pytest.mark.parametrize(("name", "index"), ALIKE_CASES, ids=_ids(ALIKE_CASES))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=["f16", "f32", "f64"])
def test_alike_inputs_make_fitting_nodes_whose_gradients_fit(name, index, dtype):
    """An op of `ALIKE_FITS` given inputs of one dtype (and, for "shape", one shape) makes a node of `fits`, whose
    gradients the walk does not fit: each is its input's shape and dtype, with and without create_graph. Inputs
    of two dtypes or (for "shape") two shapes make a node of the general class."""
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, dtype=dtype, seed=index)
    out = op.call(inputs, attrs)
    x, y = inputs
    alike = x.dtype == y.dtype and (registry.ALIKE_FITS[name] == "dtype" or x.shape == y.shape)
    assert out.grad_fn.fits is alike and type(out.grad_fn).__name__ == op.node_class.__name__
    if alike:
        for create_graph in (False, True):
            with engine.enable_grad() if create_graph else engine.no_grad():
                g = Variable(np.ones(out.shape, out.detach().numpy().dtype), requires_grad=create_graph)
                grads = out.grad_fn.vjp(g, out.grad_fn.edges)
            for v, gi in zip(inputs, grads):
                assert (gi.shape, gi.dtype) == (v.shape, v.dtype), f"{name}: {gi.shape} {gi.dtype} for {v.shape}"
    other = Variable(y.detach().numpy().astype(np.float64 if dtype != np.float64 else np.float32), requires_grad=True)
    if registry.ALIKE_FITS[name] == "dtype":  # (mm: inputs of two dtypes are refused, as PyTorch's)
        with pytest.raises(RuntimeError, match="same dtype"):
            op.call([x, other], attrs)
        return
    mixed = op.call([x, other], attrs)
    assert not mixed.grad_fn.fits
    gx, gy = engine.grad(mixed.sum(), [x, other])
    assert (gx.shape, gx.dtype, gy.shape, gy.dtype) == (x.shape, x.dtype, other.shape, other.dtype)


@pytest.mark.parametrize(("name", "index"), ALL_CASES, ids=_ids(ALL_CASES))
def test_forward_records_graph_only_when_differentiable(name, index):
    op = engine.OPS[name]
    inputs, attrs = sample_variables(op, index, seed=index)
    out = op.call(inputs, attrs)
    assert isinstance(out, Variable)
    if op.differentiable and any(v.requires_grad for v in inputs):
        assert out.requires_grad and out.grad_fn is not None
        if not op.composite:
            assert type(out.grad_fn).__name__ == grad_fn_names.static(name)  # PyTorch's (or its first overload's)
    else:
        assert not out.requires_grad and out.grad_fn is None
    with engine.no_grad():
        quiet = op.call(inputs, attrs)
    # (a view made in no_grad mode requires grad when its base does: PyTorch's)
    assert quiet.grad_fn is None and quiet.requires_grad == (quiet._is_view() and quiet._base.requires_grad)
    np.testing.assert_array_equal(quiet.detach().numpy(), out.detach().numpy())


def test_infer_rejects_bad_shapes():
    ops = engine.OPS
    f64 = np.dtype(np.float64)
    bad = [
        ("add", [(3, 4), (5,)], {}),
        ("mm", [(3, 4), (3, 4)], {}),
        ("matmul", [(2, 3), (4, 5)], {}),
        ("reshape", [(3, 4)], {"shape": (5,)}),
        ("expand", [(3, 2)], {"shape": (3, 4)}),
        ("sum", [(3, 4)], {"dim": 2}),
        ("cat", [(2, 3), (2, 4)], {"dim": 0}),
        ("stack", [(2, 3), (3, 2)], {"dim": 0}),
        ("permute", [(2, 3)], {"dims": (0, 0)}),
        ("sum_to", [(3, 4)], {"shape": (5,)}),
    ]
    for name, in_shapes, given in bad:
        op = ops[name]
        attrs = op.check_attrs(given)
        with pytest.raises(ShapeError):
            op.infer(in_shapes, [f64] * len(in_shapes), attrs)


# --- the checkers themselves must be able to fail ---------------------------------------------------


class _WrongSlope(engine.Function):
    """x ** 2 whose backward claims 2.1 x: gradcheck must reject it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 2.1


class _DetachedSlope(engine.Function):
    """x ** 3 with a right first derivative computed outside the graph: its second derivative
    (seen by gradgradcheck through create_graph) is wrong."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * Variable(3 * x.data**2)


def test_gradcheck_rejects_a_wrong_gradient():
    x = Variable(np.array([0.5, -1.5, 2.0]), requires_grad=True)
    with pytest.raises(engine.GradcheckError, match="Jacobian mismatch"):
        engine.gradcheck(_WrongSlope.apply, [x])
    assert engine.gradcheck(_WrongSlope.apply, [x], raise_exception=False) is False


def test_gradgradcheck_rejects_a_wrong_second_derivative():
    x = Variable(np.array([0.5, -1.5, 2.0]), requires_grad=True)
    assert engine.gradcheck(_DetachedSlope.apply, [x])
    with pytest.raises(engine.GradcheckError):
        engine.gradgradcheck(_DetachedSlope.apply, [x])


def test_gradcheck_requires_float64():
    x = Variable(np.array([0.5], dtype=np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="float64"):
        engine.gradcheck(lambda v: v * 2, [x])


def test_keyword_attributes_checked_once_keep_their_type_rules():
    """`parse_call` keeps the checked attributes of a keyword call per op: a value equal to a kept
    one but of another type is checked on its own (`min=True` is refused after `min=1` passed), and
    a kept call's attributes are the same whichever call made them."""
    x, clamp = Variable(np.array([-2.0, 0.5, 3.0])), engine.registry.F.clamp  # the op itself (x.clamp takes tensors)
    for _ in range(2):
        np.testing.assert_array_equal(clamp(x, min=1).numpy(), [1.0, 1.0, 3.0])
        np.testing.assert_array_equal(clamp(x, min=1.0, max=2).numpy(), [1.0, 1.0, 2.0])
        with pytest.raises(ValueError, match="must be a number, got"):
            clamp(x, min=True)
        with pytest.raises(TypeError, match="unexpected attribute"):
            clamp(x, low=0)
    np.testing.assert_array_equal(clamp(x, min=np.float32(0.5)).numpy(), [0.5, 0.5, 3.0])  # not kept: not plain
    assert clamp(x, max=1).grad_fn is None
