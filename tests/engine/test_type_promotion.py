"""PyTorch's type promotion (`engine.promotion`) against PyTorch itself: every pair of dtypes as dimensioned
tensors, 0-d tensors and Python numbers, over the ops with several inputs; the result's dtype and values, the
shape rule's dtype (what a client infers), in-place updates, `result_type`/`promote_types`/`can_cast`, and
the gradients of mixed-dtype ops. The client and a server run a subset (tests/client/test_client_type_promotion.py)."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import engine
from engine.registry import coerce

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

DTYPES = ["bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
NUMBERS = [True, 2, 2.5]
# values kept positive and small (no division by zero, no negative integer powers, no overflow)
LEFT = {"bool": [True, False, True], "int": [3, 5, 7], "float": [1.5, 2.25, 3.0]}
RIGHT = {"bool": [True, True, True], "int": [1, 2, 3], "float": [0.5, 1.25, 2.0]}


def _where(m, x, y):
    return m.where(m.tensor([True, False, True]), x, y)


# op name -> (the call on module m, whether Python numbers may be its first operand, whether numbers at all)
OPS = {
    "add": (lambda m, x, y: x + y, True, True),
    "sub": (lambda m, x, y: x - y, True, True),
    "mul": (lambda m, x, y: x * y, True, True),
    "truediv": (lambda m, x, y: x / y, True, True),
    "floordiv": (lambda m, x, y: x // y, True, True),
    "mod": (lambda m, x, y: x % y, True, True),
    "pow": (lambda m, x, y: x**y, True, True),
    "lt": (operator.lt, True, True),
    "ge": (operator.ge, True, True),
    "eq": (lambda m, x, y: x == y, True, True),
    "div": (lambda m, x, y: m.div(x, y), False, True),
    "true_divide": (lambda m, x, y: m.true_divide(x, y), False, True),
    "floor_divide": (lambda m, x, y: m.floor_divide(x, y), False, True),
    "remainder": (lambda m, x, y: m.remainder(x, y), False, True),
    "fmod": (lambda m, x, y: m.fmod(x, y), False, True),
    "pow_fn": (lambda m, x, y: m.pow(x, y), False, True),
    "mul_method": (lambda m, x, y: x.mul(y), False, True),
    "where": (_where, True, True),
    "maximum": (lambda m, x, y: m.maximum(x, y), False, False),
    "minimum": (lambda m, x, y: m.minimum(x, y), False, False),
    "atan2": (lambda m, x, y: m.atan2(x, y), False, False),
    "cat": (lambda m, x, y: m.cat([x, y]), False, False),
    "stack": (lambda m, x, y: m.stack([x, y]), False, False),
}
FIX = {"lt": lambda m, x, y: x < y, "ge": lambda m, x, y: x >= y}  # (operator.lt takes no module)


def _family(dtype: str) -> str:
    return "bool" if dtype == "bool" else "float" if dtype.startswith("float") else "int"


def operand(m, dtype, form, values):
    """A dimensioned ("dim") or 0-d ("zero") tensor of `dtype` on module m (engine, client or torch)."""
    data = values[_family(dtype)]
    return m.tensor(data if form == "dim" else data[0], dtype=getattr(m, dtype))


OPERANDS = [(dtype, form) for dtype in DTYPES for form in ("dim", "zero")]


def pairs(name, left_numbers=None):
    """(left, right) operand specs of op `name`: a (dtype, form) pair or a Python number each."""
    _, number_first, numbers = OPS[name]
    lefts = OPERANDS + (NUMBERS if numbers and number_first else [])
    rights = OPERANDS + (NUMBERS if numbers else [])
    out = []
    for left in lefts:
        for right in rights:
            if not isinstance(left, tuple) and not isinstance(right, tuple):
                continue
            if name == "cat" and "zero" in (left[1], right[1]):
                continue  # cat joins dimensioned tensors only (PyTorch's error otherwise)
            if name == "stack" and left[1] != right[1]:
                continue
            out.append((left, right))
    return out


def build(m, spec, values):
    return operand(m, *spec, values) if isinstance(spec, tuple) else spec


def call(m, name, left, right):
    fn = FIX.get(name, OPS[name][0])
    return fn(m, build(m, left, LEFT), build(m, right, RIGHT))


TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


def check(m, name, left, right, to_numpy=lambda v: v.numpy()):
    """`name` on module m equals PyTorch's: the dtype and the values (None when PyTorch refuses the call)."""
    try:
        expected = call(torch, name, left, right)
    except (RuntimeError, TypeError, NotImplementedError):
        return None  # (a bool subtraction, a bool floor division: PyTorch's refusals are not type promotion)
    got = call(m, name, left, right)
    where = f"{name}({left}, {right})"
    assert str(got.dtype) == str(expected.dtype), f"{where}: {got.dtype}, PyTorch {expected.dtype}"
    array = np.asarray(to_numpy(got))
    assert array.dtype == np.dtype(str(expected.dtype)[len("torch.") :]), f"{where}: computed {array.dtype}"
    want = expected.numpy()
    if want.dtype.kind == "f":
        np.testing.assert_allclose(array, want, rtol=TOLERANCE[want.dtype.name], err_msg=where)
    else:
        np.testing.assert_array_equal(array, want, err_msg=where)
    return got


