"""Body size limits, API key, backpressure (503 + Retry-After) and the compute timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import orjson
import pytest
from service_testkit import (
    EXAMPLE,
    SETTINGS,
    asgi_client,
    assert_error,
    assert_still_serves,
    example,
)

from engine.registry import OPS
from service.app import create_app
from service.errors import STATUS
from service.routes import INLINE_BODY_BYTES
from service.settings import Settings
from wire.errors import GraphError
from wire.run import cancel_scope

LIMIT = SETTINGS["max_body_bytes"]


def _padded(size: int) -> bytes:
    """A valid JSON request of about `size` bytes (padding in an ignored-by-nobody id string)."""
    body = orjson.dumps(example(id=""))
    return body.replace(b'"id":""', b'"id":"' + b"a" * max(0, size - len(body)) + b'"')


def _raw_http(port: int, head: bytes, parts=(), pause: float = 0.0) -> bytes:
    """Send a raw request (head, then each part), return the whole response."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        try:
            for part in parts:
                if pause:
                    time.sleep(pause)
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking everything: that is the point
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _status_and_json(raw: bytes):
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head.decode("latin-1").lower(), orjson.loads(body)


# --------------------------------------------------------------------------- body size


def test_body_just_under_limit_is_fine(api):
    response = api.post("/forward", content=_padded(LIMIT - 10), headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text


def test_body_over_limit_by_content_length(api):
    response = api.post("/forward", content=_padded(LIMIT + 10), headers={"Content-Type": "application/json"})
    assert_error(response, 413, "max_body_bytes", field="body")
    assert_still_serves(api)


def test_content_length_over_limit_is_refused_before_the_body_is_sent(server, http):
    """Only the headers are sent: the 413 must come without waiting for a body."""
    head = (
        f"POST /forward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10 * LIMIT}\r\n\r\n"
    ).encode()
    status, headers, body = _status_and_json(_raw_http(server.port, head))
    assert status == 413 and "connection: close" in headers
    assert "declares" in body["error"] and body["field"] == "body"
    assert_still_serves(http)


def test_chunked_body_over_limit_stops_reading(server, http):
    head = b"POST /backward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    piece = b"x" * 16384
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    parts = [chunk] * (LIMIT // len(piece) + 1)  # just past the limit, and no more: nothing left unread
    status, headers, body = _status_and_json(_raw_http(server.port, head, parts))
    assert status == 413 and body["field"] == "body" and "is over" in body["error"]
    assert_still_serves(http)


def test_chunked_body_under_limit_works(server):
    payload = orjson.dumps(EXAMPLE)
    head = b"POST /backward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    parts = [
        f"{len(payload[i : i + 50]):x}\r\n".encode() + payload[i : i + 50] + b"\r\n" for i in range(0, len(payload), 50)
    ]
    status, _, body = _status_and_json(_raw_http(server.port, head, [*parts, b"0\r\n\r\n"]))
    assert status == 200 and body["grads"][0]["data"] == pytest.approx([10.0, 14.0, 18.0])


def test_streamed_body_reading_stops_at_the_limit_in_process():
    """Drive the ASGI app with a streamed body and count what it pulled: it stops past the limit."""
    app = create_app(Settings(**{**SETTINGS, "max_body_bytes": 1000}))
    pulled, sent = [], []

    async def run():
        async def receive():
            pulled.append(1)
            if len(pulled) > 100:  # bounded: a server that never stops reading fails the test
                return {"type": "http.disconnect"}
            return {"type": "http.request", "body": b"y" * 300, "more_body": True}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/forward",
            "raw_path": b"/forward",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)

    asyncio.run(run())
    assert sent[0]["status"] == 413
    assert len(pulled) == 4  # 4 x 300 bytes is the first read past 1000
    assert orjson.loads(sent[1]["body"])["field"] == "body"


# --------------------------------------------------------------------------- API key


