"""Differential tests: every registry op against its PyTorch twin, forward values and gradients,
in float32 and float64, on the registry's samples and on random shapes (hypothesis)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine_testkit import (  # noqa: E402
    BY_NAME,
    NO_DERIVATIVE_IN_TORCH,
    TORCH_OVERRIDES,
    assert_close,
    sample_arrays,
    sample_cases,
    to_torch,
    to_variables,
    torch_call,
    torch_dtype_name,
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import engine  # noqa: E402
from engine import Variable, shapes  # noqa: E402

pytestmark = pytest.mark.torch

DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["f32", "f64"]
CASES = sample_cases()
SETTINGS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def compare_op(name, arrays, attrs, dtype, seed=0):
    """Run op `name` in the engine and in torch on the same inputs; compare values, dtypes, grads."""
    op = engine.OPS[name]
    attrs = op.check_attrs(dict(attrs))
    inputs = to_variables(arrays, dtype)
    t_inputs = [to_torch(v) for v in inputs]
    out = op.call(inputs, attrs)
    t_out = torch_call(name, t_inputs, attrs)
    what = f"{name}{tuple(v.shape for v in inputs)} {attrs} {np.dtype(dtype).name}"
    assert out.shape == tuple(t_out.shape), f"{what}: shape {out.shape} vs torch {tuple(t_out.shape)}"
    assert out.dtype.name == torch_dtype_name(t_out), f"{what}: dtype {out.dtype} vs torch {t_out.dtype}"
    assert_close(out, t_out, dtype, f"{what}: forward")
    if name in NO_DERIVATIVE_IN_TORCH and t_out.requires_grad:
        # torch marks the result as requiring grad, then refuses a backward through it; the engine's
        # result requires no grad (the op declares no gradient), so neither computes one
        with pytest.raises(RuntimeError, match="not implemented"):
            t_out.sum().backward()
        assert not out.requires_grad and out.grad_fn is None
        return
    assert out.requires_grad == t_out.requires_grad, (
        f"{what}: requires_grad {out.requires_grad} vs torch {t_out.requires_grad}"
    )
    wrt = [i for i, v in enumerate(inputs) if v.requires_grad]
    if not op.differentiable:
        assert not out.requires_grad and out.grad_fn is None
        return
    assert out.requires_grad == bool(wrt)
    if not wrt or out.dtype.kind != "f":
        return
    cotangent = np.random.default_rng(seed).standard_normal(out.shape).astype(out.dtype)
    grads = engine.grad(out, [inputs[i] for i in wrt], Variable(cotangent), allow_unused=True)
    t_grads = torch.autograd.grad(t_out, [t_inputs[i] for i in wrt], torch.from_numpy(cotangent), allow_unused=True)
    for i, g, tg in zip(wrt, grads, t_grads):
        if tg is None:
            assert g is None or not np.any(g.numpy()), f"{what}: torch has no gradient for input {i}"
            continue
        assert g is not None, f"{what}: engine gave no gradient for input {i}"
        assert g.dtype == inputs[i].dtype, f"{what}: gradient {i} is {g.dtype}, input is {inputs[i].dtype}"
        assert_close(g, tg, dtype, f"{what}: gradient of input {i}")


# --- coverage of the twin table ----------------------------------------------------------------


def test_every_op_has_a_torch_twin():
    missing = sorted(set(engine.OPS) - BY_NAME - set(TORCH_OVERRIDES))
    assert not missing, (
        f"ops without a PyTorch twin: {missing}. For each, add its name to BY_NAME in "
        f"tests/engine/engine_testkit.py when torch.<name>(*inputs, **attrs) is the same op, "
        f"else an entry to TORCH_OVERRIDES there"
    )


def test_twin_table_has_no_stale_or_ambiguous_entries():
    assert not (BY_NAME & set(TORCH_OVERRIDES)), "an op is both BY_NAME and overridden"
    stale = sorted((BY_NAME | set(TORCH_OVERRIDES)) - set(engine.OPS))
    assert not stale, f"twin entries for ops the registry doesn't have: {stale}"
    for name in BY_NAME:
        assert callable(getattr(torch, name, None)), f"torch.{name} does not exist; move {name!r} to TORCH_OVERRIDES"


def test_comparison_harness_catches_a_wrong_twin(monkeypatch):
    import engine_testkit

    arrays = [np.linspace(-1, 1, 6).reshape(2, 3)]
    compare_op("exp", arrays, {}, np.float64)
    monkeypatch.setitem(engine_testkit.TORCH_OVERRIDES, "exp", lambda inputs, attrs: torch.exp(inputs[0]) * 1.001)
    with pytest.raises(AssertionError, match="forward"):
        compare_op("exp", arrays, {}, np.float64)
    # right values, wrong gradient: caught by the gradient comparison
    monkeypatch.setitem(
        engine_testkit.TORCH_OVERRIDES,
        "exp",
        lambda inputs, attrs: torch.exp(inputs[0]) + (inputs[0] - inputs[0].detach()) * 0.5,
    )
    with pytest.raises(AssertionError, match="gradient"):
        compare_op("exp", arrays, {}, np.float64)


# --- registry samples --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_sample_matches_torch(name, index, dtype):
    sample = engine.OPS[name].samples[index]
    arrays = sample_arrays(sample, np.random.default_rng(100 + index))
    compare_op(name, arrays, sample.attrs, dtype, seed=index)


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_sample_values_match_torch(name, index):
    """The same samples with fresh values drawn by hypothesis (same shapes and attributes)."""
    sample = engine.OPS[name].samples[index]

    @SETTINGS
    @given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES))
    def check(seed, dtype):
        arrays = sample_arrays(sample, np.random.default_rng(seed))
        compare_op(name, arrays, sample.attrs, dtype, seed=seed)

    check()


# --- random shapes -----------------------------------------------------------------------------


def _domain(op):
    """(low, high) the op's samples draw floats from (positive ranges for log, sqrt, pow, div)."""
    for s in op.samples:
        if s.make is None:
            return s.low, s.high
    return -2.0, 2.0


