"""Custom Functions: traced into one `function` node (forward and backward subgraphs), never
run on the service; traces are cached; what can't be traced fails clearly."""

from __future__ import annotations

import numpy as np
import pytest
from client_testkit import my_relu

import client
import engine
from client import Function, Variable
from engine.node import FREED_MESSAGE

H = np.array([[1.5, -2.0, 0.0], [-0.5, 3.0, -1.0]], dtype=np.float32)


def functions_of(header):
    return [n for n in header["graph"]["nodes"] if n["op"] == "function"]


def test_my_relu_is_sent_as_one_function_node(session, recorder):
    MyReLU = my_relu(client)
    h = Variable(H, requires_grad=True)
    out = MyReLU.apply(h)
    assert type(out.grad_fn).__name__ == "MyReLUBackward"
    assert recorder.calls == []  # recording and tracing send nothing
    (out * out).sum().backward()
    assert recorder.paths() == ["/backward"]
    header = recorder.calls[0][2]
    (function,) = functions_of(header)
    attrs = function["attrs"]
    assert attrs["name"] == "MyReLU" and set(attrs) == {"name", "forward", "backward"}
    assert [n["op"] for n in attrs["forward"]["nodes"]] == ["arg", "clamp"]
    assert {n["op"] for n in attrs["backward"]["nodes"]} == {"grad_output", "clone", "constant", "arg", "lt", "setitem"}
    engine_h = engine.Variable(H, requires_grad=True)
    o = my_relu(engine).apply(engine_h)
    (o * o).sum().backward()
    np.testing.assert_array_equal(h.grad.data, engine_h.grad.data)
    np.testing.assert_array_equal(out.data, o.data)


def test_traces_are_cached_per_shape(session):
    calls = {"forward": 0, "backward": 0}

    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            calls["forward"] += 1
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            calls["backward"] += 1
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = Variable(H, requires_grad=True)
    for _ in range(4):
        Square.apply(x).sum().backward()
    assert calls == {"forward": 1, "backward": 1}
    np.testing.assert_allclose(x.grad.data, 4 * 2 * H)
    Square.apply(Variable(np.ones(5, np.float32), requires_grad=True)).sum().backward()
    assert calls == {"forward": 2, "backward": 2}


def test_second_backward_through_a_function_is_refused(session):
    MyReLU = my_relu(client)
    h = Variable(H, requires_grad=True)
    out = MyReLU.apply(h).sum()
    out.backward()
    with pytest.raises(RuntimeError) as err:
        out.backward()
    assert str(err.value) == FREED_MESSAGE


def program_with_functions(m):
    class ScaledMul(m.Function):
        @staticmethod
        def forward(ctx, a, b, scale):
            ctx.save_for_backward(a, b)
            ctx.scale = scale
            return a * b * scale

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b * ctx.scale, None, None

    class Exp(m.Function):
        @staticmethod
        def forward(ctx, x):
            result = x.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, g):
            (result,) = ctx.saved_tensors
            return g * result

    class SoftPlusViaExp(m.Function):  # a Function calling a Function in its forward
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (Exp.apply(x) + 1).log()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.sigmoid()

    a = m.Variable(H.astype(np.float64), requires_grad=True)
    b = m.Variable(np.full((2, 3), 0.5), requires_grad=True)
    y = ScaledMul.apply(a, b, 3.0)
    z = Exp.apply(a)
    s = SoftPlusViaExp.apply(a)
    (y.sum() + z.sum() + s.sum()).backward()
    with m.no_grad():
        n = Exp.apply(a)
    return a.grad, b.grad, y, z, s, n.grad_fn, type(z.grad_fn).__name__


def test_functions_with_constants_none_gradients_and_saved_results(session, recorder):
    got = program_with_functions(client)
    want = program_with_functions(engine)
    for g, w in zip(got[:5], want[:5]):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(g.data, w.data, rtol=1e-12)
    assert got[5] is None and got[6] == want[6] == "ExpBackward"
    header = next(h for _, path, h in recorder.calls if path == "/backward")
    exp = next(f for f in functions_of(header) if f["attrs"]["name"] == "Exp")
    assert [n["op"] for n in exp["attrs"]["backward"]["nodes"]] == ["grad_output", "forward_value", "mul"]
    scaled = next(f for f in functions_of(header) if f["attrs"]["name"] == "ScaledMul")
    assert scaled["attrs"]["backward"]["outputs"][1] is None


def test_tracing_never_fetches_a_value(session, recorder):
    class Branchy(Function):
        @staticmethod
        def forward(ctx, x):
            if x.sum().item() > 0:
                return x * 2
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = Variable(H, requires_grad=True)
    with pytest.raises(client.TracingError, match="Branchy.forward needs the value") as err:
        Branchy.apply(x)
    assert isinstance(err.value, RuntimeError)

    class Truthy(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g if bool((g > 0).sum() > 0) else g * 0

    with pytest.raises(client.TracingError, match="Truthy.backward"):
        Truthy.apply(x)
    assert recorder.calls == []


def test_values_from_outside_a_function(session):
    weight = Variable(np.full(3, 2.0, np.float32), requires_grad=True)
    table = Variable(np.arange(3, dtype=np.float32))

    class UsesTable(Function):
        @staticmethod
        def forward(ctx, x):
            return x + table  # plain data: baked into the trace as a constant

        @staticmethod
        def backward(ctx, g):
            return g

    class UsesWeight(Function):
        @staticmethod
        def forward(ctx, x):
            return x * weight

        @staticmethod
        def backward(ctx, g):
            return g

    x = Variable(H, requires_grad=True)
    np.testing.assert_allclose(UsesTable.apply(x).data, H + np.arange(3))
    with pytest.raises(client.TracingError, match="pass it to UsesWeight.apply"):
        UsesWeight.apply(x)
