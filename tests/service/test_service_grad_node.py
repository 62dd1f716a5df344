"""The grad node (graph format 1.1): gradients as values of a graph, differentiated again by
later grad nodes and by /backward, through the embedded Executor and a live server, checked
against PyTorch in float64."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from grad_node_testkit import GraphBuilder, body, call, ok

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(13)
TOL = {"rtol": 1e-9, "atol": 1e-11}


@pytest.fixture(params=["embedded", "live"])
def target(request):
    return "embedded" if request.param == "embedded" else request.getfixturevalue("http")


def leaf(array):
    return torch.tensor(array, dtype=torch.float64, requires_grad=True)


def grad(y, x, v=None):
    return torch.autograd.grad(y, x, v, create_graph=True)[0]


def close(actual, expected):
    np.testing.assert_allclose(actual, expected.detach().numpy(), **TOL)


# --------------------------------------------------------------------------- Hessian-vector products


def test_hessian_vector_product_in_one_forward(target):
    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v")
    f = b.total(b.op("mul", b.op("tanh", x), b.op("exp", x)))
    g = b.grad(f, x, id="g")
    hv = b.grad(g, x, v, id="hv")  # the grad_output as a third input: v^T H
    hv2 = b.grad(b.dot(g, v), x, id="hv2")  # the same product spelled as grad(g . v)
    xs, vs = RNG.normal(size=5), RNG.normal(size=5)
    answer = ok(call(target, "forward", body(b.graph(g, hv, hv2), {"x": xs, "v": vs})))

    tx = leaf(xs)
    tg = grad((torch.tanh(tx) * torch.exp(tx)).sum(), tx)
    thv = grad(tg, tx, torch.tensor(vs))
    close(answer["outputs"]["g"], tg)
    close(answer["outputs"]["hv"], thv)
    close(answer["outputs"]["hv2"], thv)


def test_backward_through_a_hessian_vector_product_differentiates_the_grad_output(target):
    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v", requires_grad=True)
    f = b.total(b.op("sin", b.op("mul", x, x)))
    hv = b.grad(b.grad(f, x), x, v, id="hv")
    xs, vs, seed = RNG.normal(size=4), RNG.normal(size=4), RNG.normal(size=4)
    answer = ok(call(target, "backward", body(b.graph(hv), {"x": xs, "v": vs}, {"hv": seed})))

    tx, tv = leaf(xs), leaf(vs)
    thv = grad(grad(torch.sin(tx * tx).sum(), tx), tx, tv)
    gx, gv = torch.autograd.grad(thv, (tx, tv), torch.tensor(seed))
    close(answer["outputs"]["hv"], thv)
    close(answer["grads"]["x"], gx)
    close(answer["grads"]["v"], gv)


# --------------------------------------------------------------------------- elementwise derivatives

ELEMENTWISE = {
    "sin": (lambda b, x: b.op("sin", x), torch.sin, (-2.0, 2.0)),
    "tanh": (lambda b, x: b.op("tanh", x), torch.tanh, (-1.5, 1.5)),
    "exp": (lambda b, x: b.op("exp", x), torch.exp, (-1.0, 1.0)),
    "pow": (lambda b, x: b.op("pow", x, b.const(3.5)), lambda t: t**3.5, (0.5, 2.0)),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_second_third_and_fourth_derivatives_of_elementwise_ops(target, name):
    wire_fn, torch_fn, (low, high) = ELEMENTWISE[name]
    b = GraphBuilder()
    x = b.input("x", requires_grad=True)
    d1 = b.grad(b.total(wire_fn(b, x)), x, id="d1")
    d2 = b.grad(b.total(d1), x, id="d2")
    d3 = b.grad(b.total(d2), x, id="d3")
    xs = RNG.uniform(low, high, size=6)
    answer = ok(
        call(
            target,
            "backward",
            body(b.graph(d1, d2, d3), {"x": xs}, {"d1": np.zeros(6), "d2": np.zeros(6), "d3": np.ones(6)}),
        )
    )
    tx = leaf(xs)
    derivatives = [torch_fn(tx)]
    for _ in range(4):
        derivatives.append(grad(derivatives[-1].sum(), tx))
    for k in (1, 2, 3):
        close(answer["outputs"][f"d{k}"], derivatives[k])
    close(answer["grads"]["x"], derivatives[4])  # /backward through d3: the fourth derivative


# --------------------------------------------------------------------------- gradient penalty


def test_gradient_penalty_trains_a_small_critic_like_pytorch(target):
    """((|grad(D(x), x)| - 1) ** 2 for an MLP critic D, and three SGD steps on its parameters."""
    b = GraphBuilder()
    x = b.input("x")
    w1, b1, w2 = (b.input(n, requires_grad=True) for n in ("w1", "b1", "w2"))
    critic = b.total(b.op("mm", b.op("tanh", b.op("add", b.op("mm", x, w1), b1)), w2))
    slope = b.op("norm", b.grad(critic, x))
    penalty = b.op("pow", b.op("sub", slope, b.const(1.0)), b.const(2.0), id="penalty")
    graph = b.graph(penalty)
    params = {"w1": RNG.normal(size=(3, 4)), "b1": RNG.normal(size=4), "w2": RNG.normal(size=(4, 1))}
    xs = RNG.normal(size=(5, 3))
    torch_params = {n: leaf(a) for n, a in params.items()}
    lr = 0.05
    for _ in range(3):
        answer = ok(call(target, "backward", body(graph, {"x": xs, **params})))
        tx = torch.tensor(xs, requires_grad=True)
        t_critic = (torch.tanh(tx @ torch_params["w1"] + torch_params["b1"]) @ torch_params["w2"]).sum()
        t_penalty = (grad(t_critic, tx).norm() - 1) ** 2
        t_grads = torch.autograd.grad(t_penalty, list(torch_params.values()))
        close(answer["outputs"]["penalty"], t_penalty)
        for (name, p), g in zip(torch_params.items(), t_grads):
            close(answer["grads"][name], g)
            assert np.abs(answer["grads"][name]).sum() > 0
            params[name] = params[name] - lr * answer["grads"][name]
            torch_params[name] = leaf(p.detach().numpy() - lr * g.numpy())
    for name, p in torch_params.items():
        close(params[name], p)


# --------------------------------------------------------------------------- double backward through ops


def _double_backward(target, op, shapes, torch_fn, attrs):
    """out = sum_i sum(grad(sum(op(x...) * v), x_i) * w_i); /backward gives d out / d x_i."""
    b = GraphBuilder()
    xs = [b.input(f"x{i}", requires_grad=True) for i in range(len(shapes))]
    y = b.op(op, *xs, **attrs)
    v = b.input("v")
    s = b.dot(y, v)
    terms = [b.dot(b.grad(s, x), b.input(f"w{i}")) for i, x in enumerate(xs)]
    out = terms[0]
    for t in terms[1:]:
        out = b.op("add", out, t)
    arrays = {f"x{i}": RNG.normal(size=shape) for i, shape in enumerate(shapes)}
    weights = {f"w{i}": RNG.normal(size=shape) for i, shape in enumerate(shapes)}
    with torch.no_grad():
        y_shape = torch_fn(*[torch.tensor(a) for a in arrays.values()]).shape
    vs = RNG.normal(size=tuple(y_shape))
    answer = ok(call(target, "backward", body(b.graph(out), {**arrays, "v": vs, **weights})))

    txs = [leaf(a) for a in arrays.values()]
    ts = (torch_fn(*txs) * torch.tensor(vs)).sum()
    firsts = torch.autograd.grad(ts, txs, create_graph=True)
    t_out = sum((g * torch.tensor(w)).sum() for g, w in zip(firsts, weights.values()))
    seconds = torch.autograd.grad(t_out, txs, allow_unused=True)
    close(answer["outputs"][out], t_out)
    for i, g in enumerate(seconds):
        expected = torch.zeros_like(txs[i]) if g is None else g
        close(answer["grads"][f"x{i}"], expected)


def test_double_backward_through_mm(target):
    _double_backward(target, "mm", [(3, 4), (4, 2)], torch.mm, {})


def test_double_backward_through_softmax(target):
    _double_backward(target, "softmax", [(3, 5)], lambda t: torch.softmax(t, dim=-1), {"dim": -1})


def test_double_backward_through_logsumexp(target):
    _double_backward(target, "logsumexp", [(3, 5)], lambda t: torch.logsumexp(t, dim=1), {"dim": 1})


# --------------------------------------------------------------------------- custom Function


def cube_function(arg: str) -> dict:
    """x ** 3 as a traced custom Function whose backward, 3 x^2 g, is itself differentiable."""
    return {
        "id": "cube",
        "op": "function",
        "inputs": [arg],
        "attrs": {
            "name": "Cube",
            "forward": {
                "nodes": [
                    {"id": "a", "op": "arg", "attrs": {"index": 0}},
                    {"id": "aa", "op": "mul", "inputs": ["a", "a"]},
                    {"id": "aaa", "op": "mul", "inputs": ["aa", "a"]},
                ],
                "outputs": ["aaa"],
            },
            "backward": {
                "nodes": [
                    {"id": "a", "op": "arg", "attrs": {"index": 0}},
                    {"id": "g", "op": "grad_output"},
                    {"id": "three", "op": "constant", "attrs": {"value": 3.0}},
                    {"id": "aa", "op": "mul", "inputs": ["a", "a"]},
                    {"id": "taa", "op": "mul", "inputs": ["aa", "three"]},
                    {"id": "ga", "op": "mul", "inputs": ["taa", "g"]},
                ],
                "outputs": ["ga"],
            },
        },
    }


def test_custom_function_backward_is_differentiated_by_grad_nodes_and_backward(target):
    b = GraphBuilder()
    x = b.input("x", requires_grad=True)
    cube = b._add(cube_function(x))
    d1 = b.grad(b.total(b.op("sin", cube)), x, id="d1")
    d2 = b.grad(b.total(d1), x, id="d2")
    xs = RNG.normal(size=4)
    answer = ok(call(target, "backward", body(b.graph(d1, d2), {"x": xs}, {"d1": np.zeros(4), "d2": np.ones(4)})))
    tx = leaf(xs)
    t1 = grad(torch.sin(tx**3).sum(), tx)
    t2 = grad(t1.sum(), tx)
    t3 = torch.autograd.grad(t2.sum(), tx)[0]
    close(answer["outputs"]["d1"], t1)
    close(answer["outputs"]["d2"], t2)
    close(answer["grads"]["x"], t3)


# --------------------------------------------------------------------------- retained tapes


def test_backward_through_a_retained_tape_with_grad_nodes(target):
    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v")
    hv = b.grad(b.grad(b.total(b.op("exp", b.op("sin", x))), x), x, v, id="hv")
    xs, vs = RNG.normal(size=3), RNG.normal(size=3)
    forward = ok(call(target, "forward", body(b.graph(hv), {"x": xs, "v": vs}, parameters={"retain_graph": True})))
    tx = leaf(xs)
    thv = grad(grad(torch.exp(torch.sin(tx)).sum(), tx), tx, torch.tensor(vs))
    close(forward["outputs"]["hv"], thv)
    expected = torch.autograd.grad(thv.sum(), tx, retain_graph=True)[0]
    for retain in (True, False):  # twice through the same tape: the grad nodes' graph was retained with it
        again = ok(
            call(
                target,
                "backward",
                {
                    "tape": forward["tape"],
                    "grad_outputs": [{"name": "hv", "shape": [3], "datatype": "FP64", "data": [1.0, 1.0, 1.0]}],
                    "parameters": {"retain_graph": retain},
                },
            )
        )
        close(again["grads"]["x"], expected)
    freed = call(
        target,
        "backward",
        {
            "tape": forward["tape"],
            "grad_outputs": [{"name": "hv", "shape": [3], "datatype": "FP64", "data": [1.0, 1.0, 1.0]}],
        },
    )
    assert freed["status"] == 409, freed


# --------------------------------------------------------------------------- semantics


def test_unused_wrt_gets_zeros_and_an_input_wrt_need_not_declare_requires_grad(target):
    b = GraphBuilder()
    x, z = b.input("x"), b.input("z", requires_grad=True)
    f = b.total(b.op("mul", x, x))
    gx, gz = b.grad(f, x, id="gx"), b.grad(f, z, id="gz")
    linear = b.grad(b.total(b.op("mul", z, b.const(3.0))), z, id="linear")
    again = b.grad(b.total(linear), z, id="again")  # a constant gradient: its own gradient is zero
    xs = np.array([1.0, -2.0])
    answer = ok(call(target, "forward", body(b.graph(gx, gz, linear, again), {"x": xs, "z": np.array([4.0, 5.0])})))
    np.testing.assert_array_equal(answer["outputs"]["gx"], 2 * xs)
    np.testing.assert_array_equal(answer["outputs"]["gz"], [0.0, 0.0])
    np.testing.assert_array_equal(answer["outputs"]["linear"], [3.0, 3.0])
    np.testing.assert_array_equal(answer["outputs"]["again"], [0.0, 0.0])


def test_gradient_with_respect_to_an_intermediate_node(target):
    b = GraphBuilder()
    x = b.input("x", requires_grad=True)
    h = b.op("tanh", x)
    f = b.total(b.op("mul", h, h))
    gh = b.grad(f, h, id="gh")
    hh = b.grad(b.total(gh), x, id="hh")  # d/dx sum(2 tanh x) = 2 (1 - tanh^2 x)
    xs = RNG.normal(size=3)
    answer = ok(call(target, "forward", body(b.graph(gh, hh), {"x": xs})))
    np.testing.assert_allclose(answer["outputs"]["gh"], 2 * np.tanh(xs), **TOL)
    np.testing.assert_allclose(answer["outputs"]["hh"], 2 * (1 - np.tanh(xs) ** 2), **TOL)


def test_grad_nodes_over_one_output_share_one_backward_pass(monkeypatch):
    import wire.grad_node

    calls = []
    real = wire.grad_node.engine_grad
    monkeypatch.setattr(wire.grad_node, "engine_grad", lambda *a, **k: calls.append(a) or real(*a, **k))
    b = GraphBuilder()
    x, y = b.input("x", requires_grad=True), b.input("y", requires_grad=True)
    f = b.total(b.op("mul", b.op("sin", x), y))
    gx, gy = b.grad(f, x, id="gx"), b.grad(f, y, id="gy")
    gyy = b.grad(b.total(gx), y, id="gyy")
    xs, ys = RNG.normal(size=3), RNG.normal(size=3)
    answer = ok(call("embedded", "forward", body(b.graph(gx, gy, gyy), {"x": xs, "y": ys})))
    assert len(calls) == 2  # f's backward once for both gx and gy, then gx's for gyy
    assert len(calls[0][1]) == 2
    np.testing.assert_allclose(answer["outputs"]["gx"], np.cos(xs) * ys, **TOL)
    np.testing.assert_allclose(answer["outputs"]["gy"], np.sin(xs), **TOL)
    np.testing.assert_allclose(answer["outputs"]["gyy"], np.cos(xs), **TOL)


# --------------------------------------------------------------------------- validation and versions


def _error(answer, status, node, field, *fragments):
    assert answer["status"] == status, answer
    assert answer["node"] == node and answer["field"] == field, answer
    for fragment in fragments:
        assert fragment in answer["error"], answer


def test_a_wrt_that_nothing_differentiable_reaches_is_refused(target):
    b = GraphBuilder()
    x = b.input("x", requires_grad=True)
    e = b.op("exp", b.const([1.0, 2.0]), id="e")
    mask = b.op("gt", x, b.const(0.0), id="mask")
    f = b.total(b.op("mul", x, e))
    for wrt in (e, mask):
        b2 = GraphBuilder()
        b2.nodes = list(b.nodes)
        g = b2.grad(f, wrt, id="g")
        answer = call(target, "forward", body(b2.graph(g), {"x": np.array([1.0, 2.0])}))
        _error(answer, 422, "g", "inputs", repr(wrt), "requires grad")


def test_an_integer_input_cannot_be_a_wrt(target):
    b = GraphBuilder()
    i = b.input("i")
    g = b.grad(b.total(b.op("mul", i, i)), i, id="g")
    request = body(b.graph(g), {})
    request["inputs"] = [{"name": "i", "shape": [2], "datatype": "INT64", "data": [1, 2]}]
    _error(call(target, "forward", request), 422, "g", "inputs", "floating point")


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        (("f", "x", "x", "x"), "2 or 3 inputs"),
        (("y", "x"), "grad_output"),  # a non-scalar output with no grad_output
        (("y", "x", "short"), "has shape [2]"),  # a grad_output of another shape
    ],
)
def test_malformed_grad_nodes_are_refused_naming_the_node(target, inputs, fragment):
    b = GraphBuilder()
    x = b.input("x", requires_grad=True)
    b.op("sum", x, id="f")
    b.op("sin", x, id="y")  # shape [2]
    b.op("sum", x, id="short", dim=0, keepdim=True)  # shape [1]
    b.op("grad", *inputs, id="g")
    answer = call(target, "forward", body(b.graph("g"), {"x": np.array([1.0, 2.0])}))
    _error(answer, 422, "g", "inputs", fragment)


def test_grad_nodes_are_not_allowed_inside_function_subgraphs(target):
    function = cube_function("x")
    function["attrs"]["forward"]["nodes"].append({"id": "inner", "op": "grad", "inputs": ["aaa", "a"]})
    graph = {
        "version": "1.1",
        "nodes": [{"id": "x", "op": "input", "requires_grad": True}, function],
        "outputs": ["cube"],
    }
    _error(
        call(target, "forward", body(graph, {"x": np.ones(2)})),
        422,
        "cube",
        "op",
        "inner",
        "not allowed inside a function",
    )


@pytest.mark.parametrize("version", [1, "1.0"])
def test_a_graph_declaring_version_1_0_may_not_use_grad_nodes(target, version):
    b = GraphBuilder(version=version)
    x = b.input("x", requires_grad=True)
    g = b.grad(b.total(x), x, id="g")
    _error(call(target, "forward", body(b.graph(g), {"x": np.ones(2)})), 422, "g", "graph.version", '"1.1"')


@pytest.mark.parametrize("version", [1, "1.0", "1.1", None])
def test_version_1_graphs_stay_valid(target, version):
    b = GraphBuilder(version=version)
    x = b.input("x", requires_grad=True)
    s = b.total(b.op("mul", x, x))
    graph = b.graph(s)
    if version is None:
        del graph["version"]
    answer = ok(call(target, "backward", body(graph, {"x": np.array([1.0, 3.0])})))
    np.testing.assert_array_equal(answer["grads"]["x"], [2.0, 6.0])


@pytest.mark.parametrize("version", ["1", "1.2", "2.0", 2, 1.5, None])
def test_unknown_versions_are_refused(target, version):
    b = GraphBuilder(version=version)
    x = b.input("x")
    answer = call(target, "forward", body(b.graph(b.total(x)), {"x": np.ones(2)}))
    _error(answer, 422, None, "graph.version", "unsupported graph version")


def test_info_and_ops_announce_format_1_1_and_the_grad_node(http):
    assert http.get("/info").json()["graph_format_version"] == "1.1"
    ops = http.get("/ops").json()
    assert ops["graph_format_version"] == "1.1"
    special = {s["name"]: s["doc"] for s in ops["special"]}
    assert "grad" in special and "1.1" in special["grad"]
    assert "grad" not in {o["name"] for o in ops["ops"]}
    forward = http.get("/openapi.json").json()["paths"]["/forward"]["post"]["requestBody"]["content"]
    graph = forward["application/json"]["schema"]["properties"]["graph"]
    assert graph["properties"]["version"]["enum"] == [1, "1.0", "1.1"]


# --------------------------------------------------------------------------- the documented example


def documented_hvp_example():
    """(request, answer) of the Hessian-vector product curl example in docs/protocol.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    section = text.split("### Gradients as nodes", 1)[1].split("\n### ", 1)[0]
    match = re.search(
        r"^\$ curl -s -X POST http://127\.0\.0\.1:8000/forward .*? -d '(.*)'\n(.*)$", section, re.MULTILINE
    )
    assert match, "docs/protocol.md lost its Hessian-vector product example"
    return json.loads(match.group(1)), json.loads(match.group(2))


def test_the_documented_hessian_vector_product_runs_on_a_live_server(http):
    request, documented = documented_hvp_example()
    assert any(n["op"] == "grad" for n in request["graph"]["nodes"])
    response = http.post("/forward", json=request)
    assert response.status_code == 200, response.text
    assert response.json() == documented
    x, v = (np.asarray(t["data"], dtype=np.float64) for t in request["inputs"])
    outputs = {t["name"]: np.asarray(t["data"]) for t in response.json()["outputs"]}
    np.testing.assert_allclose(outputs["g"], 3 * x**2)
    np.testing.assert_allclose(outputs["hv"], 6 * x * v)


def test_derivatives_of_an_order_over_the_limit_are_refused(target):
    """Each nested grad node records a graph a few times the size of the one it differentiates,
    inside a backward pass no timeout interrupts, so the order of derivative is bounded."""
    from wire.grad_node import MAX_ORDER

    b = GraphBuilder()
    x, v = b.input("x", requires_grad=True), b.input("v")
    d = b.total(b.op("tanh", x))
    for k in range(1, MAX_ORDER + 1):
        d = b.grad(d, x, v if k > 1 else None, id=f"d{k}")
    allowed = b.graph(d)
    answer = ok(call(target, "forward", body(allowed, {"x": np.array([0.3, -0.2]), "v": np.ones(2)})))
    assert answer["outputs"][d].shape == (2,)
    over = b.grad(b.total(d), x, id="over")
    _error(
        call(target, "forward", body(b.graph(over), {"x": np.array([0.3, -0.2]), "v": np.ones(2)})),
        413,
        "over",
        "inputs",
        f"limit of {MAX_ORDER}",
    )
    # a grad node of order MAX_ORDER read as a grad_output keeps its order: differentiating the result is refused
    b3 = GraphBuilder()
    x, v = b3.input("x", requires_grad=True), b3.input("v")
    d = b3.total(b3.op("tanh", x))
    for k in range(1, MAX_ORDER + 1):
        d = b3.grad(d, x, v if k > 1 else None, id=f"d{k}")
    over_seed = b3.grad(b3.total(b3.grad(b3.op("tanh", x), x, d)), x, id="over_seed")
    inputs = {"x": np.array([0.3, -0.2]), "v": np.ones(2)}
    _error(call(target, "forward", body(b3.graph(over_seed), inputs)), 413, "over_seed", "inputs", "order")
    # but a grad_output is a value the backward reads, not a graph it differentiates: a chain of them (LiSSA's
    # iterated Hessian-vector products) does not nest, however long
    b2 = GraphBuilder()
    x, v = b2.input("x", requires_grad=True), b2.input("v")
    d = b2.grad(b2.total(b2.op("tanh", x)), x)
    for k in range(2 * MAX_ORDER):
        d = b2.grad(b2.op("tanh", x), x, d, id=f"e{k}")
    answer = ok(call(target, "forward", body(b2.graph(d), {"x": np.ones(2), "v": np.ones(2)})))
    np.testing.assert_allclose(answer["outputs"][d], np.full(2, (1 - np.tanh(1.0) ** 2) ** (2 * MAX_ORDER + 1)))
