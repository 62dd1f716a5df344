"""wire.handler.repeat: a binary request whose header and tail's size are the last one's, once a request of that
header was admitted to run on the event loop by a verified program, is answered by that program straight from the
body, with the bytes, counts (plan cache hits, what ran) and errors the full pipeline (decode, admit, execute,
encode) gives; anything else is left to that pipeline (None) with nothing done."""

from __future__ import annotations

import contextvars

import numpy as np
import pytest

from tests.test_wire_layouts import GRAPH, G, X
from wire import codec, handler
from wire import compile as compile_module
from wire.compile import FAILURES, RUNS, Fallback
from wire.errors import GraphError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import encode_request

BINARY = {"binary_data_output": True}


@pytest.fixture(autouse=True)
def _quiet():
    """A served worker's context: IEEE results quiet (`handler.quiet_ieee`), as its requests run there."""
    context = contextvars.copy_context()
    context.run(handler.quiet_ieee)
    yield context


def _body(x=X, graph=GRAPH, parameters=BINARY, **header):
    return encode_request({"graph": graph, "parameters": parameters, **header}, [("x", x)], [("y", G)])


def _bytes(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


def _full(executor, body, length, kind="backward"):
    parts, answer_length, _ = handler.handle(executor, f"/{kind}", body, length)
    return _bytes(parts), answer_length


def _warm(context, executor, body, length, kind="backward"):
    """Full requests until one repeat answers (the program recorded, verified): that repeat's answer."""
    for _ in range(8):
        context.run(_full, executor, body, length, kind)
        done = context.run(handler.repeat, executor, body, length, kind, True)
        if done is not None:
            return done
    pytest.fail("no repeat was answered by a program")


def test_a_repeat_is_answered_by_its_program_as_the_full_pipeline_answers(_quiet, monkeypatch):
    executor = Executor()
    body, length = _body()
    where, (parts, answer_length, tape, (plan, ran)) = _warm(_quiet, executor, body, length)
    assert where == "inline" and tape is None and ran in ("interpreted", "compiled")
    other = bytearray(body)
    other[length:] = np.stack([X + 1, G]).tobytes()  # same header, other tensor bytes
    want = _quiet.run(_full, executor, bytes(other), length)
    runs, hits = dict(RUNS), executor.plans.hits
    for name in ("decode", "execute", "encode"):
        monkeypatch.setattr(handler, name, lambda *a, name=name: pytest.fail(f"{name} ran"))
    monkeypatch.setattr(executor, "admit", lambda *a: pytest.fail("admitted"))
    where, (parts, answer_length, _, (plan, ran)) = _quiet.run(handler.repeat, executor, other, length, "backward", 1)
    assert (_bytes(parts), answer_length) == want
    assert executor.plans.hits == hits + 1 and RUNS[ran] == runs[ran] + 1  # counted as the full pipeline counts
    y, grad = np.frombuffer(_bytes(parts)[answer_length:], np.float32).reshape(2, 2, 3)
    np.testing.assert_array_equal(y, (X + 1) ** 2)
    np.testing.assert_array_equal(grad, 2 * (X + 1) * G)


@pytest.mark.parametrize("cut", [4, -4])
def test_a_repeat_header_with_another_tail_length_is_left_to_the_full_decode(_quiet, cut):
    executor = Executor()
    body, length = _body()
    _warm(_quiet, executor, body, length)
    hits = executor.plans.hits
    assert (
        _quiet.run(handler.repeat, executor, body[:cut] if cut < 0 else body + bytes(cut), length, "backward", 1)
        is None
    )
    assert executor.plans.hits == hits


def test_a_header_of_the_same_length_saying_something_else_is_left_to_the_full_decode(_quiet):
    """A body that keeps the last one's length and header length but not its header (another op, a larger shape's
    claim) is never run by the last one's program: its own header is read, and refused where it must be."""
    executor = Executor(Limits(max_tensor_elements=6))
    body, length = _body()
    _warm(_quiet, executor, body, length)
    added = dict(GRAPH, nodes=[GRAPH["nodes"][0], {"id": "y", "op": "add", "inputs": ["x", "x"]}])
    other, other_length = _body(graph=added)
    assert (len(other), other_length) == (len(body), length)
    assert _quiet.run(handler.repeat, executor, other, other_length, "backward", True) is None
    wider = bytes(body).replace(b'"shape":[2,3]', b'"shape":[3,3]', 1)
    assert len(wider) == len(body) and wider != body
    assert _quiet.run(handler.repeat, executor, wider, length, "backward", True) is None
    with pytest.raises(GraphError, match="more than the limit of 6 elements"):  # the full decode's own refusal
        _quiet.run(_full, executor, wider, length)


def test_what_the_full_pipeline_must_do_is_left_to_it(_quiet):
    executor = Executor(Limits(plan_cache_size=1))
    body, length = _body()
    _warm(_quiet, executor, body, length)
    assert _quiet.run(handler.repeat, executor, body, length, "forward", True) is None  # admitted to backward only
    fresh = contextvars.Context()  # IEEE warnings not quieted there: `execute`'s errstate is needed
    assert fresh.run(handler.repeat, executor, body, length, "backward", True) is None
    buffers = []
    tensors = {"inputs": [codec.encode_binary("x", X, buffers)], "grad_outputs": [codec.encode_binary("y", G, buffers)]}
    json_answer = codec.join_body({"graph": GRAPH, **tensors}, buffers)
    for other in (json_answer, _body(parameters={**BINARY, "retain_graph": True})):  # a JSON answer, a tape
        for _ in range(4):
            _quiet.run(_full, executor, *other)
        assert _quiet.run(handler.repeat, executor, *other, "backward", True) is None
    _quiet.run(_full, executor, body, length)
    assert _quiet.run(handler.repeat, executor, body, length, "backward", True) is not None
    added = dict(GRAPH, nodes=[GRAPH["nodes"][0], {"id": "y", "op": "add", "inputs": ["x", "x"]}])
    _quiet.run(_full, executor, *_body(graph=added))  # evicts the first graph's plan (a cache of one)
    _quiet.run(handler.decode, executor, body, length)
    assert _quiet.run(handler.repeat, executor, body, length, "backward", True) is None
    _quiet.run(_full, executor, body, length)
    executor.compiled = False
    assert _quiet.run(handler.repeat, executor, body, length, "backward", True) is None


def test_a_short_ticket_runs_here_only_while_the_loop_is_idle(_quiet):
    executor = Executor()
    x = np.ones((64, 1024), np.float32)  # over LIGHT_STEPS' elements: a SHORT ticket
    body, length = encode_request({"graph": GRAPH, "parameters": BINARY}, [("x", x)], [("y", np.ones_like(x))])
    assert _warm(_quiet, executor, body, length)[0] == "short"
    assert _quiet.run(handler.repeat, executor, body, length, "backward", False) is None


def test_a_program_that_raises_answers_as_the_engine_once_and_is_dropped(_quiet, monkeypatch):
    executor = Executor()
    body, length = _body()
    want = _warm(_quiet, executor, body, length)[1]
    layout = executor.layouts.last(body, length)
    program = layout.admitted["backward"][2]().programs[layout.key("backward")]
    runs, failures = dict(RUNS), dict(FAILURES)
    monkeypatch.setattr(program, "run", lambda *a: 1 / 0)
    monkeypatch.setattr(compile_module.log, "error", lambda *a, **k: None)
    where, (parts, answer_length, _, (plan, ran)) = _quiet.run(handler.repeat, executor, body, length, "backward", 1)
    assert ran == "engine" and (_bytes(parts), answer_length) == (_bytes(want[0]), want[1])
    assert RUNS["engine"] == runs.get("engine", 0) + 1 and sum(FAILURES.values()) == sum(failures.values()) + 1
    assert isinstance(layout.admitted["backward"][2]().programs[layout.key("backward")], Fallback)
    assert _quiet.run(handler.repeat, executor, body, length, "backward", True) is None  # the engine's from now on


def test_a_repeat_whose_answer_says_something_new_is_encoded_in_full(_quiet):
    executor = Executor()
    body, length = _body()
    _warm(_quiet, executor, body, length)
    layout = executor.layouts.last(body, length)
    layout.answered = (*layout.answered[:3], (((3, 2), np.dtype(np.float32)),) * 2, layout.answered[4])
    where, (parts, answer_length, _, _) = _quiet.run(handler.repeat, executor, body, length, "backward", True)
    assert (_bytes(parts), answer_length) == _quiet.run(_full, executor, body, length)
