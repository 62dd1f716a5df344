"""Sessions and the wire: laziness (one request per value or backward), errors as exceptions
(embedded and remote alike), retries, transports (binary/JSON), tapes, AsyncSession."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest
from client_testkit import Recorder, free_port

import client
from client import Variable
from client import state as client_context
from client import transports as client_transports
from client.transports import raise_for_error
from wire.codec import HEADER_LENGTH

X = np.array([[1.0, -2.0, 3.0], [-0.5, 0.25, 2.0]], dtype=np.float32)
W = np.array([[0.5, 1.0], [-1.0, 2.0], [0.25, 0.0]], dtype=np.float32)
BAD_GRAPH = {
    "graph": {
        "version": 1,
        "nodes": [{"id": "x", "op": "input"}, {"id": "y", "op": "frobnicate", "inputs": ["x"]}],
        "outputs": ["y"],
    },
}


def test_nothing_is_sent_before_a_value_is_needed(session, recorder):
    x = Variable(X, requires_grad=True)
    w = Variable(W, requires_grad=True)
    h = x.mm(w).clamp(min=0)
    loss = (h * h).sum()
    assert (h.shape, h.dtype, loss.shape, loss.grad_fn.name) == ((2, 2), np.float32, (), "SumBackward0")
    assert recorder.calls == []
    value = loss.item()
    assert recorder.paths() == ["/forward"]
    assert loss.item() == value and recorder.paths() == ["/forward"]  # cached
    loss.backward()
    assert recorder.paths() == ["/forward", "/backward"]  # exactly one request per backward()
    header = recorder.calls[1][2]
    assert sorted(header["wrt"]) == sorted(n["id"] for n in header["graph"]["nodes"] if n.get("requires_grad"))
    again = (x.mm(w).clamp(min=0) ** 2).sum()
    again.backward()
    assert again.item() == pytest.approx(value)  # the /backward answer carried the output's value
    assert recorder.paths() == ["/forward", "/backward", "/backward"]
    np.testing.assert_allclose(x.grad.data, 2 * np.asarray(client.grad((x.mm(w).clamp(min=0) ** 2).sum(), [x])[0].data))


def test_server_errors_become_exceptions(session):
    with pytest.raises(client.GraphValidationError) as err:
        session.send("/forward", BAD_GRAPH, inputs={"x": X})
    e = err.value
    assert isinstance(e, ValueError) and isinstance(e, client.ServerError)
    assert (e.status, e.node, e.field) == (422, "y", "op")
    assert "unknown op 'frobnicate'" in str(e)
    response = session.post("/forward", b"{not json", headers={"Content-Type": "application/json"})
    assert response.status == 400 and response.json()["field"] == "body"
    with pytest.raises(client.GraphValidationError, match="unknown field"):
        session.send("/forward", {**BAD_GRAPH, "colour": "blue"})
    truncated = session.post(
        "/forward", b'{"graph": {}}', headers={HEADER_LENGTH: "99", "Content-Type": "application/octet-stream"}
    )
    with pytest.raises(client.BadRequestError, match="99") as err:
        raise_for_error(truncated, "somewhere")
    assert isinstance(err.value, ValueError) and err.value.status == 400
    reply = session.send(
        "/backward",
        {
            "graph": {
                "version": 1,
                "nodes": [{"id": "x", "op": "input", "requires_grad": True}, {"id": "s", "op": "sum", "inputs": ["x"]}],
                "outputs": ["s"],
            }
        },
        inputs={"x": X},
    )
    np.testing.assert_array_equal(reply.grads["x"], np.ones_like(X))
    assert reply.outputs["s"] == pytest.approx(X.sum())


def test_shape_errors_are_raised_at_the_op(session, recorder):
    x, y = Variable(np.ones((3, 4))), Variable(np.ones((5, 2)))
    with pytest.raises(client.ShapeError, match=r"mm\(\).*\[3, 4\].*\[5, 2\]") as err:
        x.mm(y)
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match=r"The size of tensor a \(3\) must match the size of tensor b \(4\)"):
        Variable(np.ones(3)) + Variable(np.ones(4))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        x.sum(colour=1)
    assert recorder.calls == []


def test_connection_refused_names_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with client.connect(url, retries=2, backoff=0.01) as s:
        with pytest.raises(client.ConnectionFailed, match=url.replace(".", r"\.")) as err:
            (Variable(X) * 2).sum().item()
        assert isinstance(err.value, ConnectionError)
        assert s.stats["/forward"] == 3  # the first try and 2 retries


class Scripted(httpx.BaseTransport):
    """Answers the first `answers` itself, then passes requests on (to a real server or not)."""

    def __init__(self, answers, inner=None):
        self.answers = list(answers)
        self.inner = inner
        self.requests = []

    def handle_request(self, request):
        request.read()
        self.requests.append(request)
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return self.inner.handle_request(request)


def busy():
    return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": "busy", "node": None, "field": None})


def test_503_is_retried_after_retry_after(server):
    transport = Scripted([busy(), busy()], httpx.HTTPTransport())
    with client.connect(server.url, transport=transport, backoff=5.0):
        assert (Variable(X) * 2).sum().item() == pytest.approx(2 * X.sum())  # Retry-After: 0 overrides the backoff
    assert len(transport.requests) == 3
    transport = Scripted([busy(), busy(), busy()], httpx.HTTPTransport())
    with client.connect(server.url, transport=transport, retries=2, backoff=0.0):
        with pytest.raises(client.ServiceUnavailableError, match="busy") as err:
            (Variable(X) * 2).sum().item()
    assert err.value.status == 503 and len(transport.requests) == 3


def test_dropped_connections_and_timeouts():
    url = "http://gradserve.invalid:8000"
    ok = httpx.Response(200, json={"outputs": [{"name": "n3", "shape": [], "datatype": "FP32", "data": [1.0]}]})
    dropped = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    transport = Scripted([dropped, ok])
    with client.connect(url, transport=transport, backoff=0.0, binary=False):
        value = (
            (Variable(X) * 2).sum().item()
        )  # (not inside the assert: pytest would keep X * 2 alive, and fetch it too)
        assert value == 1.0  # a stateless request is resent
    transport = Scripted([httpx.Response(200, json={"outputs": []})])
    with client.connect(url, transport=transport, binary=False):
        with pytest.raises(client.ProtocolError, match="no outputs tensor named 'n3'"):
            (Variable(X) * 2).sum().item()
    transport = Scripted([httpx.ReadTimeout("read timed out")])
    with client.connect(url, transport=transport, timeout=0.5):
        with pytest.raises(client.RequestTimeout, match=r"gradserve\.invalid:8000/forward") as err:
            (Variable(X) * 2).sum().item()
    assert isinstance(err.value, TimeoutError)


def test_api_key_and_auth_errors():
    denied = httpx.Response(401, json={"error": "wrong API key", "node": None, "field": "Authorization"})
    transport = Scripted([denied])
    with client.connect("http://gradserve.invalid", api_key="s3cret", transport=transport) as s:
        with pytest.raises(client.AuthenticationError, match="wrong API key") as err:
            (Variable(X) * 2).sum().item()
    assert isinstance(err.value, PermissionError) and err.value.field == "Authorization"
    sent = transport.requests[0].headers
    assert sent["authorization"] == "Bearer s3cret" and sent["x-gradserve-session"] == s.session_id


def test_non_json_error_pages():
    transport = Scripted([httpx.Response(502, text="<html>Bad Gateway</html>")])
    with client.connect("http://gradserve.invalid", transport=transport):
        with pytest.raises(client.InternalServerError, match="HTTP 502.*Bad Gateway"):
            (Variable(X) * 2).sum().item()


def test_binary_and_json_give_the_same_numbers(server):
    results = []
    for binary in (True, False):
        with client.connect(server.url, binary=binary) as s:
            rec = Recorder(s)
            x = Variable(X, requires_grad=True)
            w = Variable(W.astype(np.float64), requires_grad=True)
            out = (x.mm(w.float()).tanh() * Variable(np.array([1, 2], np.int64))).sum()
            (out * 3).backward()
            results.append((out.data.copy(), x.grad.data, w.grad.data))
            inputs = rec.calls[-1][2]["inputs"]
            assert all(("data" in t) != binary for t in inputs)
            assert ("parameters" in rec.calls[-1][2]) == binary
    for a, b in zip(*results):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_default_session_follows_gradserve_url(server, monkeypatch):
    monkeypatch.setattr(client_context, "_default", None)
    assert client.current_session().embedded
    monkeypatch.setenv("GRADSERVE_URL", server.url)
    monkeypatch.setattr(client_context, "_default", None)
    default = client.current_session()
    assert default.url == server.url and not default.embedded
    with client.connect() as s:  # no URL: GRADSERVE_URL
        assert client.current_session() is s and s.url == server.url
        with client.connect(None) as inner:
            assert client.current_session() is inner
        assert client.current_session() is s
    assert client.current_session() is default
    default.close()
    monkeypatch.setattr(client_context, "_default", None)


def test_tapes_are_reused_and_fall_back_when_lost(server):
    with client.connect(server.url, tapes=True) as s:
        rec = Recorder(s)
        x = Variable(X, requires_grad=True)
        out = (x * x).sum()
        out.backward(retain_graph=True)
        first = rec.calls[-1][2]
        assert first["parameters"]["retain_graph"] is True and "graph" in first
        out.backward(retain_graph=True)
        second = rec.calls[-1][2]
        assert "tape" in second and "graph" not in second and "inputs" not in second
        key = next(iter(s._tapes))
        tape, fingerprint, refs = s._tapes[key]
        s._tapes[key] = ("0" * 32, fingerprint, refs)  # as if the replica holding it had gone
        out.backward()
        assert rec.paths()[-2:] == ["/backward", "/backward"] and "graph" in rec.calls[-1][2]
        np.testing.assert_allclose(x.grad.data, 3 * 2 * X)
        assert not s._tapes
        with pytest.raises(RuntimeError, match="second time"):
            out.backward()


def test_async_session(mode, request):
    url = request.getfixturevalue("server").url if mode == "remote" else None

    async def main():
        async with client.AsyncSession(url) as s:
            x = Variable(X, requires_grad=True)
            w = Variable(W, requires_grad=True)
            loss = (x.mm(w) ** 2).sum()
            parts = [x.sum(), w.sum(), x.mm(w)]
            values = await asyncio.gather(*(s.fetch(p) for p in parts))
            item = await s.item(loss)
            await s.backward(loss)
            (gx,) = await s.grad((x * 3).sum(), [x])
            with pytest.raises(client.GraphValidationError):
                await s.send("/forward", BAD_GRAPH, inputs={"x": X})
            return values, item, x.grad.data, w.grad.data, gx.data, dict(s.stats)

    values, item, gx_backward, gw, gx, stats = asyncio.run(main())
    np.testing.assert_allclose(values[2], X @ W, rtol=1e-6)
    assert item == pytest.approx(((X @ W) ** 2).sum(), rel=1e-6)
    np.testing.assert_allclose(gx_backward, 2 * (X @ W) @ W.T, rtol=1e-5)
    np.testing.assert_allclose(gw, X.T @ (2 * (X @ W)), rtol=1e-5)
    np.testing.assert_allclose(gx, np.full_like(X, 3.0))
    assert stats == {"/forward": 5, "/backward": 2}


# --- the plain-HTTP transport and the embedded fast path ------------------------------------------


def test_plain_http_is_used_only_where_it_applies(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    pick = client_transports.http_transport
    assert isinstance(pick("http://127.0.0.1:1", {}, 1.0), client_transports.PlainHttpTransport)
    assert isinstance(pick("https://example.invalid", {}, 1.0), client_transports.HttpTransport)
    assert isinstance(
        pick("http://127.0.0.1:1", {}, 1.0, httpx.MockTransport(lambda r: None)), client_transports.HttpTransport
    )
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert isinstance(pick("http://gradserve.invalid:8000", {}, 1.0), client_transports.HttpTransport)
    monkeypatch.setenv("NO_PROXY", "gradserve.invalid")
    assert isinstance(pick("http://gradserve.invalid:8000", {}, 1.0), client_transports.PlainHttpTransport)


class OneShotServer:
    """Answers each connection's first request with `reply`, then closes it without saying so
    (as a server does with an idle keep-alive connection)."""

    def __init__(self, reply: bytes):
        import socket
        import threading

        self.reply, self.requests = reply, []
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
                self.requests.append(data.split(b"\r\n")[0])
                conn.sendall(self.reply)

    def close(self):
        self.sock.close()


def test_plain_http_reconnects_when_an_idle_connection_was_closed():
    body = b'{"status":"ok"}'
    server = OneShotServer(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    try:
        transport = client_transports.PlainHttpTransport(server.url + "/base/", {"X-Test": "1"}, 5.0)
        for _ in range(3):
            answer = transport.request("GET", "/healthz")
            assert (answer.status, answer.json(), answer.headers["content-type"]) == (
                200,
                {"status": "ok"},
                "application/json",
            )
            time.sleep(0.05)  # let the server's close arrive
        assert server.requests == [b"GET /base/healthz HTTP/1.1"] * 3
        transport.close()
    finally:
        server.close()


def test_plain_http_failures_are_the_client_errors():
    silent = OneShotServer(b"")  # reads the request, then closes without an answer
    try:
        with client.connect(silent.url, retries=1, backoff=0.0) as s:
            assert isinstance(s._transport, client_transports.PlainHttpTransport)
            with pytest.raises(client.ConnectionFailed, match="dropped"):
                s.send("/forward", BAD_GRAPH)
            assert s.stats["/forward"] == 2  # a /forward may be resent
    finally:
        silent.close()
    import socket

    quiet = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    try:
        url = f"http://127.0.0.1:{quiet.getsockname()[1]}"
        with client.connect(url, timeout=0.3, retries=0) as s:
            with pytest.raises(client.RequestTimeout, match="within the timeout"):
                s.get("/healthz")
    finally:
        quiet.close()


def test_remote_session_keeps_its_connection(server):
    with client.connect(server.url) as s:
        x = Variable(X, requires_grad=True)
        for _ in range(3):
            (x * x).sum().backward()
        assert len(s._transport._idle) == 1
        np.testing.assert_allclose(x.grad.data, 3 * 2 * X)


def test_embedded_answers_are_the_clients_own_arrays():
    seed = np.ones((2, 3), np.float32)
    with client.connect(None) as s:
        x = Variable(X, requires_grad=True)
        y = x * 1.0
        y.backward(seed)  # the gradient of x is the seed itself, computed in-process
        x.grad.data += 1.0  # accumulating in place must not reach the caller's seed
        np.testing.assert_array_equal(seed, np.ones((2, 3), np.float32))
        y.data[0, 0] = 123.0  # nor the executor's or the leaf's arrays
        np.testing.assert_array_equal(x.data, X)
        assert s.stats["/backward"] == 1
        with pytest.raises(client.GraphValidationError, match="unknown field"):
            s.send("/forward", {**BAD_GRAPH, "colour": "blue"})  # raw requests still go as bytes
        with pytest.raises(client.ShapeError):
            x.mm(x)
