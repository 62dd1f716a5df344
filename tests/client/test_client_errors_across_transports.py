"""A refusal reaches the program as the same exception, with the server's own message, whichever transport
carries it: `http.client` (a plain http:// URL), httpx (an injected transport), AsyncSession, and the embedded
executor where the limit applies. The server answers these before reading the body (a 16 MiB tensor over a
1 MiB limit, a wrong API key, a wrong Content-Type, a full body budget) and closes the connection, which resets
the client's upload: the answer must still be read, the body sent once (no retry of a 4xx), quickly (no
backoff), and the session must go on working."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from client_testkit import ROOT, free_port

import client
from client import transports
from client.transports import Call
from wire.codec import HEADER_LENGTH
from wire.executor import Executor
from wire.limits import Limits

LIMIT = 2**20  # max_body_bytes
JSON_LIMIT = 2**19  # max_json_body_bytes
BUDGET = 3 * 2**19  # max_inflight_body_bytes: one body at the limit, and half of another
KEY = "s3cret"
BIG = np.zeros(4 * 2**20, np.float32)  # 16 MiB as binary data (and as JSON)
SMALL = np.arange(6, dtype=np.float32).reshape(2, 3)
SUM = {
    "graph": {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}, {"id": "s", "op": "sum", "inputs": ["x"]}],
        "outputs": ["s"],
    }
}
KINDS = ["plain", "httpx", "async", "embedded"]
REMOTE = ["plain", "httpx", "async"]
SLOW_RETRIES = {"retries": 3, "backoff": 1.0}  # a retry would cost a second


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """`python -m service` with small body limits, a body budget and an API key."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env.update(
        PYTHONPATH=str(ROOT),
        GRADSERVE_HOST="127.0.0.1",
        GRADSERVE_PORT=str(port),
        GRADSERVE_DEVICE="cpu",
        GRADSERVE_LOG_LEVEL="warning",
        GRADSERVE_API_KEY=KEY,
        GRADSERVE_MAX_BODY_BYTES=str(LIMIT),
        GRADSERVE_MAX_JSON_BODY_BYTES=str(JSON_LIMIT),
        GRADSERVE_MAX_INFLIGHT_BODY_BYTES=str(BUDGET),
        GRADSERVE_MAX_PEER_INFLIGHT_BODY_BYTES=str(BUDGET),  # one client here: the whole budget is its share
    )
    log = tmp_path_factory.mktemp("limited") / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=sink, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not come up in 30 s:\n{log.read_text()[-4000:]}")
            time.sleep(0.05)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def answered(url: str, status: int) -> float:
    """The server's count of POST /forward answered with `status` (gradserve_requests_total)."""
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert response.status_code == 200, response.text  # /metrics needs the key when one is set
    text = response.text
    pattern = r'^gradserve_requests_total\{(?=[^}]*endpoint="/forward")(?=[^}]*method="POST")(?=[^}]*status="%d")[^}]*\}\s+(\S+)$'
    match = re.search(pattern % status, text, re.M)
    return float(match.group(1)) if match else 0.0


class Driver:
    """One session of a kind, its operations called synchronously (an AsyncSession's on its own event loop)."""

    def __init__(self, kind: str, url: str | None, **options):
        self.kind, self.loop = kind, None
        if kind == "embedded":
            limits = Limits(max_body_bytes=LIMIT, max_json_body_bytes=JSON_LIMIT)
            self.session = client.Session(None, executor=Executor(limits), **options)
        elif kind == "async":
            self.loop = asyncio.new_event_loop()
            self.session = client.AsyncSession(url, **options)
        elif kind == "httpx":
            self.session = client.Session(url, transport=httpx.HTTPTransport(), **options)
        else:
            self.session = client.Session(url, **options)
        expected = {
            "plain": transports.PlainHttpTransport,
            "httpx": transports.HttpTransport,
            "async": transports.AsyncHttpTransport,
            "embedded": transports.EmbeddedTransport,
        }[kind]
        assert type(self.session._transport) is expected

    def __getattr__(self, name):
        method = getattr(self.session, name)

        def call(*args, **kwargs):
            result = method(*args, **kwargs)
            return self.loop.run_until_complete(result) if self.loop else result

        return call

    def sent(self) -> int:
        return self.session.stats["/forward"]

    def close(self):
        if self.loop:
            self.loop.run_until_complete(self.session.aclose())
            self.loop.close()
        else:
            self.session.close()


