"""Transports: how a session's requests reach the service, and the one retry policy.

`EmbeddedTransport` is the service's request handling in-process (`wire.handler`), its errors
answered as the service answers them. A plain `http://` URL is spoken with the standard
library's `http.client` (`PlainHttpTransport`: per 650 KB request ~1 ms less than httpx; urllib3 2.7's
pool costs ~0.2 ms more client CPU, +20% per remote seed-net step); `https://`, a proxy from the
environment, an injected `transport=` and `AsyncSession` use httpx (`HttpTransport`,
`AsyncHttpTransport`). A transport raises `Retryable` for a failure that `RetryPolicy` may retry.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import select
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import httpx
import orjson

from client.errors import (
    KIND_ERRORS,
    ConnectionFailed,
    InternalServerError,
    NotFoundError,
    OutOfMemoryError,
    RequestTimeout,
    ServerError,
)
from client.wire import Call, Reply, Response, header_of, owned
from engine import backend
from wire.codec import HEADER_LENGTH, content_headers
from wire.errors import GraphError
from wire.executor import Executor
from wire.handler import PATHS, handle, run_arrays

CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 3


class Retryable(Exception):
    """A transport failure; `always`: safe to retry even for a non-idempotent request."""

    def __init__(self, error: Exception, always: bool):
        super().__init__(str(error))
        self.error = error
        self.always = always


class EmbeddedTransport:
    """Requests answered in-process: `request` takes and answers bytes as the service does;
    `execute` answers the client's own calls without encoding anything."""

    url = "embedded"

    def __init__(self, executor=None):
        self.executor = executor or Executor()

    def request(self, method, path, content=b"", headers=None) -> Response:
        if (method, path) == ("GET", "/healthz"):
            return _json(200, {"status": "ok"})
        if (method, path) == ("GET", "/info"):
            return _json(200, {"name": "gradserve", "embedded": True, "backend": {"device": backend.device},
                               "limits": self.executor.limits.as_dict()})
        try:
            if method != "POST" or path not in PATHS:
                raise NotFoundError(f"no {method} {path} in embedded mode", 404)
            length = header_of(headers or {}, HEADER_LENGTH)
            parts, length, _ = handle(self.executor, path, content, None if length is None else int(length))
        except Exception as err:  # noqa: BLE001 - answered as the service would
            error = _server_error(err, path)
            return _json(error.status, {"error": error.message, "node": error.node, "field": error.field})
        return Response(200, content_headers(length), parts[0] if len(parts) == 1 else b"".join(parts))

    def execute(self, call: Call, where: str) -> Reply:
        """A call's Reply, its arrays handed over as they are both ways (`wire.handler.run_arrays`;
        the result's copied when a retained tape may share them)."""
        try:
            if call.path not in PATHS:
                raise NotFoundError(f"no POST {call.path}", 404)
            result = run_arrays(self.executor, call.path, call.header, call.inputs, call.grad_outputs)
        except Exception as err:  # noqa: BLE001 - raised as the service's answer would be
            raise _server_error(err, where) from None
        copy = result.tape is not None
        return Reply({}, owned(result.outputs.items(), copy), owned((result.grads or {}).items(), copy), result.tape)

    def close(self):
        pass


def _server_error(err: Exception, where: str) -> ServerError:
    """The ServerError for what handling a request raised, as the service would answer it."""
    if isinstance(err, ServerError):
        err.url = where
        return err
    if isinstance(err, GraphError):
        cls = KIND_ERRORS[err.kind]
        return cls(str(err), cls.statuses[0], err.node, err.field, where)
    if isinstance(err, MemoryError):
        return OutOfMemoryError("out of memory", 507, url=where)
    return InternalServerError(f"internal error: {type(err).__name__}: {err}", 500, url=where)


def _json(status, obj) -> Response:
    return Response(status, {"content-type": "application/json"}, orjson.dumps(obj))


def _translate(err: httpx.HTTPError, url: str, path: str, timeout) -> Exception:
    """The client's exception for an httpx failure (a `Retryable` where it may be retried)."""
    where = f"{url}{path}"
    if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return Retryable(ConnectionFailed(f"could not connect to the gradserve service at {url}: {err}", url), True)
    if isinstance(err, httpx.TimeoutException):
        return RequestTimeout(f"no answer from {where} within the timeout ({timeout} s): {type(err).__name__}", url)
    if isinstance(err, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return Retryable(ConnectionFailed(f"the connection to {where} was dropped: {err}", url), False)
    return ConnectionFailed(f"request to {where} failed: {type(err).__name__}: {err}", url)


class HttpTransport:
    """httpx, synchronous."""

    def __init__(self, url, headers, timeout, transport=None):
        self.url = url
        self.timeout = timeout
        timeout = timeout if timeout is None or isinstance(timeout, httpx.Timeout) else \
            httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))
        self.client = self._client_class(base_url=url, headers=headers, timeout=timeout, transport=transport)

    _client_class = httpx.Client

    @contextlib.contextmanager
    def _translating(self, path):
        try:
            yield
        except httpx.HTTPError as err:
            raise _translate(err, self.url, path, self.timeout) from err

    def request(self, method, path, content=None, headers=None) -> Response:
        with self._translating(path):
            r = self.client.request(method, path, content=content, headers=headers)
        return Response(r.status_code, dict(r.headers), r.content)

    def close(self):
        self.client.close()


class AsyncHttpTransport(HttpTransport):
    """httpx, asyncio."""

    _client_class = httpx.AsyncClient

    async def request(self, method, path, content=None, headers=None) -> Response:
        with self._translating(path):
            r = await self.client.request(method, path, content=content, headers=headers)
        return Response(r.status_code, dict(r.headers), r.content)

    async def close(self):
        await self.client.aclose()


class PlainHttpTransport:
    """HTTP/1.1 over `http.client` with a small pool of keep-alive connections (thread-safe: a
    request takes an idle connection or opens one, and gives it back when the answer is read).
    Failures are reported as `HttpTransport` reports httpx's (as the httpx error they stand for)."""

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
            failure = httpx.ConnectError("timed out" if isinstance(err, TimeoutError) else str(err))
            raise _translate(failure, self.url, "", self.timeout) from err
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
            failure = httpx.ReadTimeout("") if isinstance(err, TimeoutError) else httpx.RemoteProtocolError(repr(err))
            raise _translate(failure, self.url, path, self.timeout) from err
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


def retry_after(response: Response, cap: float):
    """The seconds a 503's `Retry-After` asks for (at most `cap`), or None."""
    value = header_of(response.headers, "retry-after")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
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
