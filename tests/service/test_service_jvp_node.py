"""The jvp node (graph format 1.1): Jacobian-vector products as values of a graph, composed with
grad nodes (forward-over-reverse Hessian-vector products in one request), differentiated by
/backward, through the embedded Executor and a live server, checked against PyTorch in float64."""

from __future__ import annotations

import numpy as np
import pytest
from grad_node_testkit import GraphBuilder, body, call, ok

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(22)
TOL = {"rtol": 1e-9, "atol": 1e-11}


@pytest.fixture(params=["embedded", "live"])
def target(request):
    return "embedded" if request.param == "embedded" else request.getfixturevalue("http")


def jvp_node(b, y, x, v, id):
    return b.op("jvp", y, x, v, id=id)


def close(actual, expected):
    np.testing.assert_allclose(actual, expected.detach().numpy(), **TOL)


def test_jvp_node_matches_torch_func_jvp(target):
    b = GraphBuilder()
    x, w, v = b.input("x"), b.input("w"), b.input("v")
    y = b.op("tanh", b.op("matmul", w, x), id="y")
    jvp_node(b, y, x, v, "t")
    xs, ws, vs = RNG.normal(size=3), RNG.normal(size=(4, 3)), RNG.normal(size=3)
    answer = ok(call(target, "forward", body(b.graph("y", "t"), {"x": xs, "w": ws, "v": vs})))

    tw = torch.tensor(ws)
    ty, tt = torch.func.jvp(lambda a: torch.tanh(tw @ a), (torch.tensor(xs),), (torch.tensor(vs),))
    close(answer["outputs"]["y"], ty)
    close(answer["outputs"]["t"], tt)
    assert answer["outputs"]["t"].shape == (4,)


def test_forward_over_reverse_hessian_vector_product_is_one_request(target):
    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v")
    f = b.total(b.op("mul", b.op("sin", x), b.op("pow", x, b.const(3.0))))
    g = b.grad(f, x, id="g")
    jvp_node(b, g, x, v, "hv")  # jvp of the gradient: H v
    xs, vs = RNG.normal(size=5), RNG.normal(size=5)
    answer = ok(call(target, "forward", body(b.graph("g", "hv"), {"x": xs, "v": vs})))

    tx = torch.tensor(xs)
    _, thv = torch.autograd.functional.hvp(lambda a: (torch.sin(a) * a**3).sum(), tx, torch.tensor(vs))
    close(answer["outputs"]["hv"], thv)


def test_backward_differentiates_through_a_jvp_node(target):
    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v", requires_grad=True)
    y = b.op("exp", b.op("mul", x, x))
    t = jvp_node(b, y, x, v, "t")
    s = b.total(b.op("mul", t, t))
    xs, vs = RNG.normal(size=4), RNG.normal(size=4)
    answer = ok(call(target, "backward", body(b.graph(s), {"x": xs, "v": vs}, wrt=["x", "v"])))

    tx, tv = (torch.tensor(a, requires_grad=True) for a in (xs, vs))
    _, tt = torch.func.jvp(lambda a: torch.exp(a * a), (tx,), (tv,))
    gx, gv = torch.autograd.grad((tt * tt).sum(), (tx, tv))
    close(answer["grads"]["x"], gx)
    close(answer["grads"]["v"], gv)


def test_jvp_of_an_output_that_does_not_depend_on_the_wrt_is_zeros(target):
    b = GraphBuilder()
    x, z, v = b.input("x"), b.input("z"), b.input("v")
    jvp_node(b, b.op("exp", z), x, v, "t")
    answer = ok(call(target, "forward", body(b.graph("t"), {"x": np.ones(2), "z": np.ones(3), "v": np.ones(2)})))
    np.testing.assert_array_equal(answer["outputs"]["t"], np.zeros(3))


@pytest.mark.parametrize(
    ("inputs", "attrs", "version", "message", "field"),
    [
        (["y", "x"], None, "1.1", "takes 3 inputs", "inputs"),
        (["y", "x", "w"], None, "1.1", "tangent 'w' has shape [3] but", "inputs"),
        (["y", "x", "v"], {"k": 1}, "1.1", "takes no attrs", "attrs"),
        (["y", "x", "v"], None, "1.0", 'needs graph version "1.1"', "graph.version"),
    ],
)
def test_bad_jvp_nodes_are_refused_naming_the_node(target, inputs, attrs, version, message, field):
    b = GraphBuilder(version=version)
    x, _, _ = b.input("x"), b.input("v"), b.input("w")
    b.op("exp", x, id="y")
    node = {"id": "t", "op": "jvp", "inputs": inputs, **({"attrs": attrs} if attrs else {})}
    b.nodes.append(node)
    answer = call(target, "forward", body(b.graph("t"), {"x": np.ones(2), "v": np.ones(2), "w": np.ones(3)}))
    assert answer["status"] == 422, answer
    assert message in answer["error"]
    assert answer["node"] == "t" and answer["field"] == field


def test_ops_lists_the_jvp_node(http):
    special = {s["name"]: s["doc"] for s in http.get("/ops").json()["special"]}
    assert "Jacobian-vector product" in special["jvp"]


def test_a_jvp_node_is_priced_as_the_two_grad_nodes_it_stands_for():
    from wire.errors import GraphError
    from wire.executor import Executor
    from wire.limits import Limits
    from wire.messages import Request

    def graph(with_jvp):
        b = GraphBuilder()
        x, w, v = b.input("x"), b.input("w"), b.input("v")
        y = b.op("mm", w, x, id="y")
        if with_jvp:
            jvp_node(b, y, x, v, "t")
        return b.graph("t" if with_jvp else "y")

    n = 300
    inputs = {"x": np.ones((n, n)), "w": np.ones((n, n)), "v": np.ones((n, n))}
    executor = Executor(Limits(max_request_work=3 * n**3))  # one mm fits, its jvp (about 3 more) does not
    assert executor.forward(Request(graph=graph(False), inputs=inputs)).outputs["y"].shape == (n, n)
    with pytest.raises(GraphError) as refused:
        executor.forward(Request(graph=graph(True), inputs=inputs))
    assert refused.value.kind == "too_large" and "max_request_work" in str(refused.value)
    assert refused.value.node == "t" and "node 't' (jvp)" in str(refused.value)