def test_api_key():
    with asgi_client(api_key="s3cret-key") as client:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Basic s3cret-key"},
            {"Authorization": "s3cret-key"},
            {"Authorization": "Bearer s3cret-key-and-more"},
        ):
            for path in ("/forward", "/backward"):
                response = client.post(path, json=EXAMPLE, headers=headers)
                assert_error(response, 401, "API key", field="Authorization")
                assert response.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret-key"}
        response = client.post("/backward", json=EXAMPLE, headers=good)
        assert response.status_code == 200
        assert client.post("/forward", json=EXAMPLE, headers={"authorization": "bearer s3cret-key"}).status_code == 200
        for path in ("/healthz", "/readyz", "/info", "/ops", "/openapi.json"):  # open by design
            assert client.get(path).status_code == 200, path
        # /metrics names the registered models and tells the load: the key's, like the compute endpoints
        assert_error(client.get("/metrics"), 401, "API key", field="Authorization")
        assert client.get("/metrics", headers=good).status_code == 200
        assert client.get("/info").json()["auth"]["api_key_required"] is True
        spec = client.get("/openapi.json").json()
        assert spec["paths"]["/forward"]["post"]["security"] == [{"bearerAuth": []}]
        assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
        assert "s3cret" not in client.get("/info").text + client.get("/openapi.json").text


def test_api_key_checked_before_the_body_is_read():
    with asgi_client(api_key="k", max_body_bytes=100) as client:
        response = client.post("/forward", content=b"x" * 1000)
        assert_error(response, 401)


# --------------------------------------------------------------------------- backpressure and timeout


def _pooled(**changes) -> dict:
    """The example, padded past INLINE_BODY_BYTES so that it runs on a compute thread (a light
    small request runs on the event loop, where no slot, queue or timeout applies)."""
    return example(id="p" * (INLINE_BODY_BYTES + 1), **changes)


def test_light_and_short_requests_run_on_the_event_loop_and_heavy_ones_on_the_pool(monkeypatch):
    with asgi_client() as client:
        pool_threads = []
        original = client.app.state.executor.run
        monkeypatch.setattr(
            client.app.state.executor,
            "run",
            lambda request: pool_threads.append(threading.current_thread().name) or original(request),
        )
        # light; a big JSON body; short (a 200x200 intermediate), with the pool idle; heavy (11 of them: 4.4e5 values)
        for body in (EXAMPLE, _pooled(), _long_graph(1), _long_graph(10)):
            assert client.post("/forward", json=body).status_code == 200
        assert [name.startswith("gradserve-compute") for name in pool_threads] == [False, True, False, True]
        # the loop's share for short computations is spent: a short one waits for the pool, a light one does not
        client.app.state.pool.ran_inline(60.0)
        pool_threads.clear()
        for body in (_long_graph(1), EXAMPLE):
            assert client.post("/forward", json=body).status_code == 200
        assert [name.startswith("gradserve-compute") for name in pool_threads] == [True, False]


def test_short_requests_run_on_the_loop_for_at_most_its_share_of_the_time(monkeypatch):
    """Back-to-back short requests: each one that runs on the loop pushes the next one's turn
    back by as long as it ran (INLINE_SHARE = 0.5), so under a flood they alternate with the
    pool and the loop spends at most about half its time on them."""
    from service import compute

    clock = [1000.0]
    monkeypatch.setattr(compute.time, "monotonic", lambda: clock[0])
    pool = compute.ComputePool(2, 60.0)
    assert pool.may_run_inline()
    pool.ran_inline(0.25)
    assert not pool.may_run_inline()
    clock[0] += 0.125
    assert not pool.may_run_inline()
    clock[0] += 0.125
    assert pool.may_run_inline()
    pool.ran_inline(0.25)
    pool.ran_inline(0.25)  # two in a row: half a second of turns owed
    clock[0] += 0.375
    assert not pool.may_run_inline()
    clock[0] += 0.125
    assert pool.may_run_inline()
    pool._in_flight = 1  # a computation on the pool: nothing more on the loop
    assert not pool.may_run_inline()


class _Gate:
    """Replaces Executor.run (where every admitted request runs) with one that blocks the computations
    of the compute pool until opened (bounded wait)."""

    def __init__(self, executor):
        self.executor = executor
        self.original = executor.run
        self.entered = threading.Semaphore(0)
        self.opened = threading.Event()

    def __call__(self, ticket):
        if threading.current_thread().name.startswith("gradserve-compute"):
            self.entered.release()
            self.opened.wait(timeout=20)
        return self.original(ticket)


