"""Transports: how a session's requests reach the service, and the one retry policy.

`EmbeddedTransport` runs the service's request handling in-process (`wire.executor.Executor`).
A plain `http://` URL is spoken with the standard library's `http.client`
(`PlainHttpTransport`: a fraction of httpx's per-request cost on large binary bodies);
`https://`, a proxy from the environment, an injected `transport=` and `AsyncSession` use
httpx (`HttpTransport`, `AsyncHttpTransport`). A transport raises `Retryable` for a failure
that `RetryPolicy` may try again.
"""

from __future__ import annotations

import email.utils
import http.client
import select
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import httpx
import numpy
import orjson

from client.errors import ConnectionFailed, RequestTimeout, status_of_kind
from client.wire import Call, Reply, Response, _header, owned, raise_for_error
from engine import backend
from engine.grad_mode import enable_grad
from wire import codec
from wire.codec import HEADER_LENGTH, datatype_of
from wire.errors import GraphError
from wire.executor import Executor
from wire.messages import decode_request, encode_result

CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 3


class Retryable(Exception):
    """A transport failure; `always`: safe to retry even for a non-idempotent request."""

    def __init__(self, error: Exception, always: bool):
        super().__init__(str(error))
        self.error = error
        self.always = always


class EmbeddedTransport:
    """The service's request handling, in-process: body bytes -> Executor -> body bytes
    (`request`), or, for the client's own calls, tensors -> Executor -> tensors (`execute`)."""

    url = "embedded"

    def __init__(self, executor=None):
        self.executor = executor or Executor()

    def request(self, method, path, content=b"", headers=None) -> Response:
        headers = headers or {}
        if method == "GET":
            if path == "/healthz":
                return _json(200, {"status": "ok"})
            if path == "/info":
                return _json(200, {"name": "gradserve", "embedded": True, "backend": {"device": backend.device},
                                   "limits": self.executor.limits.as_dict()})
            return _error(404, f"no GET {path} in embedded mode")
        if method != "POST" or path not in ("/forward", "/backward"):
            return _error(404, f"no {method} {path}")

        def compute():
            length = _header(headers, HEADER_LENGTH)
            head, tail = codec.split_body(content, None if length is None else int(length))
            try:
                header = orjson.loads(head)
            except orjson.JSONDecodeError as err:
                return _error(400, f"malformed JSON: {err}", field="body")
            request = decode_request(header, tail, self.executor.limits)
            return encode_result(self._run(path, request), request.binary_output)

        answer = self._guarded(compute)
        if isinstance(answer, Response):
            return answer
        body, head_length = answer
        if head_length is None:
            return Response(200, {"content-type": "application/json"}, body)
        return Response(200, {"content-type": "application/octet-stream", HEADER_LENGTH: str(head_length)}, body)

    def execute(self, call: Call, where: str) -> Reply:
        """A call's answer without encoding anything: its tensors go to the executor as JSON tensor
        objects holding the arrays (checked by the same `decode_request`, which copies them), and
        the result's arrays come back as they are (copied when a retained tape may share them)."""
        if call.path not in ("/forward", "/backward"):
            raise_for_error(_error(404, f"no POST {call.path}"), where)
        header = dict(call.header)
        for key, tensors in (("inputs", call.inputs), ("grad_outputs", call.grad_outputs)):
            if tensors:
                header[key] = [_tensor_object(name, array) for name, array in tensors]
        result = self._guarded(lambda: self._run(call.path, decode_request(header, None, self.executor.limits)))
        if isinstance(result, Response):
            raise_for_error(result, where)
        copy = result.tape is not None
        grads = result.grads or {}
        return Reply({}, owned(result.outputs.items(), copy), owned(grads.items(), copy), result.tape)

    def _run(self, path, request):
        if path == "/forward":
            return self.executor.forward(request)
        return self.executor.backward(request)

    @staticmethod
    def _guarded(compute):
        """compute()'s value, or the error answer the service would give for what it raised."""
        try:
            with enable_grad(), numpy.errstate(all="ignore"):
                return compute()
        except GraphError as err:
            return _error(status_of_kind(err.kind), str(err), getattr(err, "node", None), getattr(err, "field", None))
        except MemoryError:
            return _error(507, "out of memory")
        except Exception as err:  # noqa: BLE001 - the service would answer 500
            return _error(500, f"internal error: {type(err).__name__}: {err}")

    def close(self):
        pass


def _tensor_object(name, array) -> dict:
    """A JSON tensor object whose `data` is the array itself (flat), for `decode_request` in-process."""
    array = numpy.asarray(array)
    return {"name": name, "shape": list(array.shape), "datatype": datatype_of(array.dtype), "data": array.reshape(-1)}


def _json(status, obj) -> Response:
    return Response(status, {"content-type": "application/json"}, orjson.dumps(obj))


def _error(status, message, node=None, field=None) -> Response:
    return _json(status, {"error": message, "node": node, "field": field})


