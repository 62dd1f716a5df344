"""Cost growth of the request path (issue 24): behaviour, not timings (the figures are the benchmark
suite's, part 1 (f)). Requests leave no cyclic garbage; planning a graph of N nodes holds memory in
proportion to N, with shared structure held once; large plans run as recorded programs; what the
plan cache is charged covers what a plan holds."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import orjson

from wire.executor import Executor
from wire.graph import liveness, parse
from wire.infer import SIGNATURE_NODE_BYTES, check_request_inputs
from wire.messages import Request
from wire.stores import PLAN_STEP_BYTES, graph_key, plan_size

X = np.arange(4, dtype=np.float32).reshape(2, 2)
A, B = np.full((2, 2), 1.0001, np.float32), np.full((2, 2), 0.5, np.float32)


def _chain(length, salt=""):
    """The benchmark's chain: alternating `* a`, `+ b` on x, summed; `length` + 4 nodes."""
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "a", "op": "input"},
        {"id": "b", "op": "input"},
    ]
    prev = "x"
    for i in range(length):
        node_id = f"c{salt}{i}"
        nodes.append(
            {"id": node_id, "op": "mul" if i % 2 == 0 else "add", "inputs": [prev, "a" if i % 2 == 0 else "b"]}
        )
        prev = node_id
    nodes.append({"id": "loss", "op": "sum", "inputs": [prev]})
    return {"version": 1, "nodes": nodes, "outputs": ["loss"]}


def _request(graph):
    # a graph as the service gets it: parsed from JSON, so its strings are the request's own copies
    return Request(graph=orjson.loads(orjson.dumps(graph)), inputs={"x": X, "a": A, "b": B}, wrt=["x"])


def test_requests_leave_no_cyclic_garbage():
    executor = Executor()
    graphs = [_chain(300, f"g{i}_") for i in range(3)]
    for graph in graphs:  # first requests (planned, run on the engine and recorded), then repeats
        for _ in range(4):
            executor.backward(_request(graph))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        for graph in [*graphs, _chain(200, "new_")]:  # repeats (programs) and a new graph (the engine)
            for _ in range(3):
                executor.backward(_request(graph))
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()


def test_each_value_is_dropped_after_its_last_reader_but_inputs_and_kept_ones():
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True},
            {"id": "y", "op": "exp", "inputs": ["x"]},
            {"id": "z", "op": "sin", "inputs": ["y"]},
            {"id": "w", "op": "mul", "inputs": ["y", "z"]},
            {"id": "v", "op": "cos", "inputs": ["x"]},
            {"id": "u", "op": "add", "inputs": ["w", "v"]},
            {"id": "t", "op": "neg", "inputs": ["y"]},
        ],
        "outputs": ["u", "t"],
    }
    plan = parse(graph)
    assert plan.drops == [(), (), (), ("z",), (), ("w", "v"), ("y",)]
    assert liveness(plan.steps, {"y", "w"}) == [(), (), (), ("z",), (), ("v", "u"), ("t",)]


def test_large_plans_run_as_programs():
    executor = Executor()
    graph = _chain(6000)  # over the old 2,000-step bound; its program stays interpreted (over MAX_TERMS)
    ran = [executor.backward(_request(graph)).ran for _ in range(5)]
    assert ran == ["engine", "engine", "engine", "interpreted", "interpreted"]
    expected = Executor(compiled=False).backward(_request(graph))
    got = executor.backward(_request(graph))
    np.testing.assert_array_equal(got.grads["x"], expected.grads["x"])
    np.testing.assert_array_equal(got.outputs["loss"], expected.outputs["loss"])