def test_busy_is_503_with_retry_after_but_never_for_inline_requests(monkeypatch):
    with asgi_client(max_concurrency=2, queue_timeout_s=0.2) as client:
        gate = _Gate(client.app.state.executor)
        monkeypatch.setattr(client.app.state.executor, "run", gate)
        results = []
        threads = [
            threading.Thread(target=lambda: results.append(client.post("/forward", json=_pooled()))) for _ in range(2)
        ]
        for t in threads:
            t.start()
        try:
            for _ in range(2):
                assert gate.entered.acquire(timeout=10)
            assert client.app.state.pool.in_flight == 2
            busy = client.post("/forward", json=_pooled())
            assert_error(busy, 503, "busy", "queue_timeout_s")
            assert busy.headers["retry-after"] == "1"
            busy = client.post("/backward", json=_pooled())
            assert_error(busy, 503, "busy")
            assert "gradserve_computations_rejected_total 2.0" in client.get("/metrics").text
            assert client.post("/forward", json=EXAMPLE).status_code == 200  # light: runs inline, needs no slot
            assert client.post("/backward", json=EXAMPLE).status_code == 200
            assert client.get("/healthz").status_code == 200  # the event loop is free meanwhile
        finally:
            gate.opened.set()
            for t in threads:
                t.join(timeout=20)
        assert [r.status_code for r in results] == [200, 200]
        assert client.app.state.pool.in_flight == 0
        assert_still_serves(client)


def test_compute_timeout_is_503_and_counts_in_flight_until_the_thread_ends(monkeypatch):
    with asgi_client(compute_timeout_s=0.2, max_concurrency=1, queue_timeout_s=0.1) as client:
        pool = client.app.state.pool
        gate = _Gate(client.app.state.executor)
        monkeypatch.setattr(client.app.state.executor, "run", gate)
        response = client.post("/forward", json=_pooled(parameters={"retain_graph": True}))
        assert_error(response, 503, "compute_timeout_s")
        assert response.headers["retry-after"] == "1"
        assert pool.in_flight == 1  # the abandoned thread still holds its slot...
        assert_error(client.post("/forward", json=_pooled()), 503, "busy")  # ...so backpressure stays honest
        gate.opened.set()
        deadline = time.monotonic() + 10
        while pool.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.in_flight == 0
        assert len(client.app.state.executor.tapes) == 0  # the abandoned forward's tape was dropped
        monkeypatch.setattr(client.app.state.executor, "run", gate.original)
        assert "gradserve_computations_timed_out_total 1.0" in client.get("/metrics").text
        assert_still_serves(client)


def _long_graph(n: int):
    nodes = [{"id": "x", "op": "input"}, {"id": "h0", "op": "expand", "inputs": ["x"], "attrs": {"shape": [200, 200]}}]
    for i in range(n):
        nodes.append({"id": f"h{i + 1}", "op": "tanh", "inputs": [f"h{i}"]})
    nodes.append({"id": "out", "op": "sum", "inputs": [f"h{n}"]})
    return {
        "graph": {"version": 1, "nodes": nodes, "outputs": ["out"]},
        "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP64", "data": [0.5]}],
    }


@pytest.mark.parametrize("compiled", [False, True], ids=["engine", "compiled"])
def test_compute_timeout_cancels_a_long_graph_between_steps(monkeypatch, compiled):
    """The real run paths (the engine's, and a compiled plan's): the cancel event stops the graph at its next node."""
    reached = []
    original = OPS["tanh"].forward

    def slow_tanh(*args, **attrs):
        reached.append(1)
        time.sleep(0.02)
        return original(*args, **attrs)

    monkeypatch.setattr(OPS["tanh"], "forward", slow_tanh)
    with asgi_client(compute_timeout_s=0.2, max_nodes=1000) as client:
        client.app.state.executor.compiled = compiled
        pool = client.app.state.pool
        assert_error(client.post("/forward", json=_long_graph(400)), 503, "compute_timeout_s")
        deadline = time.monotonic() + 10
        while pool.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.in_flight == 0
        assert len(reached) < 100  # 400 steps x 20 ms uncancelled; cancelled after ~10
        monkeypatch.setattr(OPS["tanh"], "forward", original)
        assert_still_serves(client)


def test_cancel_scope_stops_before_the_first_step():
    from wire.executor import Executor
    from wire.messages import decode_request

    executor = Executor()
    event = threading.Event()
    event.set()
    with cancel_scope(event), pytest.raises(GraphError) as err:
        executor.forward(decode_request(EXAMPLE, None, executor.limits))
    assert STATUS[err.value.kind] == 503
    executor.forward(decode_request(EXAMPLE, None, executor.limits))  # outside the scope: runs
