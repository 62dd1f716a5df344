"""wire.layouts: a binary request whose header was seen before is decoded from that header's layout
(no JSON parse, no header checks, no graph lookup) into the same request the full decode makes; and
anything else (another tail length, a JSON tensor, a refused header, an evicted plan) gets the full
decode's answer or error; and, once a request of it ran on a cached plan, admitted as that one was."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from wire import codec, handler
from wire import executor as executor_module
from wire.errors import GraphError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import encode_request

X = np.arange(6, dtype=np.float32).reshape(2, 3)
G = np.full((2, 3), 2.0, np.float32)
GRAPH = {
    "version": 1,
    "nodes": [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "y", "op": "mul", "inputs": ["x", "x"]},
    ],
    "outputs": ["y"],
}


def _body(x=X, graph=GRAPH, **header):
    body, length = encode_request({"graph": graph, **header}, [("x", x)], [("y", G)])
    return body, length


def _answer(executor, body, length):
    parts, answer_length, _ = handler.handle(executor, "/backward", body, length)
    header, tail = handler.read_body(b"".join(bytes(p) for p in parts), answer_length)
    return header, bytes(tail)


def _no_full_decode(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("decoded in full")

    monkeypatch.setattr(handler, "decode_request", refuse)


def test_a_repeat_header_is_decoded_from_its_layout_into_the_same_request_and_answer(monkeypatch):
    executor = Executor()
    body, length = _body()
    first = _answer(executor, body, length)
    assert _answer(executor, body, length) == first  # the layout's plan is filled once a request ran on it
    hits = executor.plans.hits
    _no_full_decode(monkeypatch)
    monkeypatch.setattr(executor.plans, "lookup", lambda *a: pytest.fail("the graph was looked up"))
    monkeypatch.setattr(executor_module, "admit", lambda *a: pytest.fail("admitted in full"))
    other = bytearray(body)
    other[length:] = np.stack([X + 1, G]).tobytes()  # same header, other tensor bytes
    request = handler.decode(executor, other, length)
    assert request.graph == GRAPH and request.binary_output and request.wrt is None
    assert np.shares_memory(request.inputs["x"], np.frombuffer(other, np.uint8))  # views of the new body
    np.testing.assert_array_equal(request.inputs["x"], X + 1)
    np.testing.assert_array_equal(request.grad_outputs["y"], G)
    header, tail = _answer(executor, bytes(other), length)
    assert header == first[0] and executor.plans.hits == hits + 1  # still counted as a plan cache hit
    y, grad = np.frombuffer(tail, np.float32).reshape(2, 2, 3)
    np.testing.assert_array_equal(y, (X + 1) ** 2)
    np.testing.assert_array_equal(grad, 2 * (X + 1) * G)


def test_headers_taking_turns_are_each_decoded_from_their_own_layout(monkeypatch):
    """Two clients' headers alternating: each repeat is decoded from its own layout (the one decoded last is
    compared before the table is looked up, `Layouts.decode`), never from the other's, whose tail is as long."""
    executor = Executor()
    added = {**GRAPH, "nodes": [GRAPH["nodes"][0], {"id": "y", "op": "add", "inputs": ["x", "x"]}]}
    bodies = [_body(), _body(graph=added)]
    firsts = [_answer(executor, *body) for body in bodies]
    assert firsts[0][1] != firsts[1][1] and len(bodies[0][0]) - bodies[0][1] == len(bodies[1][0]) - bodies[1][1]
    _no_full_decode(monkeypatch)
    for i in (0, 1, 1, 0, 1, 0, 0):
        assert _answer(executor, *bodies[i]) == firsts[i]


@pytest.mark.parametrize("cut", [4, -4])
def test_a_repeat_header_with_another_tail_length_gets_the_full_decodes_error(cut):
    executor = Executor()
    body, length = _body()
    handler.handle(executor, "/backward", body, length)
    bad = body[:cut] if cut < 0 else body + bytes(cut)
    errors = []
    for _ in range(2):
        with pytest.raises(GraphError) as err:
            handler.decode(executor, bad, length)
        errors.append((str(err.value), err.value.field, err.value.kind))
    assert errors[0] == errors[1] and errors[0][2] == "malformed"


