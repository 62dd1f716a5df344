"""Retained tapes: retain, reuse without recompute, free, 409 / 404, expiry, eviction."""

from __future__ import annotations

import time

import numpy as np
import pytest
from service_testkit import (
    EXAMPLE,
    asgi_client,
    assert_error,
    assert_still_serves,
    decode_response,
    example,
)

from wire import run as wire_run
from wire.program import Program


def _retain(client, path="/forward", **changes):
    response = client.post(path, json=example(parameters={"retain_graph": True}, **changes))
    assert response.status_code == 200, response.text
    tape = response.json()["tape"]
    assert isinstance(tape, str) and tape
    return tape


def test_forward_retain_then_backward_by_tape_then_409(api):
    tape = _retain(api)
    response = api.post("/backward", json={"tape": tape, "id": "b1"})
    assert response.status_code == 200, response.text
    result = decode_response(response)
    assert result["id"] == "b1" and "tape" not in result
    np.testing.assert_allclose(result["grads"]["w"].ravel(), [10.0, 14.0, 18.0], rtol=1e-6)
    np.testing.assert_allclose(result["outputs"]["loss"], 9.2, rtol=1e-6)
    assert_error(api.post("/backward", json={"tape": tape}), 409, "second time", field="tape")
    assert_still_serves(api)


def test_backward_retain_keeps_the_tape_for_more_backwards(api):
    tape = _retain(api, "/backward")
    for _ in range(2):
        response = api.post("/backward", json={"tape": tape, "parameters": {"retain_graph": True}})
        assert response.status_code == 200, response.text
        assert response.json()["tape"] == tape
    seed = {"name": "loss", "shape": [], "datatype": "FP32", "data": [0.5]}
    response = api.post("/backward", json={"tape": tape, "grad_outputs": [seed]})
    assert response.status_code == 200
    np.testing.assert_allclose(decode_response(response)["grads"]["w"].ravel(), [5.0, 7.0, 9.0], rtol=1e-6)
    assert_error(api.post("/backward", json={"tape": tape}), 409)


def test_unknown_tape_is_404(api):
    assert_error(api.post("/backward", json={"tape": "0" * 32}), 404, "unknown or expired tape", field="tape")
    assert_still_serves(api)


def test_tape_with_graph_is_rejected(api):
    tape = _retain(api)
    assert_error(api.post("/backward", json={"tape": tape, "graph": EXAMPLE["graph"]}), 422, "takes no graph")
    assert api.post("/backward", json={"tape": tape}).status_code == 200  # the tape survived the bad request


def test_backward_by_tape_does_not_recompute(monkeypatch):
    with asgi_client() as client:
        tape = _retain(client)
        runs = []
        original, compiled = wire_run.run_steps, Program.run
        monkeypatch.setattr(wire_run, "run_steps", lambda *a, **k: runs.append(1) or original(*a, **k))
        monkeypatch.setattr(Program, "run", lambda *a, **k: runs.append(1) or compiled(*a, **k))
        plans = client.app.state.executor.plans
        before = (plans.hits, plans.misses)
        response = client.post("/backward", json={"tape": tape})
        assert response.status_code == 200, response.text
        assert runs == [] and (plans.hits, plans.misses) == before  # no graph run, no plan looked up
        client.post("/forward", json=EXAMPLE)
        assert runs  # the spy does see an ordinary forward


def test_tape_expires_after_ttl():
    with asgi_client(tape_ttl_s=0.2) as client:
        tape = _retain(client)
        store = client.app.state.executor.tapes
        assert len(store) == 1
        deadline = time.monotonic() + 5
        while len(store) and time.monotonic() < deadline:  # the sweeper drops it without any request
            time.sleep(0.05)
        assert len(store) == 0
        assert_error(client.post("/backward", json={"tape": tape}), 404, "expired")
        assert_still_serves(client)


def test_tapes_evicted_by_count():
    with asgi_client(max_tapes=2) as client:
        tapes = [_retain(client) for _ in range(3)]
        assert len(client.app.state.executor.tapes) == 2
        assert_error(client.post("/backward", json={"tape": tapes[0]}), 404)
        for tape in tapes[1:]:
            assert client.post("/backward", json={"tape": tape}).status_code == 200


def test_tapes_evicted_by_bytes_and_too_big_is_413():
    with asgi_client() as probe:
        _retain(probe)
        one = probe.app.state.executor.tapes.nbytes  # a tape and its plan
        _retain(probe)
        two = probe.app.state.executor.tapes.nbytes  # two tapes, their one plan counted once
    assert one < two < 2 * one
    with asgi_client(max_tape_bytes=two - 1) as client:
        first, second = _retain(client), _retain(client)
        assert client.app.state.executor.tapes.nbytes == one
        assert_error(client.post("/backward", json={"tape": first}), 404)
        assert client.post("/backward", json={"tape": second}).status_code == 200
    with asgi_client(max_tape_bytes=one - 1) as client:
        response = client.post("/forward", json=example(parameters={"retain_graph": True}))
        assert_error(response, 413, "tape limit", field="parameters.retain_graph")
        assert_still_serves(client)


@pytest.mark.parametrize("path", ["/forward", "/backward"])
def test_metrics_show_live_tapes(path):
    with asgi_client() as client:
        _retain(client, path)
        text = client.get("/metrics").text
        assert "gradserve_tapes 1.0" in text
        tape_bytes = [line for line in text.splitlines() if line.startswith("gradserve_tape_bytes ")]
        assert float(tape_bytes[0].split()[1]) > 0
