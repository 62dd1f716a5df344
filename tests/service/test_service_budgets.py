"""Per-request budgets and what a run holds (issue 11): the planned peak memory and work are
checked before anything runs (413 naming the node and the figure), function subgraphs are
inferred and limited like the graph, values are dropped after their last reader, the plan cache
is bounded by bytes and keeps no refused graph, and a tape counts all it holds."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from service_testkit import asgi_client, assert_error

from service.errors import STATUS
from wire.budget import plan_cost
from wire.errors import GraphError, RequestError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import Request
from wire.run import Execution, cancel_scope
from wire.stores import PlanCache, plan_size

MiB = 2**20


def graph(*nodes, outputs=("s",)):
    return {"version": 1, "nodes": list(nodes), "outputs": list(outputs)}


def node(id, op, *inputs, **attrs):
    out = {"id": id, "op": op, "inputs": list(inputs)}
    if attrs:
        out["attrs"] = attrs
    return out


X = {"id": "x", "op": "input", "requires_grad": True}


def expanded_mm(n):
    """x [1, 1] expanded to [n, n], multiplied by itself: a tiny body, an n^3 product."""
    return graph(X, node("e", "expand", "x", shape=[n, n]), node("h", "mm", "e", "e"), node("s", "sum", "h"))


def refuse(executor, request, kind="forward"):
    with pytest.raises(RequestError) as err:
        getattr(executor, kind)(request)
    assert STATUS[err.value.kind] == 413
    return err.value


def test_peak_memory_over_the_budget_is_refused_naming_the_node_and_figure():
    executor = Executor(Limits(max_request_bytes=64 * MiB))
    err = refuse(executor, Request(graph=expanded_mm(3000), inputs={"x": np.ones((1, 1))}))
    assert err.node in ("e", "h") and "max_request_bytes" in str(err) and "MiB at its peak" in str(err)
    assert "64.0 MiB" in str(err)
    assert len(executor.plans) == 0  # a refused graph is not kept


def test_work_over_the_budget_is_refused_before_running():
    executor = Executor(Limits(max_request_work=10**9))
    err = refuse(executor, Request(graph=expanded_mm(1000), inputs={"x": np.ones((1, 1), np.float32)}))
    assert (
        err.node == "h"
        and "(mm)" in str(err)
        and "max_request_work" in str(err)
        and "e+09 flop-equivalents" in str(err)
    )


def test_the_default_budgets_refuse_an_8000_matmul_by_its_work_and_admit_a_small_one():
    executor = Executor()
    err = refuse(executor, Request(graph=expanded_mm(4000), inputs={"x": np.ones((1, 1), np.float32)}))
    assert "max_request_work" in str(err) and err.node == "h"
    result = executor.forward(Request(graph=expanded_mm(200), inputs={"x": np.ones((1, 1), np.float32)}))
    assert float(result.outputs["s"]) == 200.0**3


def test_a_backward_counts_what_it_keeps_and_its_work_twice():
    executor = Executor()
    request = Request(graph=expanded_mm(500), inputs={"x": np.ones((1, 1))})
    _, shapes = executor._plan(request)
    forward, backward = shapes.forward_cost, shapes.backward_cost
    assert backward.work >= 2.5 * forward.work
    assert backward.peak_bytes > forward.peak_bytes
    # the mm keeps both its inputs (the expanded e) for its vjps; its gradient buffers add up
    assert backward.peak_bytes >= 3 * 500 * 500 * 8


def test_a_forward_peak_counts_only_live_values():
    nodes = [X, node("c", "constant", value=1.0)]
    prev = "x"
    for i in range(40):
        nodes.append(node(f"a{i}", "add", prev, "c"))
        prev = f"a{i}"
    nodes.append(node("s", "sum", prev))
    executor = Executor()
    request = Request(graph=graph(*nodes), inputs={"x": np.ones(2**16)})
    _, shapes = executor._plan(request)
    one = 2**16 * 8
    assert shapes.forward_cost.peak_bytes <= 3 * one + 64
    assert shapes.backward_cost.peak_bytes <= 5 * one + 64  # add saves nothing: the chain is not kept


def test_function_subgraphs_are_inferred_and_limited():
    inner = {
        "nodes": [
            {"id": "a", "op": "arg", "attrs": {"index": 0}},
            node("big", "expand", "a", shape=[30000, 30000]),
            node("t", "sum", "big"),
        ],
        "outputs": ["t"],
    }
    back = {
        "nodes": [
            {"id": "g", "op": "grad_output"},
            {"id": "a", "op": "arg", "attrs": {"index": 0}},
            node("o", "mul", "g", "a"),
        ],
        "outputs": ["o"],
    }
    fn = {"id": "f", "op": "function", "inputs": ["x"], "attrs": {"name": "Big", "forward": inner, "backward": back}}
    request = Request(graph=graph(X, fn, node("s", "sum", "f")), inputs={"x": np.ones((1,))})
    executor = Executor()
    err = refuse(executor, request)
    assert err.node == "f" and "900000000" in str(err)


def test_a_shape_error_inside_a_function_names_the_function_node():
    inner = {"nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, node("m", "mm", "a", "a")], "outputs": ["m"]}
    back = {"nodes": [{"id": "g", "op": "grad_output"}], "outputs": ["g"]}
    fn = {"id": "f", "op": "function", "inputs": ["x"], "attrs": {"forward": inner, "backward": back}}
    with pytest.raises(GraphError) as err:
        Executor().forward(Request(graph=graph(X, fn, node("s", "sum", "f")), inputs={"x": np.ones((2, 3))}))
    assert err.value.node == "f" and "'m' (mm)" in str(err.value) and err.value.kind == "invalid"


def test_function_output_shapes_flow_into_later_nodes():
    inner = {"nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, node("t", "mul", "a", "a")], "outputs": ["t"]}
    back = {
        "nodes": [
            {"id": "g", "op": "grad_output"},
            {"id": "a", "op": "arg", "attrs": {"index": 0}},
            {"id": "t", "op": "forward_value", "attrs": {"node": "t"}},
            node("two", "constant", value=2.0),
            node("d", "mul", "g", "a"),
            node("o", "mul", "d", "two"),
        ],
        "outputs": ["o"],
    }
    fn = {"id": "f", "op": "function", "inputs": ["x"], "attrs": {"forward": inner, "backward": back}}
    executor = Executor()
    request = Request(graph=graph(X, fn, node("s", "sum", "f")), inputs={"x": np.arange(3.0)})
    _, shapes = executor._plan(request)
    assert shapes.known["f"][0] == (3,) and shapes.all_known is False
    result = executor.backward(Request(graph=request.graph, inputs={"x": np.arange(3.0)}))
    np.testing.assert_allclose(result.grads["x"], 2 * np.arange(3.0))


def test_a_boolean_mask_result_is_bounded_at_run_time():
    mask = np.zeros(1000, bool)
    mask[0] = True
    g = graph(
        X,
        {"id": "m", "op": "input"},
        node("p", "getitem", "x", "m", index=[{"tensor": 0}]),
        node("u", "unsqueeze", "p", dim=1),
        node("e", "expand", "u", shape=[-1, 2**28]),
        node("s", "sum", "e"),
    )
    err = refuse(Executor(), Request(graph=g, inputs={"x": np.ones(1000), "m": mask}))
    assert err.node == "e" and "elements" in str(err)


def test_values_are_dropped_after_their_last_reader():
    nodes = [X, node("c", "constant", value=1.0)]
    prev = "x"
    for i in range(20):
        nodes.append(node(f"a{i}", "add", prev, "c"))
        prev = f"a{i}"
    nodes.append(node("s", "sum", prev))
    plan = Executor().plans.lookup(graph(*nodes), Limits())[0]
    x = np.ones(2**20)
    tracemalloc.start()
    try:
        execution = Execution(plan, {"x": x}, record=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert set(execution.values) == {"x", "s"}
    assert peak < 4 * x.nbytes  # the 20 intermediates (20 x 8 MiB) never coexist


def test_the_plan_cache_is_bounded_by_bytes():
    limits = Limits()
    cache = PlanCache(size=1000, max_bytes=50_000)
    plans = []
    for i in range(50):
        g = graph(X, node("c", "constant", value=float(i)), node("s", "mul", "x", "c"))
        plan, key = cache.lookup(g, limits)
        cache.store(key, plan)
        plans.append(plan_size(plan, key))
    assert cache.nbytes <= 50_000 and len(cache) < 50 and cache.nbytes == sum(plans[-len(cache) :])
    huge = graph(X, *[node(f"n{i}", "neg", "x") for i in range(500)], node("s", "sum", "x"))
    plan, key = cache.lookup(huge, limits)
    cache.store(key, plan)  # bigger than the whole bound: not kept
    assert cache.nbytes <= 50_000 and plan_size(plan, key) > 50_000


def test_a_refused_large_graph_leaves_nothing_in_the_cache():
    executor = Executor(Limits(max_request_bytes=MiB))
    nodes = [X] + [node(f"n{i}", "neg", "x") for i in range(2000)] + [node("s", "sum", "n0")]
    refuse(executor, Request(graph=graph(*nodes), inputs={"x": np.ones(2**18)}))
    assert len(executor.plans) == 0 and executor.plans.nbytes == 0


def test_a_tape_counts_what_function_nodes_hold():
    inner = {
        "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, node("e", "exp", "a"), node("t", "mul", "e", "a")],
        "outputs": ["t"],
    }
    back = {
        "nodes": [
            {"id": "g", "op": "grad_output"},
            {"id": "e", "op": "forward_value", "attrs": {"node": "e"}},
            node("o", "mul", "g", "e"),
        ],
        "outputs": ["o"],
    }
    fn = {"id": "f", "op": "function", "inputs": ["x"], "attrs": {"forward": inner, "backward": back}}
    executor = Executor()
    x = np.ones(2**20)
    result = executor.forward(Request(graph=graph(X, fn, node("s", "sum", "f")), inputs={"x": x}, retain_graph=True))
    # x, the function's saved forward value e and its output: at least 3 arrays of x's size
    assert executor.tapes.nbytes >= 3 * x.nbytes
    assert executor.backward(Request(tape=result.tape)).grads["x"].shape == x.shape


def test_cancel_stops_inside_a_function_subgraph_and_during_the_backward_walk():
    inner = {
        "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}]
        + [node(f"t{i}", "tanh", "a" if i == 0 else f"t{i - 1}") for i in range(50)],
        "outputs": ["t49"],
    }
    back = {"nodes": [{"id": "g", "op": "grad_output"}], "outputs": ["g"]}
    fn = {"id": "f", "op": "function", "inputs": ["x"], "attrs": {"forward": inner, "backward": back}}
    executor = Executor()
    event = threading.Event()
    event.set()
    with cancel_scope(event), pytest.raises(GraphError) as err:
        executor.forward(Request(graph=graph(X, fn, node("s", "sum", "f")), inputs={"x": np.ones(3)}))
    assert err.value.kind == "cancelled"
    request = Request(
        graph=graph(
            X, *[node(f"m{i}", "tanh", "x" if i == 0 else f"m{i - 1}") for i in range(200)], node("s", "sum", "m199")
        ),
        inputs={"x": np.ones(3)},
    )
    result = executor.forward(Request(graph=request.graph, inputs=request.inputs, retain_graph=True))
    with cancel_scope(event), pytest.raises(GraphError) as err:
        executor.backward(Request(tape=result.tape, retain_graph=True))
    assert err.value.kind == "cancelled"
    assert executor.backward(Request(tape=result.tape)).grads["x"].shape == (3,)


@pytest.mark.parametrize(
    ("name", "path", "body", "status", "node_id", "words"),
    [
        (
            "index 2**63",
            "/forward",
            {
                "graph": graph({"id": "x", "op": "input"}, node("s", "getitem", "x", index=[2**63])),
                "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}],
            },
            422,
            "s",
            "64-bit",
        ),
        (
            "(y > 0) / y",
            "/backward",
            {
                "graph": graph(
                    {"id": "y", "op": "input", "requires_grad": True},
                    node("z", "constant", value=0.0),
                    node("m", "gt", "y", "z"),
                    node("d", "div", "m", "y"),
                    node("s", "sum", "d"),
                ),
                "inputs": [{"name": "y", "shape": [3], "datatype": "FP32", "data": [1, -2, 3]}],
            },
            200,
            None,
            None,
        ),
        (
            "65-d reshape",
            "/forward",
            {
                "graph": graph({"id": "x", "op": "input"}, node("s", "reshape", "x", shape=[1] * 65)),
                "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            },
            422,
            "s",
            "65 dimensions",
        ),
        (
            "huge reshape",
            "/forward",
            {
                "graph": graph({"id": "x", "op": "input"}, node("s", "reshape", "x", shape=[2**62, 2**62, -1])),
                "inputs": [{"name": "x", "shape": [0], "datatype": "FP32", "data": []}],
            },
            422,
            "s",
            "too large",
        ),
        (
            "INT8 300",
            "/forward",
            {"graph": graph(node("s", "constant", value=300, dtype="INT8")), "inputs": []},
            422,
            "s",
            "INT8",
        ),
        (
            "INT64 2**63",
            "/forward",
            {"graph": graph(node("s", "constant", value=2**63)), "inputs": []},
            422,
            "s",
            "INT64",
        ),
        (
            "8000 mm",
            "/forward",
            {"graph": expanded_mm(8000), "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1]}]},
            413,
            None,
            "at its peak",
        ),
    ],
)
def test_bad_compute_inputs_are_4xx_naming_the_node(asgi, name, path, body, status, node_id, words):
    response = asgi.post(path, json=body)
    if status == 200:
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(response.json()["grads"][0]["data"], [-1.0, 0.0, -1 / 9], rtol=1e-6)
        return
    assert_error(response, status, words, node=node_id)


def test_info_reports_the_budgets(asgi):
    limits = asgi.get("/info").json()["limits"]
    assert limits["max_request_bytes"] == Limits().max_request_bytes
    assert limits["max_request_work"] == Limits().max_request_work
    assert limits["plan_cache_bytes"] == Limits().plan_cache_bytes


def test_budgets_are_configurable():
    with asgi_client(max_request_bytes=10**6, max_request_work=10**12) as client:
        assert client.get("/info").json()["limits"]["max_request_bytes"] == 10**6
        response = client.post(
            "/forward",
            json={
                "graph": expanded_mm(400),
                "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
            },
        )
        assert_error(response, 413, "(max_request_bytes)", "976.6 KiB")


def test_plan_cost_of_an_empty_backward_is_its_forward():
    executor = Executor()
    request = Request(graph=graph({"id": "x", "op": "input"}, node("s", "sum", "x")), inputs={"x": np.ones(10)})
    plan, shapes = executor._plan(request)
    assert plan_cost(plan, shapes.bounds, shapes.functions, True, ()) == shapes.forward_cost


def test_grad_nodes_count_the_backward_they_run():
    """A grad node differentiates its output's subgraph with create_graph: its work (about twice
    the subgraph's) counts in the budget, and nesting grows it, so an order that would run for
    long is refused before it starts."""

    def chain(order):
        nodes = [
            X,
            node("e", "expand", "x", shape=[400, 400]),
            node("h", "mm", "e", "e"),
            node("t", "tanh", "h"),
            node("s0", "sum", "t"),
        ]
        for k in range(1, order + 1):
            nodes.append(node(f"s{k}", "grad", f"s{k - 1}", "x"))
        return {**graph(*nodes, outputs=(f"s{order}",)), "version": "1.1"}

    costs = []
    for order in (0, 1, 2):
        executor = Executor()
        request = Request(graph=chain(order), inputs={"x": np.ones((1, 1))})
        _, shapes = executor._plan(request)
        costs.append(shapes.forward_cost.work)
    assert costs[1] >= 2 * costs[0] and costs[2] >= 2 * costs[1], costs
    limit = (costs[0] + costs[1]) // 2
    executor = Executor(Limits(max_request_work=limit))
    executor.forward(Request(graph=chain(0), inputs={"x": np.ones((1, 1))}))  # within the budget
    err = refuse(executor, Request(graph=chain(1), inputs={"x": np.ones((1, 1))}))
    assert "max_request_work" in str(err)
