"""wire.handler and the request/result codec both ends use: a body's bytes in, the answer's out,
errors as wire errors with their kind (no HTTP)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from wire.errors import GraphError
from wire.executor import Executor
from wire.handler import handle, read_body, run_arrays
from wire.limits import Limits
from wire.messages import (
    Result,
    decode_request,
    decode_result,
    encode_request,
    encode_result,
)

X = np.arange(6, dtype=np.float32).reshape(2, 3)
GRAPH = {
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "s", "op": "sum", "inputs": ["x"]}],
    "outputs": ["s"],
}


@pytest.mark.parametrize("binary", [True, False])
def test_handle_answers_a_body_as_run_arrays_answers_its_arrays(binary):
    executor = Executor()
    body, length = encode_request({"graph": GRAPH}, [("x", X)], binary=binary)
    assert (length is not None) == binary
    parts, answer_length, tape = handle(executor, "/backward", body, length)
    assert (answer_length is not None) == binary and tape is None
    header, tail = read_body(b"".join(bytes(p) for p in parts), answer_length)
    result = decode_result(header, tail, 2**40)
    direct = run_arrays(executor, "/backward", {"graph": GRAPH}, [("x", X)])
    assert result.outputs["s"] == direct.outputs["s"] == X.sum()
    np.testing.assert_array_equal(result.grads["x"], np.ones_like(X))
    np.testing.assert_array_equal(direct.grads["x"], np.ones_like(X))


def test_run_arrays_hands_arrays_over_without_copies_and_read_only():
    x = X.copy()
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "r", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [3, 2]}},
        ],
        "outputs": ["x", "r"],
    }
    result = run_arrays(Executor(), "/forward", {"graph": graph}, [("x", x)])
    for name in ("x", "r"):
        assert np.shares_memory(result.outputs[name], x)
        assert not result.outputs[name].flags.writeable  # the caller's array can't be written through them
    assert x.flags.writeable
    with pytest.raises(GraphError) as err:  # still checked like a body's tensors
        run_arrays(Executor(), "/forward", {"graph": graph}, [("x", np.array(["a"]))])
    assert "no Open Inference Protocol datatype" in str(err.value)


def test_run_arrays_keeps_the_limits_a_body_meets():
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "y", "op": "input"},
            {"id": "s", "op": "add", "inputs": ["x", "y"]},
        ],
        "outputs": ["s"],
    }
    small = Executor(Limits(max_tensor_elements=5))
    with pytest.raises(GraphError) as err:
        run_arrays(small, "/forward", {"graph": graph}, [("x", X), ("y", X)])
    assert (err.value.kind, err.value.field) == ("too_large", "inputs[0].shape")
    few = Executor(Limits(max_total_elements=10))
    with pytest.raises(GraphError) as err:
        run_arrays(few, "/forward", {"graph": graph}, [("x", X), ("y", X)])
    assert err.value.kind == "too_large" and "12 elements" in str(err.value)
    with pytest.raises(GraphError) as err:
        run_arrays(Executor(), "/forward", {"graph": graph}, [("x", X), ("x", X)])
    assert "given twice" in str(err.value)


def test_handle_raises_wire_errors_with_their_kind():
    executor = Executor()
    with pytest.raises(GraphError) as err:
        handle(executor, "/forward", b"{not json", None)
    assert (err.value.kind, err.value.field) == ("malformed", "body")
    with pytest.raises(GraphError) as err:
        handle(executor, "/forward", b'{"graph": {}}', 99)
    assert err.value.kind == "malformed" and "99" in str(err.value)
    bad = {"graph": {**GRAPH, "nodes": [GRAPH["nodes"][0], {"id": "s", "op": "frobnicate", "inputs": ["x"]}]}}
    with pytest.raises(GraphError) as err:
        handle(executor, "/forward", orjson.dumps({**bad, "inputs": []}), None)
    assert (err.value.kind, err.value.node) == ("invalid", "s")


def test_requests_and_results_round_trip():
    grads = np.ones((2, 2), np.float64)
    body, length = encode_request({"graph": GRAPH, "wrt": ["x"]}, [("x", X)], [("s", grads)], binary=True)
    header, tail = read_body(body, length)
    assert header["parameters"] == {"binary_data_output": True}
    request = decode_request(header, tail, Limits())
    assert request.binary_output and request.wrt == ["x"]
    np.testing.assert_array_equal(request.inputs["x"], X)
    np.testing.assert_array_equal(request.grad_outputs["s"], grads)
    for binary in (True, False):
        answer, length = encode_result(Result(7, {"s": X}, {"x": grads}, tape="t1"), binary)
        result = decode_result(*read_body(answer, length), 2**40)
        assert (result.id, result.tape) == (7, "t1")
        np.testing.assert_array_equal(result.outputs["s"], X)
        assert result.grads["x"].dtype == np.float64


LOG = {
    "version": 1,
    "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "y", "op": "log", "inputs": ["x"]}],
    "outputs": ["y"],
}


def _log_of_zero(executor):
    """A backward of log(0): -inf and inf, answers and never warnings, and grads whatever grad mode says."""
    from engine.api import no_grad

    zero = np.zeros(2, np.float32)
    with no_grad():
        result = run_arrays(executor, "/backward", {"graph": LOG}, [("x", zero)], [("y", np.ones(2, np.float32))])
    assert list(result.outputs["y"]) == [-np.inf] * 2 and list(result.grads["x"]) == [np.inf] * 2
    return np.geterr()


def test_a_quiet_context_runs_requests_without_errstate_and_another_still_gets_one():
    import contextvars
    import warnings

    from wire import handler

    executor = Executor()
    quiet = contextvars.copy_context()
    quiet.run(handler.quiet_ieee)  # what a server's worker and compute threads do before they serve
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):  # outside the quiet context: each request sets its own
            assert _log_of_zero(executor)["divide"] == "raise"
        assert quiet.run(handler.IEEE_QUIET.get) and not handler.IEEE_QUIET.get()
        assert set(quiet.run(_log_of_zero, executor).values()) == {"ignore"}