def _ops_with(rules, arity=None, required_attrs=False):
    out = []
    for name, op in sorted(engine.OPS.items()):
        if op.infer not in rules or op.composite and op.infer is None:
            continue
        if arity is not None and op.arity != arity:
            continue
        if not required_attrs and any(spec.required for spec in op.attrs.values()):
            continue
        out.append(name)
    return out


UNARY = _ops_with((shapes.same, shapes.floating), arity=1)
BINARY = _ops_with((shapes.broadcast, shapes.compare), arity=2)
REDUCTIONS = _ops_with(
    (shapes.reduce, shapes.reduce_float, shapes.reduce_mean, shapes.reduce_same_dtype, shapes.reduce_norm)
)
ARG_REDUCTIONS = _ops_with((shapes.arg_reduce,))
ALONG_DIM = _ops_with((shapes.along_dim, shapes.SOFTMAX, shapes.LOG_SOFTMAX), required_attrs=True)


def test_random_shape_families_are_found():
    # The families below are picked from the registry by infer rule; make sure they are not empty.
    assert {"exp", "neg", "relu", "clone"} <= set(UNARY)
    assert {"add", "mul", "pow", "maximum", "lt"} <= set(BINARY)
    assert {"sum", "mean", "amax", "var", "norm"} <= set(REDUCTIONS)
    assert {"softmax", "log_softmax"} <= set(ALONG_DIM)


def _values(draw, shape, low, high):
    seed = draw(st.integers(0, 2**32 - 1))
    return np.asarray(np.random.default_rng(seed).uniform(low, high, size=shape))


@pytest.mark.parametrize("name", UNARY)
def test_unary_random_shapes(name):
    op = engine.OPS[name]
    low, high = _domain(op)

    @SETTINGS
    @given(
        data=st.data(),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4),
        dtype=st.sampled_from(DTYPES),
    )
    def check(data, shape, dtype):
        compare_op(name, [_values(data.draw, shape, low, high)], op.samples[0].attrs, dtype)

    check()


@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasting_random_shapes(name):
    op = engine.OPS[name]
    low, high = _domain(op)

    @SETTINGS
    @given(
        data=st.data(),
        shapes_=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4),
        dtype=st.sampled_from(DTYPES),
    )
    def check(data, shapes_, dtype):
        arrays = [_values(data.draw, s, low, high) for s in shapes_.input_shapes]
        if name in ("maximum", "minimum", "eq", "ne", "le", "ge") and data.draw(st.booleans()):
            arrays[1] = (
                np.broadcast_to(arrays[0], shapes_.result_shape)[(0,) * len(shapes_.result_shape)] + 0 * arrays[1]
            )
        compare_op(name, arrays, op.samples[0].attrs, dtype)

    check()


