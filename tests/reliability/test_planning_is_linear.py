"""Planning prices grad nodes in linear memory and time, whatever their fan-in.

Before, every grad node held its own tuple of its whole group (N grad nodes of one output: N² entries,
513 MiB for N = 8,000 in a 0.7 MB body) and the budget walked each grad node's ancestors from scratch.
"""

from __future__ import annotations

import tracemalloc

import numpy
import orjson

from wire import budget
from wire.budget import plan_cost
from wire.executor import Executor
from wire.graph import parse
from wire.handler import handle
from wire.infer import check_request_inputs
from wire.limits import Limits


def fan_in_body(n: int) -> bytes:
    """n grad nodes of one output, each with respect to its own node."""
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "y", "op": "mul", "inputs": ["x", "x"]},
        {"id": "s", "op": "sum", "inputs": ["y"]},
    ]
    nodes += [{"id": f"a{i}", "op": "neg", "inputs": ["x"]} for i in range(n)]
    nodes += [{"id": f"g{i}", "op": "grad", "inputs": ["s", f"a{i}"]} for i in range(n)]
    request = {"graph": {"version": "1.1", "nodes": nodes, "outputs": ["g0"]}}
    request["inputs"] = [{"name": "x", "shape": [3], "datatype": "FP64", "data": [1, 2, 3]}]
    return orjson.dumps(request)


def test_grad_nodes_sharing_an_output_are_planned_in_linear_memory():
    body = fan_in_body(4000)  # quadratic, this was 16 million group entries (~128 MiB)
    tracemalloc.start()
    try:
        parts, _, _ = handle(Executor(Limits()), "/forward", body, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert orjson.loads(b"".join(bytes(p) for p in parts))["outputs"][0]["data"] == [0.0, 0.0, 0.0]
    assert peak < 40 * 2**20, f"planning 4,000 grad nodes of one output peaked at {peak / 2**20:.0f} MiB"


def costs(body: dict):
    plan = parse(body["graph"])
    shapes = check_request_inputs(plan, {"x": numpy.ones(3)})
    return plan_cost(plan, shapes.bounds, shapes.functions, record=True, requires=plan.requires_grad | plan.grad_inputs)


def test_grad_nodes_past_the_walk_budget_are_charged_an_upper_bound(monkeypatch):
    body = orjson.loads(fan_in_body(50))
    exact = costs(body)
    monkeypatch.setattr(budget._Ancestry, "WALK_FACTOR", 0)  # every grad node charged all before it
    bound = costs(body)
    assert bound.work > exact.work and bound.peak_bytes >= exact.peak_bytes


def test_code_generation_is_bounded_by_fan_in_not_by_steps():
    """`cat([x] * 20000)` is three steps but 20,000 arguments and 20,000 vjp outputs: generating it was a
    40,000-line function (500 MiB while Python compiled it, uncancellable). It stays interpreted."""
    k = 20_000
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "c", "op": "cat", "inputs": ["x"] * k, "attrs": {"dim": 0}},
        {"id": "s", "op": "sum", "inputs": ["c"]},
    ]
    request = {"graph": {"version": 1, "nodes": nodes, "outputs": ["s"]}}
    request["inputs"] = [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]
    executor, body = Executor(Limits()), orjson.dumps(request)
    tracemalloc.start()
    try:
        for _ in range(4):  # planned, recorded, checked and run interpreted, then (formerly) generated
            parts, _, _ = handle(executor, "/backward", body, None)
            answer = orjson.loads(b"".join(bytes(p) for p in parts))
            assert answer["grads"][0]["data"] == [float(k)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"a 20,000-input cat peaked at {peak / 2**20:.0f} MiB"