@pytest.fixture
def no_proxy(monkeypatch):
    """No proxy from the environment: a plain http:// URL goes over http.client."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def driver(limited, no_proxy):
    """`driver(kind, **options)`: a Driver against the limited server (embedded: its own limits), closed after."""
    made = []

    def make(kind, **options):
        made.append(Driver(kind, None if kind == "embedded" else limited, **options))
        return made[-1]

    yield make
    for d in made:
        d.close()


def refused(d: Driver, exc_type, *args, **kwargs):
    """The exception `exc_type` that `d.send(*args)` raises, and the seconds it took."""
    start = time.perf_counter()
    with pytest.raises(exc_type) as err:
        d.send(*args, **kwargs)
    return err.value, time.perf_counter() - start


def still_works(d: Driver):
    reply = d.send("/forward", SUM, inputs={"x": SMALL})
    assert reply.outputs["s"] == pytest.approx(SMALL.sum())


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_body_over_the_limit_is_refused_once_with_the_servers_reason(kind, binary, driver, limited):
    d = driver(kind, api_key=KEY, binary=binary, **SLOW_RETRIES)
    start = time.perf_counter()
    body, _ = transports.encode(Call("/forward", SUM, [("x", BIG)]), binary)
    encoding = time.perf_counter() - start  # a JSON body of 16 MiB takes a while to write
    limit, name = (LIMIT, "max_body_bytes") if binary else (JSON_LIMIT, "max_json_body_bytes")
    before = answered(limited, 413)
    error, seconds = refused(d, client.PayloadTooLargeError, "/forward", SUM, inputs={"x": BIG})
    assert f"the request body declares {len(body)} bytes, over the limit of {limit} bytes ({name})" in str(error)
    assert (error.status, error.field) == (413, "body") and isinstance(error, ValueError)
    assert d.sent() == 1 and seconds < encoding + 1.0  # not resent: a 4xx is the answer, not a failure to retry
    if kind != "embedded":
        assert answered(limited, 413) - before == 1
    still_works(d)


@pytest.mark.parametrize("kind", REMOTE)
def test_a_body_past_what_the_server_drains_still_gets_its_answer(kind, driver, limited):
    """72 MiB over a 1 MiB limit: more than the app drains (64 MiB), so the server closes at once, and an
    asyncio client used to lose the 413 its reset connection had received (ConnectionFailed after 4 sends).
    The connection lingers instead (a half-close, the rest of the upload dropped unparsed)."""
    huge = np.zeros(18 * 2**20, np.float32)
    d = driver(kind, api_key=KEY, binary=True, **SLOW_RETRIES)
    before = answered(limited, 413)
    error, seconds = refused(d, client.PayloadTooLargeError, "/forward", SUM, inputs={"x": huge})
    assert "over the limit of 1048576 bytes (max_body_bytes)" in str(error)
    assert d.sent() == 1 and answered(limited, 413) - before == 1
    still_works(d)


@pytest.mark.parametrize("kind", REMOTE)
def test_a_wrong_api_key_is_refused_before_the_body_once(kind, driver, limited):
    before = answered(limited, 401)
    for key, reason in (("wrong", "wrong API key"), ("", "missing API key")):
        d = driver(kind, api_key=key, **SLOW_RETRIES)
        error, seconds = refused(d, client.AuthenticationError, "/forward", SUM, inputs={"x": BIG})
        assert reason in str(error) and (error.status, error.field) == (401, "Authorization")
        assert d.sent() == 1 and seconds < 1.0
        assert d.get("/healthz").json() == {"status": "ok"}  # the session goes on (a fresh connection)
        error, _ = refused(d, client.AuthenticationError, "/forward", SUM, inputs={"x": SMALL})
        assert reason in str(error)
    assert answered(limited, 401) - before == 4
    still_works(driver(kind, api_key=KEY))


@pytest.mark.parametrize("kind", REMOTE)
def test_a_wrong_content_type_is_refused_before_the_body(kind, driver, limited):
    d = driver(kind, api_key=KEY, **SLOW_RETRIES)
    before = answered(limited, 415)
    start = time.perf_counter()
    response = d.post("/forward", BIG.tobytes(), headers={"Content-Type": "text/plain"})
    seconds = time.perf_counter() - start
    with pytest.raises(client.UnsupportedMediaTypeError, match="Content-Type must be application/json") as err:
        transports.raise_for_error(response, limited)
    assert (err.value.status, err.value.field) == (415, "Content-Type") and isinstance(err.value, ValueError)
    assert d.sent() == 1 and seconds < 1.0 and answered(limited, 415) - before == 1
    still_works(d)


class BodyHolder:
    """A raw connection that sends all but the last byte of a body at the limit: the server holds its bytes in
    the body budget (counted as they arrive) until the connection closes."""

    def __init__(self, url: str):
        port = int(url.rsplit(":", 1)[1])
        self.sock = socket.create_connection(("127.0.0.1", port))
        head = (
            f"POST /forward HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/octet-stream\r\n{HEADER_LENGTH}: 100\r\nContent-Length: {LIMIT}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + b"\0" * (LIMIT - 1))

    def close(self):
        self.sock.close()


HALF = np.zeros(2**17, np.float32)  # 512 KiB: under the limit, over what the budget has left beside a held body


def busy_server(url: str) -> BodyHolder:
    """A held body, once the server has taken it (a request of HALF's size is answered 503)."""
    holder = BodyHolder(url)
    probe = transports.encode(Call("/forward", SUM, [("x", HALF)]), True)
    deadline = time.monotonic() + 10
    while (
        httpx.post(
            f"{url}/forward", content=probe[0], headers={**probe[1], "Authorization": f"Bearer {KEY}"}
        ).status_code
        != 503
    ):
        assert time.monotonic() < deadline, "the held body never filled the budget"
        time.sleep(0.02)
    return holder


@pytest.mark.parametrize("kind", REMOTE)
def test_a_full_body_budget_answers_503_which_is_retried_after_retry_after(kind, driver, limited):
    holder = busy_server(limited)
    try:
        before = answered(limited, 503)
        d = driver(kind, api_key=KEY, retries=2, backoff=5.0, max_retry_after=0.05)  # Retry-After: 1, capped
        error, seconds = refused(d, client.ServiceUnavailableError, "/forward", SUM, inputs={"x": HALF})
        assert "too many request bodies at once" in str(error) and (error.status, error.field) == (503, "body")
        assert d.sent() == 3 and seconds < 1.0  # the first try and 2 retries, after Retry-After (not the backoff)
        assert answered(limited, 503) - before == 3
        once = driver(kind, api_key=KEY, retries=0)
        refused(once, client.ServiceUnavailableError, "/forward", SUM, inputs={"x": HALF})
        assert once.sent() == 1
    finally:
        holder.close()
    d = driver(kind, api_key=KEY, retries=5, max_retry_after=0.2)
    reply = d.send("/forward", SUM, inputs={"x": HALF})  # the budget is free again (at once, or after a retry)
    assert reply.outputs["s"] == 0.0


def test_408_and_415_have_their_own_exceptions():
    for status, cls, base in (
        (408, client.UploadTimeoutError, TimeoutError),
        (415, client.UnsupportedMediaTypeError, ValueError),
    ):
        answer = transports.Response(status, {}, b'{"error": "as the server said", "node": null, "field": "body"}')
        with pytest.raises(cls, match="as the server said") as err:
            transports.raise_for_error(answer, "http://gradserve.invalid/forward")
        assert isinstance(err.value, base) and isinstance(err.value, client.RequestError) and err.value.field == "body"


class AnswerFirstServer:
    """Answers each request with `reply` as soon as its headers are in, then closes without reading the body:
    the unread body makes the close a reset, which reaches a client still sending it. (gradserve drains what it
    refuses, up to service.body.DRAIN_BYTES; past that, it closes so.)"""

    def __init__(self, reply: bytes):
        self.reply, self.requests = reply, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests += 1
                conn.sendall(self.reply)

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("kind", ["plain", "httpx"])
def test_an_answer_read_from_a_reset_connection(kind, no_proxy):
    error = b'{"error":"the request body declares 16777608 bytes, over the limit","node":null,"field":"body"}'
    reply = b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nConnection: close\r\n"
    server = AnswerFirstServer(reply + b"Content-Length: %d\r\n\r\n%s" % (len(error), error))
    try:
        d = Driver(kind, server.url, **SLOW_RETRIES)
        error, seconds = refused(d, client.PayloadTooLargeError, "/forward", SUM, inputs={"x": BIG})
        assert "over the limit" in str(error) and error.field == "body"
        assert d.sent() == server.requests == 1 and seconds < 1.0
        d.close()
    finally:
        server.close()