def test_a_header_refused_after_decoding_is_refused_the_same_way_again():
    executor = Executor(Limits(max_request_work=10))
    body, length = encode_request({"graph": GRAPH}, [("x", np.ones((64, 64), np.float32))])
    errors = []
    for _ in range(3):
        with pytest.raises(GraphError) as err:
            handler.handle(executor, "/backward", body, length)
        errors.append((str(err.value), err.value.node, err.value.kind))
    assert errors[0] == errors[1] == errors[2] and errors[0][2] == "too_large"


def test_a_body_with_a_json_tensor_is_always_decoded_in_full(monkeypatch):
    executor = Executor()
    json_x = {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": X.ravel().tolist()}
    buffers = []
    header = {"graph": GRAPH, "inputs": [json_x], "grad_outputs": [codec.encode_binary("y", G, buffers)]}
    body, length = codec.join_body(header, buffers)
    handler.handle(executor, "/backward", body, length)
    _no_full_decode(monkeypatch)
    with pytest.raises(AssertionError, match="decoded in full"):
        handler.decode(executor, body, length)


def test_a_layout_whose_plan_was_evicted_plans_again_and_answers_the_same():
    executor = Executor(Limits(plan_cache_size=1))
    body, length = _body()
    first = [_answer(executor, body, length) for _ in range(3)]
    other = dict(GRAPH, nodes=[GRAPH["nodes"][0], {"id": "y", "op": "add", "inputs": ["x", "x"]}])
    handler.handle(executor, "/backward", *_body(graph=other))  # evicts the first graph's plan
    again = [_answer(executor, body, length) for _ in range(3)]
    assert again[0][1] == first[0][1] and again[-1][0]["plan"] == first[0][0]["plan"]


def test_a_misaligned_tensor_is_copied_only_when_asked_to_be_aligned():
    executor = Executor()
    body, length = _body()
    handler.decode(executor, body, length)
    shifted = memoryview(bytearray(len(body) + 1))[1:]
    shifted[:] = body
    assert not handler.decode(executor, shifted, length, aligned=False).inputs["x"].flags.aligned
    aligned = handler.decode(executor, shifted, length).inputs["x"]
    assert aligned.flags.aligned
    np.testing.assert_array_equal(aligned, X)


def test_a_layout_keeps_no_plan_alive_once_the_cache_dropped_it():
    executor = Executor(Limits(plan_cache_size=1))
    body, length = _body()
    header = [_answer(executor, body, length) for _ in range(3)][-1][0]
    plan = weakref.ref(executor.plans.by_id(header["plan"]))
    other = dict(GRAPH, nodes=[GRAPH["nodes"][0], {"id": "y", "op": "add", "inputs": ["x", "x"]}])
    handler.handle(executor, "/backward", *_body(graph=other))  # evicts the first graph's plan
    gc.collect()
    assert plan() is None and executor.layouts.decode(body, length).layout.admitted


def test_a_repeat_answer_sends_its_header_again_only_while_it_says_the_same(monkeypatch):
    from wire import layouts
    from wire.messages import Result, encode_result_parts

    executor = Executor()
    body, length = _body()
    first = _answer(executor, body, length)
    for _ in range(4):  # the engine, then the recorded program (interpreted, then generated): one header
        monkeypatch.setattr(layouts, "encode_result_parts", lambda *a: pytest.fail("encoded in full"))
        assert _answer(executor, body, length) == first
        monkeypatch.undo()
    layout = handler.decode(executor, body, length).layout
    big = np.arange(6, dtype=">f4").reshape(2, 3)  # converted to little-endian when sent
    for outputs, plan in (
        ({"y": X.T}, first[0]["plan"]),  # another shape, and not contiguous
        ({"y": X.astype(np.float64)}, first[0]["plan"]),
        ({"y": X, "z": X}, first[0]["plan"]),
        ({"y": big}, first[0]["plan"]),
        ({"y": X}, "another plan"),
    ):
        result = Result(None, outputs, {"x": G}, plan=plan)
        parts, answer_length = layout.encode(result)
        want, want_length = encode_result_parts(result, True)
        assert answer_length == want_length
        assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in want)
