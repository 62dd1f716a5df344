"""engine.api, the engine's public face for wire, service and client: wrapping arrays, applying an op by name,
what a node saves (a custom Function's included) and what a value's graph holds; and the Variable surface's op
methods as real defs that both Variables inherit (engine.surface_methods)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import engine
from engine import api


def test_variable_of_wraps_an_array_without_copying_and_array_of_unwraps_it():
    array = np.arange(3, dtype=np.float32)
    v = api.variable_of(array)
    assert api.array_of(v) is array and not v.requires_grad and api.node_of(v) is None
    w = api.variable_of(array, requires_grad=True)
    assert w.requires_grad and w.is_leaf and api.version_of(w) == 0


def test_apply_runs_a_registry_op_by_name_and_records_its_node():
    x = engine.Variable(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = api.apply("mul", [x, 3.0], {})
    np.testing.assert_array_equal(api.array_of(y), [3.0, 6.0])
    assert api.node_name(api.node_of(y)) == "MulBackward0"
    assert api.node_edges(api.node_of(y))[0] is x
    z = api.apply("sum", [y])  # no attrs: the op's defaults
    assert float(z) == 9.0
    with pytest.raises(TypeError, match="unexpected attribute"):
        api.apply("sum", [y], api.OPS["sum"].check_attrs({"nope": 1}))


def test_saved_values_of_a_custom_function_node_are_what_forward_saved():
    class Scale(engine.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            ctx.extra = {"w": w}
            return x * w

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * w, g * x

    x = engine.Variable(np.ones(1000, np.float32), requires_grad=True)
    w = engine.Variable(np.full(1000, 2.0, np.float32), requires_grad=True)
    y = Scale.apply(x * 1, w * 1)  # inputs that only the Function's node keeps alive
    node = api.node_of(y)
    saved = api.saved_values(node)
    assert api.node_name(node) == "ScaleBackward" and len(saved) >= 2
    assert {float(api.array_of(v)[0]) for v in saved} == {1.0, 2.0}
    nodes: list = []
    held = list(api.held_arrays([y], nodes))
    assert node in nodes
    # y's own array, and both saved inputs (4 KB each) are counted
    assert sum(a.nbytes for a in {id(a): a for a in held}.values()) >= 3 * 4000


def test_held_arrays_stop_at_freed_nodes():
    x = engine.Variable(np.ones(4, np.float32), requires_grad=True)
    y = (x.exp() * 2).sum()
    before = {id(a) for a in api.held_arrays([y])}
    y.backward()
    after = {id(a) for a in api.held_arrays([y])}
    assert after < before  # the backward freed what the exp and mul nodes saved


def test_public_modules_are_importable_and_name_the_api():
    assert "engine.api" in api.PUBLIC_MODULES and "engine.variable" not in api.PUBLIC_MODULES
    assert all(hasattr(api, name) for name in api.__all__)


def test_op_methods_are_real_defs_shared_by_both_variables():
    client = pytest.importorskip("client")
    from engine.surface_methods import METHOD_OPS, SurfaceMethods

    assert "exp" in METHOD_OPS and "exp" not in vars(engine.Variable)
    assert engine.Variable.exp is SurfaceMethods.exp is client.Variable.exp
    source = inspect.getsource(engine.Variable.exp)
    assert source.lstrip().startswith("def exp(self") and "_ops.exp" in source
    assert inspect.getsourcefile(engine.Variable.tanh).endswith("surface_methods.py")
    # each side applies its own op: computed now on the engine, the engine's function for the client's class
    assert engine.Variable._ops is not client.Variable._ops
    x = engine.Variable(np.array([0.0, 1.0], np.float32))
    np.testing.assert_allclose(x.exp().numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    # methods another part of the surface defines (add and sub take alpha) stay the class's own
    assert "add" not in METHOD_OPS and "add" in vars(engine.Variable)