def _translate(err: httpx.HTTPError, url: str, path: str, timeout) -> Exception:
    where = f"{url}{path}"
    if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)):
        return Retryable(ConnectionFailed(f"could not connect to the gradserve service at {url}: {err}", url), True)
    if isinstance(err, httpx.PoolTimeout):
        return Retryable(ConnectionFailed(f"no free connection to the gradserve service at {url}: {err}", url), True)
    if isinstance(err, httpx.TimeoutException):
        return RequestTimeout(f"no answer from {where} within the timeout ({timeout} s): {type(err).__name__}", url)
    if isinstance(err, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return Retryable(ConnectionFailed(f"the connection to {where} was dropped: {err}", url), False)
    return ConnectionFailed(f"request to {where} failed: {type(err).__name__}: {err}", url)


def _timeout(timeout):
    if timeout is None or isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))


class HttpTransport:
    def __init__(self, url, headers, timeout, transport=None):
        self.url = url
        self.timeout = timeout
        self.client = httpx.Client(base_url=url, headers=headers, timeout=_timeout(timeout), transport=transport)

    def request(self, method, path, content=None, headers=None) -> Response:
        try:
            r = self.client.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as err:
            raise _translate(err, self.url, path, self.timeout) from err
        return Response(r.status_code, dict(r.headers), r.content)

    def close(self):
        self.client.close()


class PlainHttpTransport:
    """HTTP/1.1 over `http.client` with a small pool of keep-alive connections (thread-safe: a
    request takes an idle connection or opens one, and gives it back when the answer is read).
    Failures are reported as `HttpTransport` reports httpx's."""

    MAX_IDLE = 8

    def __init__(self, url, headers, timeout):
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self.timeout = timeout
        self.headers = dict(headers)
        self._address = (parts.hostname, parts.port or 80)
        self._prefix = parts.path.rstrip("/")
        self._idle = []
        self._lock = threading.Lock()
        self._closed = False

    def _open(self):
        connect = None if self.timeout is None else min(self.timeout, CONNECT_TIMEOUT)
        conn = http.client.HTTPConnection(*self._address, timeout=connect)
        try:
            conn.connect()
        except OSError as err:
            what = "timed out" if isinstance(err, TimeoutError) else err
            raise Retryable(ConnectionFailed(f"could not connect to the gradserve service at {self.url}: {what}",
                                              self.url), True) from err
        conn.sock.settimeout(self.timeout)
        return conn

    def _take(self):
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _readable(conn.sock):  # readable while idle: the server closed it (or broke protocol)
                    return conn
                conn.close()
        return self._open()

    def _give_back(self, conn):
        with self._lock:
            if not self._closed and len(self._idle) < self.MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def request(self, method, path, content=None, headers=None) -> Response:
        conn = self._take()
        try:
            conn.request(method, self._prefix + path, body=content, headers={**self.headers, **(headers or {})})
            answer = conn.getresponse()
            body = answer.read()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            where = f"{self.url}{path}"
            if isinstance(err, TimeoutError):
                raise RequestTimeout(f"no answer from {where} within the timeout ({self.timeout} s): ReadTimeout",
                                     self.url) from err
            raise Retryable(ConnectionFailed(f"the connection to {where} was dropped: {err!r}", self.url), False) from err
        if answer.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, body)

    def close(self):
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _readable(sock) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


def _plain(url) -> bool:
    """Whether `url` can go over `PlainHttpTransport`: http://, and no proxy configured for it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
        return False
    proxies = urllib.request.getproxies()
    return not (proxies.get("http") or proxies.get("all")) or bool(urllib.request.proxy_bypass(parts.hostname))


def http_transport(url, headers, timeout, transport=None):
    """The synchronous transport for `url`: `PlainHttpTransport` where it applies, else httpx."""
    if transport is None and _plain(url):
        return PlainHttpTransport(url, headers, timeout)
    return HttpTransport(url, headers, timeout, transport)


class AsyncHttpTransport:
    def __init__(self, url, headers, timeout, transport=None):
        self.url = url
        self.timeout = timeout
        self.client = httpx.AsyncClient(base_url=url, headers=headers, timeout=_timeout(timeout), transport=transport)

    async def request(self, method, path, content=None, headers=None) -> Response:
        try:
            r = await self.client.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as err:
            raise _translate(err, self.url, path, self.timeout) from err
        return Response(r.status_code, dict(r.headers), r.content)

    async def close(self):
        await self.client.aclose()


def retry_after(response: Response, cap: float):
    """The seconds a 503's `Retry-After` asks for (at most `cap`), or None."""
    value = _header(response.headers, "retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, min(seconds, cap))


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy of every session: what is safe to try again, and after how long.

    Connection failures are retried always; a dropped connection only for an idempotent
    request; a 503 after its `Retry-After` (else exponential backoff); at most `retries` times."""

    retries: int = DEFAULT_RETRIES
    backoff: float = 0.1
    max_backoff: float = 5.0
    max_retry_after: float = 30.0

    def wait(self, attempt: int, outcome, idempotent: bool):
        """Seconds to wait before attempt `attempt + 1`, or None to stop with `outcome`
        (a Response, or a Retryable whose error is then raised)."""
        if attempt >= self.retries:
            return None
        backoff = min(self.backoff * (2 ** attempt), self.max_backoff)
        if isinstance(outcome, Retryable):
            return backoff if outcome.always or idempotent else None
        if outcome.status != 503:
            return None
        asked = retry_after(outcome, self.max_retry_after)
        return backoff if asked is None else asked
