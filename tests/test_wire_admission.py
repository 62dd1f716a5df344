"""wire.admission: one admission per request (a Ticket: where it runs, what it costs, or a refusal),
the one body pipeline (wire.handler) that the service and the embedded client both run, and the
limits and request keys declared once."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from wire.admission import INLINE, POOL, SHORT, Refusal
from wire.errors import GraphError
from wire.executor import Executor
from wire.handler import decode, handle, read_body
from wire.limits import LIMIT_FIELDS, Limits
from wire.messages import PARAMETER_KEYS, REQUEST, REQUEST_KEYS, decode_result, encode_request


def _graph(shape, steps: int = 1, outputs=("s", "h0")) -> dict:
    """x expanded to `shape`, `steps` tanh nodes, summed; the sum and the expanded value are the outputs."""
    nodes = [{"id": "x", "op": "input", "requires_grad": True}, {"id": "h0", "op": "expand", "inputs": ["x"]}]
    nodes[1]["attrs"] = {"shape": list(shape)}
    for i in range(steps):
        nodes.append({"id": f"h{i + 1}", "op": "tanh", "inputs": [f"h{i}"]})
    nodes.append({"id": "s", "op": "sum", "inputs": [f"h{steps}"]})
    return {"version": 1, "nodes": nodes, "outputs": list(outputs)}


def _request(executor, shape, binary=False, steps=1):
    body, length = encode_request({"graph": _graph(shape, steps)}, [("x", np.ones((1, 1)))], binary=binary)
    return decode(executor, body, length)


def test_a_ticket_says_where_a_request_runs_and_what_was_planned():
    executor = Executor()
    light = executor.admit(_request(executor, (4, 4)), "backward")
    assert light.where == INLINE and light.planned and light.cost.work > 0
    assert light.answer_elements == 1 + 16 + 1  # s, h0 and the gradient of x, all JSON
    short = executor.admit(_request(executor, (200, 200), binary=True), "backward")
    assert short.where == SHORT and short.answer_elements == 0  # a binary answer has no JSON part
    heavy = executor.admit(_request(executor, (600, 600), binary=True), "backward")
    assert heavy.where == POOL and heavy.planned
    assert heavy.cost.peak_bytes > short.cost.peak_bytes > light.cost.peak_bytes


def test_a_held_plan_too_long_to_plan_cheaply_gets_an_unplanned_ticket_admitted_where_it_runs():
    executor = Executor()
    first = executor.run(executor.admit(_request(executor, (4, 4), steps=40, binary=True), "forward"))
    again = decode(executor, orjson.dumps({"plan": first.plan, "inputs": [], "parameters": {}}), None)
    again.inputs = {"x": np.full((1, 1), 2.0, np.float32)}  # a new signature: its shapes are not kept yet
    ticket = executor.admit(again, "forward", cheap_steps=32)
    assert ticket.where == POOL and not ticket.planned
    result = executor.run(ticket)  # admitted fully, then run
    value = 2.0
    for _ in range(40):
        value = np.tanh(value)
    assert result.outputs["s"] == pytest.approx(16 * value, rel=1e-5)
    assert result.outputs["h0"].shape == (4, 4) and result.plan == first.plan


def test_a_signature_is_priced_per_kind_when_first_asked_and_not_on_the_loop_for_a_long_plan():
    executor = Executor()
    request = _request(executor, (4, 4), steps=40, binary=True)
    request.grad_outputs = {"h0": np.ones((4, 4))}
    first = executor.run(executor.admit(request, "backward"))
    (shapes,) = executor.plans.by_id(first.plan).checked.values()
    assert list(shapes.costs) == [True]  # a backward never walks a forward's costs
    again = decode(executor, orjson.dumps({"plan": first.plan, "inputs": [], "parameters": {}}), None)
    again.inputs = {"x": np.ones((1, 1))}  # the signature kept, but not yet priced for a forward:
    ticket = executor.admit(again, "forward", cheap_steps=32)  # too long to walk here
    assert ticket.where == POOL and not ticket.planned and list(shapes.costs) == [True]
    ticket = executor.admit(ticket.request, "forward")  # within the budgets by its upper bound: not walked
    assert ticket.cost == shapes.upper[False] and list(shapes.costs) == [True]
    assert shapes.backward_cost.work > shapes.forward_cost.work > 0


def _chain(length: int) -> dict:
    """x * a + b ... summed: `length` mul/add nodes, a and b broadcast from (2,) against x (2, 2)."""
    nodes = [{"id": n, "op": "input", "requires_grad": n == "x"} for n in ("x", "a", "b")]
    for i in range(length):
        nodes.append(
            {"id": f"c{i}", "op": "add" if i % 2 else "mul", "inputs": [f"c{i - 1}" if i else "x", "ab"[i % 2]]}
        )
    nodes.append({"id": "s", "op": "sum", "inputs": [f"c{length - 1}"]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


@pytest.mark.parametrize("graph", [_graph((30, 30), 5), _graph((8, 8), 3, outputs=("s",)), _chain(300)])
def test_a_cost_within_the_budgets_by_its_upper_bound_is_not_walked_and_one_over_them_is(graph):
    chain = graph["nodes"][1]["id"] == "a"
    arrays = {"x": np.ones((2, 2)), "a": np.ones(2), "b": np.ones(2)} if chain else {"x": np.ones((1, 1))}

    def admitted(limits, kind):
        executor = Executor(limits)
        body, length = encode_request({"graph": graph}, list(arrays.items()), binary=True)
        return executor.admit(decode(executor, body, length), kind)

    for kind in ("forward", "backward"):
        ticket = admitted(Limits(), kind)
        backward, shapes = kind == "backward", ticket.shapes
        upper, exact = shapes.upper[backward], shapes.cost(backward)
        assert exact.peak_bytes <= upper.peak_bytes and exact.work <= upper.work and exact.node_work <= upper.node_work
        assert exact.peak_bytes < upper.peak_bytes  # (so the budgets below fall between them)
        # within the budgets by its bound: admitted without walking the plan, as its bound
        ticket = admitted(Limits(max_request_bytes=upper.peak_bytes, max_request_work=upper.work), kind)
        assert ticket.cost == upper
        if len(graph["nodes"]) > 256:  # (a short plan's backward is walked to decide where it runs: SHORT)
            assert backward not in ticket.shapes.costs
        # the bound over a budget, the cost within: walked, and admitted as it costs
        ticket = admitted(Limits(max_request_bytes=exact.peak_bytes, max_request_work=upper.work), kind)
        assert ticket.cost == exact and ticket.shapes.costs[backward] == exact
        # the cost over it: refused naming its node, as the walk finds it
        with pytest.raises(Refusal, match="max_request_bytes") as refused:
            admitted(Limits(max_request_bytes=exact.peak_bytes - 1, max_request_work=upper.work), kind)
        assert refused.value.node == exact.peak_node is not None


def test_a_json_answer_over_its_bound_is_refused_before_running_in_the_embedded_pipeline_too():
    executor = Executor(Limits(max_json_output_elements=100))
    ran = []
    run = executor.run
    executor.run = lambda ticket: ran.append(ticket) or run(ticket)
    body, length = encode_request({"graph": _graph((20, 20))}, [("x", np.ones((1, 1)))], binary=False)
    with pytest.raises(Refusal) as refused:
        handle(executor, "/forward", body, length)
    assert refused.value.kind == "too_large" and refused.value.field == "parameters.binary_data_output"
    assert "401 elements, over the limit of 100" in str(refused.value) and ran == []
    body, length = encode_request({"graph": _graph((20, 20))}, [("x", np.ones((1, 1)))], binary=True)
    parts, answer_length, _ = handle(executor, "/forward", body, length)  # binary: no JSON bound
    assert decode_result(*read_body(b"".join(bytes(p) for p in parts), answer_length), 2**20).outputs["h0"].size == 400


def test_the_refusals_name_the_node_and_the_figure():
    executor = Executor(Limits(max_tensor_elements=1000, max_request_work=10**6))
    with pytest.raises(Refusal, match=r"node 'h0' would hold 1600 elements \(shape \[40, 40\]\)") as big:
        executor.admit(_request(executor, (40, 40), binary=True), "forward")
    assert big.value.node == "h0"
    with pytest.raises(Refusal, match=r"max_request_work"):
        executor.admit(_request(executor, (30, 30), steps=400, binary=True), "backward")
    with pytest.raises(GraphError, match="/forward takes no tape") as wrong:  # invalid before planned
        executor.admit(decode(executor, orjson.dumps({"graph": {}, "wrt": ["x"]}), None), "forward")
    assert wrong.value.kind == "invalid"


def test_limits_and_request_keys_are_declared_once():
    from service.schema import request_schema
    from service.settings import Settings

    fields = Settings.model_fields
    for declared in LIMIT_FIELDS:
        setting = fields[declared.name]
        assert setting.default == declared.default == getattr(Limits(), declared.name)
        assert setting.description == declared.doc
    assert Settings(max_nodes=7).limits().max_nodes == 7
    with pytest.raises(ValueError, match="greater than 0"):
        Settings(max_nodes=0)
    for kind in ("forward", "backward"):
        documented = request_schema(kind)["properties"]
        assert set(documented) == {key.name for key in REQUEST if kind in key.paths} < REQUEST_KEYS
        assert set(documented["parameters"]["properties"]) == {key.name for key in PARAMETER_KEYS}


def _rows_graph(chain: int, rows: int) -> dict:
    """A `chain` of tanh from x, then `rows` grad nodes each of its own element of the chain's end: the
    shape of a Jacobian taken row by row, whose walks together exhaust the ancestry walk's budget."""
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    nodes += [{"id": f"c{i}", "op": "tanh", "inputs": ["x" if i == 0 else f"c{i - 1}"]} for i in range(chain)]
    end = f"c{chain - 1}"
    for r in range(rows):
        nodes.append({"id": f"e{r}", "op": "sum", "inputs": [end], "attrs": {"dim": [0]}})
        nodes.append({"id": f"g{r}", "op": "grad", "inputs": [f"e{r}", "x"]})
    nodes.append({"id": "out", "op": "stack", "inputs": [f"g{r}" for r in range(rows)]})
    return {"version": "1.1", "nodes": nodes, "outputs": ["out"]}


