"""Code generation runs off the request path (issue 21, item 1): a request whose program is ~15,000
terms answers at once, its program is generated on the background thread in parts (the GIL free
between them) while /healthz keeps answering, and later requests run the generated code."""

from __future__ import annotations

import time

import httpx
import numpy as np

from tests.reliability.conftest import json_tensor
from tests.reliability.edge_kit import HealthProbe


def sin_chain(n: int) -> dict:
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    for i in range(n):
        nodes.append({"id": f"n{i}", "op": "sin", "inputs": [nodes[-1]["id"]]})
    nodes.append({"id": "s", "op": "sum", "inputs": [nodes[-1]["id"]]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


def runs(server, executor: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=30).text
    prefix = f'gradserve_plan_runs_total{{executor="{executor}"}} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix)).split()[1])


def test_healthz_answers_while_a_big_program_is_generated(server_factory):
    server = server_factory()
    body = {"graph": sin_chain(1500), "inputs": [json_tensor("x", np.linspace(0, 1, 4))]}

    def backward():
        response = httpx.post(server.url + "/backward", json=body, timeout=120)
        assert response.status_code == 200, response.text[:300]
        return response.json()["grads"][0]["data"]

    first = backward()  # the engine's run, recorded (~15,000 terms)
    with HealthProbe(server.url) as probe:
        start = time.perf_counter()
        assert backward() == first  # checked against the engine; its generation is queued
        answered = time.perf_counter() - start
        deadline = time.monotonic() + 60
        while runs(server, "compiled") == 0 and time.monotonic() < deadline:
            assert backward() == first  # interpreted until the generated code is ready
            time.sleep(0.05)
    assert runs(server, "compiled") >= 1, "the generated program never ran"
    assert answered < 10
    assert not probe.failures and max(probe.latencies) < 1.0, max(probe.latencies)
