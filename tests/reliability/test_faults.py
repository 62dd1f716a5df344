"""Backpressure, timeouts and faults: the server answers 4xx/503/507 and keeps serving.

Slow requests are chains of 512x512 matmul + tanh (about 15-20 ms a link on one core), sent
binary so encoding them costs nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest

from engine import backend
from engine.registry import OPS

from .conftest import (
    HEADER_LENGTH,
    assert_error,
    binary_body,
    decode_response,
    json_tensor,
    matmul_chain,
    record_figure,
    simple_request,
)
from .edge_kit import slow_for

FAULTS = []


def _slow(links, n=512):
    x = (np.random.default_rng(0).standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    return binary_body({"graph": matmul_chain(n, links)}, {"x": x})


# A request sized on this machine to run for seconds is over the default work and element budgets.
LIFTED = {"max_request_work": 10**14, "max_total_elements": 10**11}


def _metric(url, name) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name} missing")


def _wait_in_flight(url, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _metric(url, "gradserve_computations_in_flight") >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"never saw {count} computation(s) in flight")


def _assert_serving(url):
    response = httpx.post(url + "/forward", json=simple_request(), timeout=30)
    assert decode_response(response)["outputs"]["s"] == pytest.approx(6.0)


def test_busy_server_answers_503_with_retry_after(server_factory):
    server = server_factory(max_concurrency=1, queue_timeout_s=0.3, **LIFTED, log_level="warning")
    body, headers = slow_for(5)  # 5 s or more of BLAS on this machine
    results = {}

    def slow():
        results["slow"] = httpx.post(server.url + "/forward", content=body, headers=headers, timeout=60)

    thread = threading.Thread(target=slow, daemon=True)
    thread.start()
    _wait_in_flight(server.url, 1)
    pooled_body, pooled_headers = _slow(1)
    busy = httpx.post(server.url + "/forward", content=pooled_body, headers=pooled_headers, timeout=30)
    assert_error(busy, {503})
    assert busy.headers.get("Retry-After", "").isdigit()
    _assert_serving(server.url)  # a light request runs inline: never refused as busy
    thread.join(60)
    assert not thread.is_alive()
    assert results["slow"].status_code == 200, results["slow"].text[:300]
    _assert_serving(server.url)
    FAULTS.append("busy: 503 + Retry-After with max_concurrency=1")
    record_figure("faults_busy", True)


def test_compute_timeout_answers_503_and_keeps_serving(make_client):
    client = make_client(compute_timeout_s=0.2, **LIFTED)
    body, headers = slow_for(3)  # far past the timeout on this machine
    t0 = time.monotonic()
    response = client.post("/forward", content=body, headers=headers)
    elapsed = time.monotonic() - t0
    assert_error(response, {503, 504})
    assert elapsed < 2.0, f"the timeout answer took {elapsed:.2f} s"
    deadline = time.monotonic() + 10
    while True:  # the cancelled computation may hold its slot until its current op ends
        response = client.post("/forward", json=simple_request())
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert response.status_code == 200, response.text[:300]
    FAULTS.append("compute timeout: 503")


def test_client_disconnect_mid_body(server_factory):
    server = server_factory(log_level="warning")
    payload = json.dumps(simple_request()).encode() + b" " * 20000
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(
                b"POST /forward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload[: len(payload) // 2]
            )
    # a binary request that stops mid-tensor
    body, headers = _slow(1, n=256)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            f"POST /backward HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 3]
        )
    time.sleep(0.2)
    _assert_serving(server.url)
    assert server.proc.poll() is None
    assert _metric(server.url, "gradserve_computations_in_flight") == 0
    FAULTS.append("client disconnects mid-body (6 connections)")


def test_truncated_binary_and_lying_header_length(client):
    x = np.arange(6, dtype=np.float32)
    header = {
        "graph": {
            "version": 1,
            "nodes": [{"id": "x", "op": "input"}, {"id": "s", "op": "sum", "inputs": ["x"]}],
            "outputs": ["s"],
        }
    }
    body, headers = binary_body(header, {"x": x})
    assert client.post("/forward", content=body, headers=headers).status_code == 200
    assert_error(client.post("/forward", content=body[:-3], headers=headers), {400})
    assert_error(client.post("/forward", content=body + b"\0\0\0\0", headers=headers), {400})
    for lie in (str(len(body) + 1), str(10**30), "-5", "abc", "", "0x10", "1e3"):
        assert_error(client.post("/forward", content=body, headers={**headers, HEADER_LENGTH: lie}), {400, 422})
    short = int(headers[HEADER_LENGTH]) - 5  # a header cut inside the JSON
    assert_error(client.post("/forward", content=body, headers={**headers, HEADER_LENGTH: str(short)}), {400})
    assert client.post("/forward", json=simple_request()).status_code == 200
    FAULTS.append("truncated binary / lying Inference-Header-Content-Length")


def test_memory_error_is_507_and_the_server_keeps_serving(client, monkeypatch):
    """GPU OOM can't be provoked without a GPU: an op raising MemoryError stands in for it."""

    def oom(xp, *arrays, **attrs):
        raise MemoryError("simulated out of memory")

    monkeypatch.setattr(OPS["exp"], "forward", oom)
    graph = {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}, {"id": "e", "op": "exp", "inputs": ["x"]}],
        "outputs": ["e"],
    }
    response = client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", np.ones(3, np.float32))]})
    assert_error_507 = response.status_code == 507
    assert assert_error_507, response.text[:300]
    body = response.json()
    assert body["error"] and "Traceback" not in response.text
    monkeypatch.undo()
    assert client.post("/forward", json=simple_request()).status_code == 200
    response = client.post("/forward", json={"graph": graph, "inputs": [json_tensor("x", np.ones(3, np.float32))]})
    np.testing.assert_allclose(decode_response(response)["outputs"]["e"], np.exp(np.ones(3, np.float32)))
    FAULTS.append("MemoryError in an op: 507")