def _held(make):
    """(what `make()` returns, the bytes it still holds once made)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        gc.collect()
        return made, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _freed(make, measure):
    """(measure(what `make()` returns), the bytes freed when it is dropped): what it holds, and not
    what making it left in caches elsewhere (which the suite's earlier tests may or may not have filled)."""
    gc.collect()
    tracemalloc.start()
    try:
        made = make()
        figure = measure(made)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        del made
        gc.collect()
        return figure, before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_a_plan_holds_its_nodes_once_and_is_charged_what_it_holds():
    sizes = {}
    for n in (5000, 20000):
        text = orjson.dumps(_chain(n))
        (plan, key), held = _held(lambda text=text: _plan_and_key(text))
        assert held <= plan_size(plan, key)  # the cache's charge covers it (ids, key and steps)
        assert held <= (PLAN_STEP_BYTES + 60) * n + len(key)  # ~300 bytes a node: no per-node copies of op names
        sizes[n] = held
        # equal attrs and the ops' names are shared, not one per node
        for op in ("mul", "add"):
            assert len({id(s.attrs) for s in plan.steps if s.op == op}) == 1
            assert len({id(s.op) for s in plan.steps if s.op == op}) == 1
    assert sizes[20000] < 4.5 * sizes[5000]  # linear


def _plan_and_key(text):
    graph = orjson.loads(text)
    plan = parse(graph)
    return plan, bytes(memoryview(graph_key(graph)))


def test_a_signature_shares_the_metas_of_equal_values():
    plan = parse(_chain(10000))
    shapes, held = _held(lambda: check_request_inputs(plan, {"x": X, "a": A, "b": B}))
    assert held <= SIGNATURE_NODE_BYTES * len(plan.steps)
    assert len({id(shapes.bounds[s.id]) for s in plan.steps if s.op in ("mul", "add")}) <= 2


def test_the_cost_walk_and_inference_figure_as_without_their_memos(monkeypatch):
    from wire import budget, infer

    plan = parse(_chain(2000))
    inputs = {"x": X, "a": A, "b": B}
    memoized = check_request_inputs(plan, inputs)
    costs = (memoized.forward_cost, memoized.backward_cost)  # priced when read: before the patches
    plan.checked.clear()
    monkeypatch.setattr(budget._OpCosts, "__call__", lambda self, step, bounds: budget._op_costs(step, bounds))
    rules = []
    original = infer._rule
    monkeypatch.setattr(infer, "_rule", lambda *a: rules.append(a) or original(*a))
    fresh = infer.check_request_inputs(plan, inputs)
    assert costs == (fresh.forward_cost, fresh.backward_cost)
    assert memoized.bounds == fresh.bounds and memoized.known == fresh.known
    assert len(rules) <= 3  # mul, add and sum: one rule call each


def test_a_binary_body_read_in_parts_holds_its_tensors_aligned():
    # a body that comes in several messages is read into one buffer where its tensors' bytes start
    # aligned, so that decoding uses them in place rather than copying a misaligned tensor
    import asyncio

    from service.body import BodyBudget, BodyHold, read_body
    from wire import codec
    from wire.limits import Limits

    x = np.arange(4096, dtype=np.float64)
    for pad in range(0, 16, 3):
        buffers = []
        head = {"inputs": [codec.encode_binary("x", x, buffers)], "id": "p" * pad}
        body, length = codec.join_body(head, buffers)
        messages = [
            {"type": "http.request", "body": body[i : i + 5000], "more_body": True} for i in range(0, len(body), 5000)
        ]
        messages[-1]["more_body"] = False

        async def receive(messages=messages):
            return messages.pop(0)

        headers = {"content-length": str(len(body))}
        read = asyncio.run(read_body(receive, headers, Limits(), length, BodyHold(BodyBudget(2**30)), 10.0))
        assert bytes(read) == body
        head_bytes, tail = codec.split_body(read, length)
        (name, array), *_ = codec.decode_tensors(orjson.loads(bytes(head_bytes))["inputs"], "inputs", tail, 0, 2**30)[0]
        assert array.flags.aligned and np.shares_memory(array, np.frombuffer(read, np.uint8))
        np.testing.assert_array_equal(array, x)


def test_an_interpreted_program_is_charged_what_it_holds():
    from wire import compile as wire_compile

    graph = _chain(8000)  # over codegen.MAX_TERMS: interpreted, kept in compact form
    request = _request(graph)
    plan = parse(request.graph)
    check_request_inputs(plan, request.inputs)

    def make():
        return wire_compile._slimmed(wire_compile.record(plan, request, True)[2])

    charged, held = _freed(make, wire_compile.program_bytes)
    assert held <= charged <= held + 4096  # measured from its arrays, not a per-step guess
    program = make()
    assert charged < 100 * len(program.kind)  # a few int32s a step, not an object per step
    expected = Executor(compiled=False).backward(_request(graph))
    outputs, grads = program.interpret(request.inputs, {})
    np.testing.assert_array_equal(grads["x"], expected.grads["x"])
    np.testing.assert_array_equal(outputs["loss"], expected.outputs["loss"])


def test_a_node_of_a_kind_parsed_before_is_checked_as_the_first_of_its_kind():
    """parse finds an op node of a checked kind (op, arity, attrs) at once: a node that differs from one in
    any field is refused as it would be on its own, with the same message and field."""
    import pytest

    from wire.errors import GraphError

    good = {"id": "n", "op": "mul", "inputs": ["x", "a"]}
    bad = [
        {**good, "requires_grad": True},
        {**good, "shape": [2, 2]},
        {**good, "extra": 1},
        {**good, "attrs": None},
        {**good, "attrs": [1]},
        {**good, "id": ""},
        {**good, "id": 5},
        {**good, "id": "x"},
        {**good, "op": 5},
        {**good, "inputs": "x"},
        {**good, "inputs": ["x", "nope"]},
        {**good, "inputs": ["x", 5]},
        {**good, "inputs": ["x", ["a"]]},
        {**good, "inputs": ["x", None]},
        {**good, "inputs": ["x", "a", "b"]},
    ]

    def refusal(nodes):
        graph = {"version": 1, "nodes": [*_chain(0)["nodes"][:3], *nodes], "outputs": ["x"]}
        with pytest.raises(GraphError) as info:
            parse(graph)
        return str(info.value), info.value.field, info.value.node

    for node in bad:  # after a node of another kind, then of its own kind
        alone = refusal([{"id": "m", "op": "add", "inputs": ["x", "a"]}, node])
        assert refusal([{**good, "id": "m"}, node]) == alone, node
    plan = parse({"version": 1, "nodes": [*_chain(0)["nodes"][:3], {**good, "id": "m"}, good], "outputs": ["n"]})
    assert [s.op for s in plan.steps[3:]] == ["mul", "mul"] and plan.steps[4].inputs == ("x", "a")


def test_a_function_subgraph_reads_an_arg_after_a_two_input_op():
    """A subgraph's arg read after one of its binary ops runs is still the function's argument (its run's own
    operands are not its args): f(x, y) = (x * x) * y, so f = x^2 y, df/dx = 2 x y g, df/dy = x^2 g."""
    arg = [{"id": "a0", "op": "arg", "attrs": {"index": 0}}]
    cube = {
        "name": "SquareTimes",
        "forward": {
            "nodes": [
                *arg,
                {"id": "sq", "op": "mul", "inputs": ["a0", "a0"]},
                {"id": "a1", "op": "arg", "attrs": {"index": 1}},
                {"id": "out", "op": "mul", "inputs": ["sq", "a1"]},
            ],
            "outputs": ["out"],
        },
        "backward": {
            "nodes": [
                *arg,
                {"id": "g", "op": "grad_output"},
                {"id": "ga", "op": "mul", "inputs": ["a0", "g"]},
                {"id": "a1", "op": "arg", "attrs": {"index": 1}},
                {"id": "gy", "op": "mul", "inputs": ["ga", "a0"]},
                {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
                {"id": "g2", "op": "mul", "inputs": ["ga", "two"]},
                {"id": "gx", "op": "mul", "inputs": ["g2", "a1"]},
            ],
            "outputs": ["gx", "gy"],
        },
    }
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True},
            {"id": "y", "op": "input", "requires_grad": True},
            {"id": "f", "op": "function", "inputs": ["x", "y"], "attrs": cube},
            {"id": "s", "op": "sum", "inputs": ["f"]},
        ],
        "outputs": ["s"],
    }
    x, y = np.array([1.0, 2.0, 3.0], np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    result = Executor().backward(Request(graph=graph, inputs={"x": x, "y": y}))
    np.testing.assert_allclose(result.outputs["s"], np.sum(x * x * y))
    np.testing.assert_allclose(result.grads["x"], 2 * x * y)
    np.testing.assert_allclose(result.grads["y"], x * x)