@pytest.mark.parametrize("name", list(OPS))
def test_ops_promote_as_pytorch_on_every_pair_of_dtypes_and_forms(name):
    compared = 0
    for left, right in pairs(name):
        compared += check(engine, name, left, right) is not None
    assert compared > len(pairs(name)) // 2


@pytest.mark.parametrize("name", list(OPS))
def test_the_shape_rule_gives_the_dtype_the_forward_computes(name):
    """What a client infers before a server computes (the registry rule, on the coerced inputs)."""
    for left, right in pairs(name):
        try:
            call(torch, name, left, right)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        out = call(engine, name, left, right)
        node_inputs = _inputs_of(engine, name, left, right)
        if node_inputs is None:
            continue
        op, variables = node_inputs
        _, dtype = op.infer([v.shape for v in variables], [v.numpy().dtype for v in variables], {"dim": 0})
        assert np.dtype(dtype) == out.numpy().dtype, f"{name}({left}, {right}): rule {dtype}, forward {out.dtype}"


PRIMITIVE = {"add": "add", "mul": "mul", "truediv": "div", "lt": "lt", "maximum": "maximum", "atan2": "atan2"}


def _inputs_of(m, name, left, right):
    if name not in PRIMITIVE:
        return None
    op = engine.OPS[PRIMITIVE[name]]
    return op, coerce([build(m, left, LEFT), build(m, right, RIGHT)])


def test_a_python_number_takes_the_default_dtype_when_it_raises_the_category():
    x = engine.tensor([1, 2, 3])
    try:
        engine.set_default_dtype(engine.float64)
        assert (x * 2.5).dtype == engine.float64 and (x / x).dtype == engine.float64
        assert (engine.tensor([1.0], dtype=engine.float16) * 2.5).dtype == engine.float16
    finally:
        engine.set_default_dtype(engine.float32)
    assert (x * 2.5).dtype == engine.float32 and engine.sqrt(x).dtype == engine.float32


def test_values_are_computed_in_the_promoted_dtype():
    big = 2**40 + 1  # not a float32: int64 + float32 computed in float32, as PyTorch's
    for m in (engine, torch):
        out = m.tensor([big]) + m.tensor([0.0])
        assert out.dtype == m.float32 and float(out[0]) == float(np.float32(big))
    assert (engine.tensor([1, 2], dtype=engine.uint8) + 300).tolist() == [45, 46]  # wraps, as PyTorch's


@pytest.mark.parametrize("left", DTYPES)
def test_result_type_promote_types_and_can_cast_are_pytorchs(left):
    for right in DTYPES:
        a, b = getattr(engine, left), getattr(engine, right)
        ta, tb = getattr(torch, left), getattr(torch, right)
        assert str(engine.promote_types(a, b)) == str(torch.promote_types(ta, tb))
        assert engine.can_cast(a, b) == torch.can_cast(ta, tb), (left, right)
        for lf, rf in [("dim", "zero"), ("zero", "dim"), ("zero", "zero")]:
            want = torch.result_type(operand(torch, left, lf, LEFT), operand(torch, right, rf, RIGHT))
            got = engine.result_type(operand(engine, left, lf, LEFT), operand(engine, right, rf, RIGHT))
            assert str(got) == str(want), (left, lf, right, rf)
        for number in NUMBERS:
            want = torch.result_type(operand(torch, left, "dim", LEFT), number)
            assert str(engine.result_type(operand(engine, left, "dim", LEFT), number)) == str(want)


IN_PLACE = ["__iadd__", "__isub__", "__imul__", "__itruediv__"]