@st.composite
def _reduction_case(draw, op):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    attrs = {}
    if "dim" in op.attrs:
        dims = draw(
            st.one_of(
                st.none(),
                st.integers(-len(shape), len(shape) - 1),
                st.lists(st.integers(0, len(shape) - 1), min_size=0, max_size=len(shape), unique=True).map(tuple),
            )
        )
        attrs["dim"] = dims
    if "keepdim" in op.attrs:
        attrs["keepdim"] = draw(st.booleans())
    if "unbiased" in op.attrs:
        attrs["unbiased"] = draw(st.booleans())
    if "p" in op.attrs:
        attrs["p"] = draw(st.sampled_from([1.0, 2.0, 3.0, float("inf")]))
    return shape, attrs


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_random_shapes(name):
    op = engine.OPS[name]

    @SETTINGS
    @given(data=st.data(), dtype=st.sampled_from(DTYPES))
    def check(data, dtype):
        shape, attrs = data.draw(_reduction_case(op))
        if name == "var" and shapes.reduced_shape(shape, attrs["dim"], True) == shape and attrs["unbiased"]:
            return  # a variance over one element with n - 1: nan in both, checked separately
        compare_op(name, [_values(data.draw, shape, -2.0, 2.0)], attrs, dtype)

    check()


@pytest.mark.parametrize("name", ARG_REDUCTIONS)
def test_arg_reduction_random_shapes(name):
    @SETTINGS
    @given(
        data=st.data(),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
        keepdim=st.booleans(),
        dtype=st.sampled_from(DTYPES),
    )
    def check(data, shape, keepdim, dtype):
        dim = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
        compare_op(name, [_values(data.draw, shape, -2.0, 2.0)], {"dim": dim, "keepdim": keepdim}, dtype)

    check()


@pytest.mark.parametrize("name", ALONG_DIM)
def test_softmax_family_random_shapes(name):
    @SETTINGS
    @given(
        data=st.data(),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
        scale=st.sampled_from([1.0, 50.0]),
        dtype=st.sampled_from(DTYPES),
    )
    def check(data, shape, scale, dtype):
        dim = data.draw(st.integers(-len(shape), len(shape) - 1))
        compare_op(name, [_values(data.draw, shape, -scale, scale)], {"dim": dim}, dtype)

    check()


def test_logsumexp_random_shapes():
    @SETTINGS
    @given(
        data=st.data(),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
        keepdim=st.booleans(),
        dtype=st.sampled_from(DTYPES),
    )
    def check(data, shape, keepdim, dtype):
        dim = data.draw(
            st.one_of(
                st.integers(-len(shape), len(shape) - 1),
                st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True).map(tuple),
            )
        )
        compare_op("logsumexp", [_values(data.draw, shape, -20.0, 20.0)], {"dim": dim, "keepdim": keepdim}, dtype)

    check()


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_matmul_random_shapes(data, dtype):
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3))
    kind = data.draw(st.sampled_from(["mm", "vec-mat", "mat-vec", "vec-vec", "batched"]))
    a_shape, b_shape = {
        "mm": ((n, k), (k, m)),
        "vec-mat": ((k,), batch.input_shapes[1] + (k, m)),
        "mat-vec": (batch.input_shapes[0] + (n, k), (k,)),
        "vec-vec": ((k,), (k,)),
        "batched": (batch.input_shapes[0] + (n, k), batch.input_shapes[1] + (k, m)),
    }[kind]
    arrays = [_values(data.draw, a_shape, -2, 2), _values(data.draw, b_shape, -2, 2)]
    compare_op("matmul", arrays, {}, dtype)
    if kind == "mm":
        compare_op("mm", arrays, {}, dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_shape_ops_random(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3))
    x = _values(data.draw, shape, -2, 2)
    ndim = len(shape)
    perm = tuple(data.draw(st.permutations(range(ndim))))
    compare_op("permute", [x], {"dims": perm}, dtype)
    compare_op("reshape", [x], {"shape": (-1,) + tuple(shape[1:])}, dtype)
    d0, d1 = data.draw(st.integers(-ndim, ndim - 1)), data.draw(st.integers(-ndim, ndim - 1))
    compare_op("transpose", [x], {"dim0": d0, "dim1": d1}, dtype)
    compare_op("unsqueeze", [x], {"dim": data.draw(st.integers(-ndim - 1, ndim))}, dtype)
    compare_op("squeeze", [x], {}, dtype)
    compare_op("squeeze", [x], {"dim": data.draw(st.integers(-ndim, ndim - 1))}, dtype)
    start = data.draw(st.integers(0, ndim - 1))
    compare_op("flatten", [x], {"start_dim": start, "end_dim": data.draw(st.integers(start, ndim - 1))}, dtype)
    target = tuple(data.draw(st.integers(1, 2)) for _ in range(data.draw(st.integers(0, 2)))) + tuple(
        s if s != 1 or not data.draw(st.booleans()) else data.draw(st.integers(1, 3)) for s in shape
    )
    compare_op("expand", [x], {"shape": target}, dtype)
    compare_op("sum_to", [np.broadcast_to(x, target)], {"shape": tuple(shape)}, dtype)
    compare_op("t", [x[(0,) * (ndim - 2)] if ndim > 2 else x], {}, dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_cat_stack_random(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    count = data.draw(st.integers(1, 3))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = [data.draw(st.integers(1, 3)) for _ in range(count)]
    parts = []
    for s in sizes:
        part_shape = list(shape)
        part_shape[dim] = s
        parts.append(_values(data.draw, tuple(part_shape), -2, 2))
    compare_op("cat", parts, {"dim": dim}, dtype)
    same = [_values(data.draw, shape, -2, 2) for _ in range(count)]
    compare_op("stack", same, {"dim": data.draw(st.integers(-len(shape) - 1, len(shape)))}, dtype)


@st.composite
def _basic_index(draw, shape):
    """An index of ints, slices (with steps, negative too), None and at most one Ellipsis."""
    items = []
    dims = list(shape)
    used_ellipsis = False
    while dims:
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "stop"]))
        if kind == "stop":
            break
        if kind == "none":
            items.append(None)
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            items.append(Ellipsis)
            keep = draw(st.integers(0, len(dims)))
            dims = dims[len(dims) - keep :] if keep else []
            continue
        elif kind == "int":
            size = dims.pop(0)
            items.append(draw(st.integers(-size, size - 1)))
        else:
            size = dims.pop(0)
            start = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            stop = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            step = draw(st.one_of(st.none(), st.integers(1, 3)))
            items.append(slice(start, stop, step))
    return tuple(items)


