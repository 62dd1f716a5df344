"""gradgradcheck over the registry through the wire: for every differentiable op's samples,
the graph `y = op(x...)`, `g_i = grad(sum(y * v), x_i)`, `out = sum_i sum(g_i * w_i)`; the
/backward gradient of `out` with respect to each floating x_i against central differences of
the /forward value of `out`, in float64. Parametrized by the registry, so a new op is checked
without a new test."""

from __future__ import annotations

import numpy as np
import pytest
from grad_node_testkit import GraphBuilder, call, ok

import engine
from engine import Variable
from wire.codec import datatype_of

CASES = [
    (name, i)
    for name, op in sorted(engine.OPS.items())
    if op.differentiable and op.twice_differentiable
    for i in range(len(op.samples))
]
EPS = 1e-6


def sample_arrays(op, index):
    """The sample's arrays as the engine's gradgradcheck draws them (same seed), floats in float64."""
    sample = op.samples[index]
    rng = np.random.default_rng(index)
    if sample.make is not None:
        arrays = [np.asarray(a) for a in sample.make(rng)]
    else:
        arrays = [np.asarray(rng.uniform(sample.low, sample.high, size=shape)) for shape in sample.shapes]
    return [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]


def wire_attrs(op, index):
    """A sample's attributes as JSON spells them (an infinite float as "Infinity")."""
    spelled = {float("inf"): "Infinity", float("-inf"): "-Infinity"}
    return {k: spelled.get(v, v) if isinstance(v, float) else v for k, v in op.samples[index].attrs.items()}


def tensor(name, array):
    array = np.asarray(array)
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype_of(array.dtype),
        "data": array.ravel().tolist(),
    }


def second_order_graph(op, arrays, attrs, floats):
    b = GraphBuilder()
    xs = [b.input(f"x{i}", requires_grad=i in floats) for i in range(len(arrays))]
    y = b.op(op.name, *xs, **attrs)
    s = b.total(b.op("mul", y, b.input("v")))
    out = None
    for i in floats:
        term = b.total(b.op("mul", b.grad(s, xs[i]), b.input(f"w{i}")))
        out = term if out is None else b.op("add", out, term)
    return b.graph(out), out


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_gradgradcheck_through_the_wire(name, index):
    op = engine.OPS[name]
    arrays = sample_arrays(op, index)
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    attrs = wire_attrs(op, index)
    y = op.call([Variable(a) for a in arrays], op.check_attrs(dict(op.samples[index].attrs)))
    rng = np.random.default_rng(1000 + index)
    extra = {"v": rng.standard_normal(y.shape), **{f"w{i}": rng.standard_normal(arrays[i].shape) for i in floats}}
    graph, out = second_order_graph(op, arrays, attrs, floats)

    def request(values):
        return {
            "graph": graph,
            "inputs": [tensor(f"x{i}", a) for i, a in enumerate(values)] + [tensor(n, a) for n, a in extra.items()],
        }

    analytic = ok(call("embedded", "backward", request(arrays)))["grads"]
    for i in floats:
        numeric = np.zeros(arrays[i].size)
        for j in range(arrays[i].size):
            values = []
            for sign in (1, -1):
                moved = [a.copy() for a in arrays]
                moved[i].reshape(-1)[j] += sign * EPS
                values.append(ok(call("embedded", "forward", request(moved)))["outputs"][out])
            numeric[j] = (values[0] - values[1]) / (2 * EPS)
        np.testing.assert_allclose(
            np.asarray(analytic[f"x{i}"]).reshape(-1),
            numeric,
            rtol=1e-3,
            atol=1e-5,
            err_msg=f"d out / d x{i} of {name} sample {index}",
        )


@pytest.mark.parametrize(("name", "index"), [c for c in CASES if c[0] in ("mm", "softmax", "getitem", "norm", "where")])
def test_the_live_server_gives_the_embedded_second_order_gradients(http, name, index):
    op = engine.OPS[name]
    arrays = sample_arrays(op, index)
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    attrs = wire_attrs(op, index)
    y = op.call([Variable(a) for a in arrays], op.check_attrs(dict(op.samples[index].attrs)))
    graph, _ = second_order_graph(op, arrays, attrs, floats)
    rng = np.random.default_rng(index)
    inputs = [tensor(f"x{i}", a) for i, a in enumerate(arrays)] + [tensor("v", rng.standard_normal(y.shape))]
    inputs += [tensor(f"w{i}", rng.standard_normal(arrays[i].shape)) for i in floats]
    embedded = ok(call("embedded", "backward", {"graph": graph, "inputs": inputs}))
    live = ok(call(http, "backward", {"graph": graph, "inputs": inputs}))
    for i in floats:
        np.testing.assert_allclose(live["grads"][f"x{i}"], embedded["grads"][f"x{i}"], rtol=1e-12, atol=1e-12)