def test_sigterm_lets_in_flight_requests_finish_and_exits_0(server_factory):
    server = server_factory(max_concurrency=2, **LIFTED, log_level="warning")
    body, headers = slow_for(0.3)  # long enough to be seen in flight on this machine, well inside the drain
    results = []

    def slow():
        try:
            results.append(httpx.post(server.url + "/forward", content=body, headers=headers, timeout=60).status_code)
        except httpx.HTTPError as err:
            results.append(repr(err))

    threads = [threading.Thread(target=slow, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    _wait_in_flight(server.url, 2)
    t0 = time.monotonic()
    code = server.stop(timeout=30)
    for t in threads:
        t.join(30)
    assert results == [200, 200], results
    assert code == 0, server.output()[-2000:]
    assert "Traceback" not in server.output()
    record_figure("sigterm_exit_s", round(time.monotonic() - t0, 2))
    FAULTS.append("SIGTERM with 2 requests in flight: both 200, exit 0")


def test_app_serves_after_a_second_lifespan(make_app):
    """The app object outlives one lifespan: test clients (and schemathesis' pytest plugin, after
    every test) run startup/shutdown more than once on the same app; compute must still work."""
    from fastapi.testclient import TestClient

    app = make_app()
    for _ in range(2):
        with TestClient(app, raise_server_exceptions=False) as client:
            response = client.post("/forward", json=simple_request())
            assert response.status_code == 200, response.text[:300]


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU: CuPy is not installed or sees no CUDA device")
def test_gpu_out_of_memory_is_507_and_the_server_keeps_serving(client):
    """A real CuPy OutOfMemoryError: the device memory pool is capped 24 MiB above what it holds, and a
    request whose inputs are 16 KiB makes three 16 MiB intermediates (an outer product, its exp, their product).
    Each try (the first request, and repeats that may run a compiled plan) is a 507 naming the node;
    the server then serves, and the pool is back where it was."""
    import cupy

    pool = cupy.get_default_memory_pool()
    backend.use("cuda")
    try:
        pool.free_all_blocks()
        before = pool.used_bytes()
        pool.set_limit(size=before + 24 * 2**20)
        graph = {
            "version": 1,
            "nodes": [
                {"id": "a", "op": "input"},
                {"id": "b", "op": "input"},
                {"id": "outer", "op": "mm", "inputs": ["a", "b"]},
                {"id": "big", "op": "exp", "inputs": ["outer"]},
                {"id": "prod", "op": "mul", "inputs": ["big", "outer"]},
                {"id": "s", "op": "sum", "inputs": ["prod"]},
            ],
            "outputs": ["s"],
        }
        a, b = np.ones((2048, 1), np.float32), np.full((1, 2048), 1e-3, np.float32)
        request = {"graph": graph, "inputs": [json_tensor("a", a), json_tensor("b", b)]}
        for _ in range(3):
            response = client.post("/forward", json=request)
            assert response.status_code == 507, response.text[:300]
            assert response.json()["node"] in ("outer", "big", "prod") and "memory" in response.json()["error"]
        assert client.post("/forward", json=simple_request()).status_code == 200
        assert pool.used_bytes() <= before + 2**20
        pool.set_limit(size=0)  # no limit: the same request computes
        response = client.post("/forward", json=request)
        assert response.status_code == 200, response.text[:300]
        np.testing.assert_allclose(
            decode_response(response)["outputs"]["s"], 2048 * 2048 * 1e-3 * np.exp(1e-3), rtol=1e-4
        )
    finally:
        pool.set_limit(size=0)
        backend.use("cpu")
    FAULTS.append("device out of memory (CuPy): 507")


def teardown_module():
    if FAULTS:
        record_figure("faults_survived", FAULTS)