def _index_spec(key):
    from engine.indexing import from_key

    return from_key(key, lambda a: a)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_basic_indexing_random(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    x = _values(data.draw, shape, -2, 2)
    key = data.draw(_basic_index(shape))
    spec, _ = _index_spec(key)
    compare_op("getitem", [x], {"index": spec}, dtype)
    # and through Variable.__getitem__ itself, with torch's own key
    v = Variable(x.astype(dtype), requires_grad=True)
    t = torch.from_numpy(x.astype(dtype)).requires_grad_(True)
    out, t_out = v[key], t[key]
    assert_close(out, t_out, dtype, f"x{shape}[{key}]")
    if out.data.size:
        out.sum().backward()
        t_out.sum().backward()
        assert_close(v.grad, t.grad, dtype, f"grad of x{shape}[{key}]")


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_advanced_indexing_random(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    x = _values(data.draw, shape, -2, 2)
    kind = data.draw(st.sampled_from(["ints", "ints-2d", "mask", "mask-partial", "ints-slice"]))
    size0 = shape[0]
    if kind == "ints":
        key = (np.array(data.draw(st.lists(st.integers(-size0, size0 - 1), min_size=1, max_size=6))),)
    elif kind == "ints-2d":
        key = (np.array(data.draw(st.lists(st.integers(0, size0 - 1), min_size=4, max_size=4))).reshape(2, 2),)
    elif kind == "mask":
        key = (np.random.default_rng(data.draw(st.integers(0, 999))).random(shape) > 0.5,)
    elif kind == "mask-partial":
        key = (np.random.default_rng(data.draw(st.integers(0, 999))).random(shape[:1]) > 0.5,)
    else:
        key = (slice(None, None, 2), np.array([0, -1, 0])) if len(shape) > 1 else (np.array([0, 0]),)
        if len(shape) > 1:
            key = (slice(None, None, 2), np.array([i % shape[1] for i in (0, -1, 0)]))
    spec, arrays = _index_spec(key)
    compare_op("getitem", [x, *arrays], {"index": spec}, dtype)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_setitem_random(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    x = _values(data.draw, shape, -2, 2)
    kind = data.draw(st.sampled_from(["int", "slice", "mask", "ints"]))
    if kind == "int":
        key = (data.draw(st.integers(-shape[0], shape[0] - 1)),)
    elif kind == "slice":
        key = (slice(data.draw(st.integers(0, shape[0])), None, data.draw(st.integers(1, 2))),)
    elif kind == "mask":
        key = (np.random.default_rng(data.draw(st.integers(0, 999))).random(shape) > 0.5,)
    else:  # distinct indices: torch leaves the winner of a repeated assignment unspecified
        key = (np.array(data.draw(st.lists(st.integers(0, shape[0] - 1), min_size=1, max_size=shape[0], unique=True))),)
    spec, arrays = _index_spec(key)
    target_shape = np.zeros(shape)[key].shape
    value_shape = data.draw(st.sampled_from([(), target_shape[-1:] if target_shape else (), target_shape]))
    value = _values(data.draw, value_shape, -2, 2)
    compare_op("setitem", [x, value, *arrays], {"index": spec}, dtype)


# --- edge cases: ties, zeros, boundaries, infinities, NaN -------------------------------------

NAN, INF = float("nan"), float("inf")
EDGE_CASES = [
    ("abs", [[0.0, -1.0, 1.0]], {}),
    ("relu", [[0.0, -1.0, 1.0, NAN]], {}),
    ("sign", [[0.0, -2.0, 3.0]], {}),
    ("clamp", [[0.0, -1.0, 1.0, 0.5, NAN]], {"min": 0.0, "max": 1.0}),  # boundaries pass the gradient
    ("clamp", [[0.0, -1.0, 1.0]], {"min": 0.5, "max": 0.2}),  # min > max: everything is max
    ("sqrt", [[0.0, 1.0, 4.0]], {}),
    ("log", [[0.0, 1.0, -1.0]], {}),
    ("div", [[1.0, 0.0, -1.0], [0.0, 0.0, 0.0]], {}),
    ("pow", [[0.0, 0.0, 2.0, -2.0], [2.0, 0.0, 0.5, 2.0]], {}),  # 0 ** 0 has gradient 0 in both inputs
    ("pow", [[0.0, 0.0, 0.0], [-1.0, 0.5, 1.0]], {}),
    ("maximum", [[1.0, 2.0, 2.0, NAN, 1.0], [2.0, 2.0, 1.0, 1.0, NAN]], {}),  # ties split, NaN wins
    ("minimum", [[1.0, 2.0, 2.0, NAN, 1.0], [2.0, 2.0, 1.0, 1.0, NAN]], {}),
    ("amax", [[1.0, 2.0, 2.0]], {}),  # tied maxima share the gradient
    ("amin", [[[1.0, 1.0], [0.0, 3.0]]], {"dim": 1}),
    ("amax", [[[1.0, 1.0], [0.0, 3.0]]], {"dim": (), "keepdim": False}),
    ("sum", [[[1.0, 2.0], [3.0, 4.0]]], {"dim": ()}),  # an empty dim list reduces everything
    ("mean", [[[1.0, 2.0], [3.0, 4.0]]], {"dim": (), "keepdim": True}),
    ("var", [[[1.0, 2.0], [3.0, 5.0]]], {"dim": ()}),
    ("norm", [[[1.0, 2.0], [3.0, 5.0]]], {"dim": ()}),
    ("norm", [[0.0, 0.0, 0.0]], {}),  # the norm's gradient is 0 at 0
    ("norm", [[0.0, 0.0, 0.0]], {"p": 1.0}),
    ("norm", [[0.0, 0.0, 0.0]], {"p": 3.0}),
    ("norm", [[0.0, 1.0, -2.0]], {"p": 0.5}),  # p < 1: zeros get gradient 0, not nan
    ("norm", [[1.0, -3.0, 3.0]], {"p": INF}),
    ("norm", [[[0.0, 0.0], [1.0, 2.0]]], {"dim": 1}),
    ("var", [[1.0]], {}),
    ("var", [[1.0]], {"unbiased": False}),
    ("softmax", [[1000.0, 1001.0, 1002.0]], {"dim": 0}),
    ("log_softmax", [[1000.0, 1001.0, 1002.0]], {"dim": 0}),
    ("logsumexp", [[1000.0, 1001.0, 1002.0]], {"dim": 0}),
    ("logsumexp", [[-1000.0, -1001.0, -1002.0]], {"dim": 0}),
    ("logsumexp", [[-INF, -INF]], {"dim": 0}),
    ("logsumexp", [[INF, 1.0]], {"dim": 0}),
    ("softmax", [[-INF, 0.0]], {"dim": 0}),
    ("log_softmax", [[-INF, 0.0]], {"dim": 0}),
    ("sigmoid", [[-1000.0, 1000.0, 0.0]], {}),
    ("tanh", [[-1000.0, 1000.0, 0.0]], {}),
    ("exp", [[-1000.0, 0.0]], {}),
    ("sum", [np.zeros((0, 3))], {"dim": 0}),
    ("mean", [np.zeros((0, 3))], {"dim": 1}),
    ("matmul", [np.zeros((2, 0)), np.zeros((0, 3))], {}),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("name", "arrays", "attrs"), EDGE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(EDGE_CASES)])
def test_edge_case_matches_torch(name, arrays, attrs, dtype):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about var over one element (nan by design)
        compare_op(name, [np.asarray(a, dtype=np.float64) for a in arrays], attrs, dtype)