@pytest.mark.parametrize("method", IN_PLACE)
@pytest.mark.parametrize("left", DTYPES)
def test_in_place_ops_keep_the_dtype_or_refuse_as_pytorch(method, left):
    for right in [*((d, "dim") for d in DTYPES), *NUMBERS]:
        results = []
        for m in (torch, engine):
            x = operand(m, left, "dim", LEFT)
            try:
                results.append(getattr(x, method)(build(m, right, RIGHT)))
            except RuntimeError as err:
                results.append(str(err))
            if isinstance(results[0], str) and results[0].startswith("Subtraction"):
                break  # (PyTorch refuses bool subtraction: not type promotion)
        if len(results) == 1:
            continue
        want, got = results
        if isinstance(want, str):
            assert isinstance(got, str) and got == want, (left, method, right, got)
        else:
            assert not isinstance(got, str), (left, method, right, got)
            assert str(got.dtype) == str(want.dtype)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-3, err_msg=f"{left} {method} {right}")


GRAD_CASES = [
    ("mul", ("float16", "dim"), ("float32", "dim")),
    ("mul", ("float32", "dim"), ("float64", "zero")),
    ("add", ("float64", "zero"), ("float16", "dim")),
    ("truediv", ("float32", "dim"), ("float64", "dim")),
    ("truediv", ("float32", "dim"), ("int64", "dim")),
    ("sub", ("int32", "dim"), ("float16", "zero")),
    ("pow", ("float32", "dim"), ("float64", "zero")),
    ("pow", ("float16", "dim"), ("float32", "dim")),
    ("maximum", ("float32", "dim"), ("float64", "dim")),
    ("atan2", ("float16", "dim"), ("float64", "zero")),
    ("where", ("float32", "dim"), ("float16", "dim")),
    ("cat", ("float16", "dim"), ("float64", "dim")),
    ("stack", ("float32", "zero"), ("float64", "zero")),
    ("remainder", ("float32", "dim"), ("float64", "dim")),
]


def gradients(m, name, left, right):
    """The result and each float input's gradient of sum(op(x, y) * weights), on module m."""
    x, y = build(m, left, LEFT), build(m, right, RIGHT)
    leaves = [v for v in (x, y) if v.dtype.is_floating_point]
    for v in leaves:
        v.requires_grad_(True)
    out = FIX.get(name, OPS[name][0])(m, x, y)
    weights = m.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)).tolist(), dtype=out.dtype)
    (out * weights).sum().backward()
    return out, [v.grad for v in leaves]


@pytest.mark.parametrize(("name", "left", "right"), GRAD_CASES, ids=lambda c: str(c))
def test_gradients_of_mixed_dtype_ops_match_pytorch_in_each_inputs_dtype(name, left, right):
    want, want_grads = gradients(torch, name, left, right)
    got, got_grads = gradients(engine, name, left, right)
    assert str(got.dtype) == str(want.dtype)
    for g, w in zip(got_grads, want_grads):
        assert str(g.dtype) == str(w.dtype) and tuple(g.shape) == tuple(w.shape)
        computed = min(w.numpy().dtype, want.detach().numpy().dtype, key=lambda d: d.itemsize)  # the lower precision
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=TOLERANCE[computed.name] * 10)


def test_a_recording_keeps_the_casts_so_a_replay_computes_in_the_promoted_dtype():
    """A compiled plan replays the recorded steps: the casts before a mixed-dtype op are steps of their own."""
    from engine.recording import note_input, recording
    from engine.variable import Variable

    def program(x0, y0):
        x, y = Variable._result(x0, None), Variable._result(y0, None)
        x._requires_grad = True
        out = (x * y + x / 3).sum()  # float16 with int64, then with a Python number: float16
        (g,) = engine.grad(out, [x])
        return out, g

    x0, y0 = np.array([1.5, -2.0, 3.0], np.float16), np.array([3, 4, 5], np.int64)
    with recording() as made:
        note_input("x", x0)
        note_input("y", y0)
        out, g = program(x0, y0)
    assert made.spoiled is None and "cast" in [s.name for s in made.steps]
    x1, y1 = np.array([0.5, 1.0, -1.0], np.float16), np.array([7, -2, 1], np.int64)
    regs = dict(made.constants)
    regs.update({made.inputs["x"]: x1, made.inputs["y"]: y1})
    for step in made.steps:
        args = [regs[i] for i in step.ins]
        regs[step.out] = np.asarray(step.fn(np, *args, **step.attrs) if step.xp else step.fn(*args))
    want_out, want_g = program(x1, y1)
    for kept, want in ((out, want_out), (g, want_g)):
        replayed = regs[made.register(kept._data)]
        assert replayed.dtype == want._data.dtype == np.float16
        np.testing.assert_array_equal(replayed, want._data)