def test_a_bound_past_a_floats_range_is_refused_with_its_figure_not_an_internal_error():
    executor = Executor()
    body, length = encode_request({"graph": _rows_graph(1500, 1500)}, [("x", np.ones((4,)))])
    with pytest.raises(Refusal, match=r"would need about 2\^\d+ bytes at its peak") as caught:
        executor.admit(decode(executor, body, length), "forward")
    assert caught.value.node is not None


def test_a_grad_node_is_priced_for_what_its_walk_differentiates_not_the_constants_it_reads():
    # y = x @ W with a large constant W and a small x: each of 64 rows (a grad node) records a graph of
    # y's and x's size; charging W to every row (the old price) put 64 W's on the peak
    rows = 64
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "w", "op": "input"},
        {"id": "y", "op": "matmul", "inputs": ["x", "w"]},
    ]
    for r in range(rows):
        nodes.append({"id": f"s{r}", "op": "sum", "inputs": ["y"]})
        nodes.append({"id": f"g{r}", "op": "grad", "inputs": [f"s{r}", "x"]})
    nodes.append({"id": "out", "op": "stack", "inputs": [f"g{r}" for r in range(rows)]})
    graph = {"version": "1.1", "nodes": nodes, "outputs": ["out"]}
    x, w = np.ones((1, 512), np.float32), np.ones((512, 64), np.float32)
    executor = Executor()
    body, length = encode_request({"graph": graph}, [("x", x), ("w", w)])
    forward = executor.admit(decode(executor, body, length), "forward")
    assert forward.cost.peak_bytes < 8 * w.nbytes  # was over 64 x W
    result = executor.run(forward)
    np.testing.assert_allclose(result.outputs["out"], np.full((rows, 1, 512), 64.0))
    backward = executor.admit(decode(executor, body, length), "backward")
    assert backward.cost.work > forward.cost.work  # a forward is not charged the backward it does not run
