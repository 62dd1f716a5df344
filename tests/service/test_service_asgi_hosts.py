"""The app under another ASGI host than uvicorn (hypercorn): JSON and binary round trips and
errors. Hypercorn 0.18 happens to tolerate memoryview body parts too, so the ASGI spec's `bytes`
rule is checked directly, by driving the app with a recording `send`."""

from __future__ import annotations

import asyncio
import sys

import httpx
import numpy as np
import pytest
from service_testkit import (
    EXAMPLE,
    SETTINGS,
    assert_error,
    binary_body,
    binary_tensor,
    decode_response,
    running_server,
)

from service.app import create_app
from service.settings import Settings

HYPERCORN = [
    "sh",
    "-c",
    f'exec {sys.executable} -m hypercorn --bind "127.0.0.1:$GRADSERVE_PORT" "service.app:create_app()"',
]


@pytest.fixture(scope="module")
def hypercorn(tmp_path_factory):
    log = tmp_path_factory.mktemp("hypercorn") / "server.log"
    with (
        running_server(log, command=HYPERCORN) as server,
        httpx.Client(base_url=server.base_url, timeout=30.0) as client,
    ):
        yield client


def test_json_backward_round_trip_under_hypercorn(hypercorn):
    response = hypercorn.post("/backward", json=EXAMPLE)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = decode_response(response)
    np.testing.assert_allclose(answer["grads"]["w"].ravel(), [10.0, 14.0, 18.0], rtol=1e-6)
    assert answer["outputs"]["loss"] == pytest.approx(9.2, rel=1e-6)


def test_binary_backward_round_trip_under_hypercorn(hypercorn):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    buffers = []
    header = {
        "graph": EXAMPLE["graph"],
        "inputs": [binary_tensor("x", x, buffers), binary_tensor("w", w, buffers)],
        "parameters": {"binary_data_output": True},
    }
    body, headers = binary_body(header, buffers)
    response = hypercorn.post("/backward", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    answer = decode_response(response)
    expected = x.T @ (2.0 * (x @ w > 0)).astype(np.float32)
    np.testing.assert_allclose(answer["grads"]["w"], expected, rtol=1e-5, atol=1e-5)
    assert answer["outputs"]["loss"] == pytest.approx(2.0 * np.maximum(x @ w, 0).sum(), rel=1e-4)


def test_errors_and_health_under_hypercorn(hypercorn):
    assert_error(
        hypercorn.post("/forward", content=b"{}", headers={"Content-Type": "text/plain"}), 415, field="Content-Type"
    )
    assert_error(
        hypercorn.post("/forward", content=b"{oops", headers={"Content-Type": "application/json"}), 400, field="body"
    )
    assert hypercorn.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize("binary_output", [False, True])
def test_every_body_part_the_app_sends_is_bytes(binary_output):
    """The ASGI spec: `http.response.body` carries `bytes` (not a memoryview or a bytearray)."""
    rng = np.random.default_rng(1)
    buffers = []
    header = {
        "graph": EXAMPLE["graph"],
        "parameters": {"binary_data_output": binary_output},
        "inputs": [
            binary_tensor("x", rng.standard_normal((100, 60)), buffers),
            binary_tensor("w", rng.standard_normal((60, 40)), buffers),
        ],
    }
    body, headers = binary_body(header, buffers)
    sent = []

    async def run():
        app = create_app(Settings(**SETTINGS))
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():  # after the body, a connected client sends nothing more: receive waits
            if messages:
                return messages.pop()
            await asyncio.Event().wait()

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/backward",
            "raw_path": b"/backward",
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
            + [(b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)
        app.state.pool.shutdown()

    asyncio.run(run())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200, sent
    parts = [m["body"] for m in sent[1:] if m["type"] == "http.response.body"]
    assert parts and all(type(part) is bytes for part in parts), [type(p) for p in parts]
    length = dict(sent[0]["headers"])[b"content-length"]
    assert int(length) == sum(map(len, parts)) > (60 * 40 * 8 if binary_output else 0)
