"""The client's API is the engine's, derived from the registry: same names, same methods and
operators, same factories; a new registry op reaches the client with no client code."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from client_testkit import ROOT

import client
import engine
from engine.surface import OPERATORS

NOT_MIRRORED = {"gradcheck", "gradgradcheck", "GradcheckError", "backend"}  # engine-only tools


def test_every_registry_op_is_a_client_function_and_method():
    for name, op in engine.OPS.items():
        assert callable(getattr(client, name)), name
        for method in op.methods:
            assert callable(getattr(client.Variable, method)), (name, method)


def test_operators_are_declared_once_for_both():
    assert {"__add__", "__radd__", "__mul__", "__matmul__", "__neg__", "__lt__", "__pow__", "__rpow__"} <= set(
        OPERATORS
    )
    x = client.Variable(np.array([1.0, 2.0]), requires_grad=True)  # recorded (without grad: computed now, embedded)
    bits = x > 1  # a bool Variable recorded after x
    for name, (op, kind) in OPERATORS.items():
        fn = getattr(client.Variable, name)
        v = bits if op.startswith("bitwise") else x
        result = fn(v) if kind == "unary" else fn(v, v)
        assert result._value.op is engine.OPS[op], name


def test_variable_surface_mirrors_the_engine():
    public = {n for n in dir(engine.Variable) if not n.startswith("_")}
    dunders = {
        n for n in vars(engine.Variable) if n.startswith("__") and n not in ("__slots__", "__module__", "__doc__")
    }
    missing = sorted((public | dunders) - set(dir(client.Variable)))
    assert not missing
    exported = set(engine.__all__) - NOT_MIRRORED
    assert not sorted(exported - set(client.__all__))


def test_factories_draw_like_the_engine():
    for mod in (engine, client):
        mod.manual_seed(7)
    for make in ("randn", "rand"):
        a, b = getattr(client, make)(2, 3), getattr(engine, make)(2, 3)
        np.testing.assert_array_equal(a.data, b.data)
        assert a.dtype == np.float32
    assert client.zeros(2, 2, requires_grad=True).requires_grad
    assert client.arange(5).dtype == engine.arange(5).dtype
    assert client.tensor([1.0, 2.0]).dtype == np.float32 and client.tensor([1, 2]).dtype == np.int64
    assert client.full((2,), 3.0).tolist() == [3.0, 3.0]
    assert client.ones_like(client.zeros(3)).tolist() == [1.0, 1.0, 1.0]


def run_python(code):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_new_registry_op_reaches_the_client():
    out = run_python("""
        import numpy as np
        from engine import shapes
        from engine.registry import defop, Sample
        defop("cube", lambda xp, x: x ** 3, lambda g, ans, x: g * 3 * x * x, samples=(Sample(((3,),)),),
              infer=shapes.same, doc="x ** 3")
        import client
        x = client.Variable(np.array([1.0, 2.0, -1.0]), requires_grad=True)
        y = x.cube()
        assert type(y.grad_fn).__name__ == "CubeBackward0" and y.shape == (3,)
        client.cube(x).sum().backward()
        print(y.tolist(), x.grad.tolist())
    """)
    assert out.strip() == "[1.0, 8.0, -1.0] [3.0, 12.0, 3.0]"


def test_client_imports_flow_to_the_engine_only():
    out = run_python("""
        import sys, client
        print(sorted({m.split('.')[0] for m in sys.modules} & {'service', 'fastapi', 'uvicorn'}))
    """)
    assert out.strip() == "[]"
    for path in (ROOT / "client").glob("*.py"):
        text = path.read_text()
        assert "import service" not in text and "from service" not in text, path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weak_scalars_and_dtypes_follow_the_engine(session, dtype):
    def program(m):
        x = m.Variable(np.array([1.5, -2.0], dtype=dtype), requires_grad=True)
        i = m.Variable(np.array([1, 2]))
        outs = [
            x * 2,
            2.5 + x,
            x**2,
            x * np.float64(2.0),
            i * 2,
            i + 0.5,
            x * True,
            m.where(x > 0, x, 0),
            x.double(),
            x.long(),
            x + i,
        ]
        return [(o.dtype, o.shape, np.asarray(o.data).tolist()) for o in outs]

    assert program(client) == program(engine)
    # engine.where(mask, ints, 0) trips engine.registry._reference (`first or v` asks bool() of a
    # Variable); the client sends that scalar with its dtype, so the service never takes that path
    i = client.Variable(np.array([1, 2]))
    assert client.where(i > 1, i, 0).tolist() == [0, 2]


def test_the_surface_is_one_set_of_functions_on_both_variables():
    from engine import surface

    for name in surface.SHARED:
        assert vars(engine.Variable)[name] is vars(client.Variable)[name], name
    assert vars(engine.Variable)["requires_grad"].fset is vars(client.Variable)["requires_grad"].fset
    for name in ("grad_fn", "is_leaf", "retains_grad"):
        assert vars(engine.Variable)[name].fget is vars(client.Variable)[name].fget, name
    x = client.Variable(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="floating point"):
        client.Variable(np.array([1, 2])).requires_grad = True
    assert x.numel() == 2 and x.size(0) == 2 and len(x) == 2 and f"{x.sum():.1f}" == "3.0"
