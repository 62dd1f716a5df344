"""What a session exchanges with the service, how it gets there, and the one retry policy.

A `Call` is encoded and its answer read by the protocol's own functions (`wire.messages`): binary tensors
(Triton's binary data extension) by default, JSON with `binary=False`; an error answer raises its `ServerError`
(`raise_for_error`, by status), a failed exchange its `ClientError` (`_translate`, by the table FAILURES): the
same exception, whichever transport. An answer the server gives before reading the whole body (413 for a body
over its limit, 401, 415, 503...) is read, not reported as the connection it then resets.
`EmbeddedTransport` answers in-process as the service would (`wire.handler`). A plain `http://` URL goes over
the standard library's `http.client` (`PlainHttpTransport`, faster than httpx: benchmarks/CHANGES.md); https,
a proxy from the environment, an injected `transport=` and `AsyncSession` use httpx.
"""

from __future__ import annotations

import email.utils
import http.client
import select
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy
import orjson

from client.errors import (
    ClientError,
    ConnectionFailed,
    ProtocolError,
    RequestTimeout,
    error_for_exception,
    error_for_status,
)
from engine import backend
from wire.codec import HEADER_LENGTH, content_headers
from wire.errors import RequestError, error_body
from wire.executor import Executor
from wire.handler import PATHS, handle, read_body, run_arrays
from wire.messages import decode_result, encode_request

CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 3
MAX_ELEMENTS = 2**62  # answers are trusted for size: the service already enforced its limits


@dataclass
class Call:
    """One request: a path, a JSON header (without tensors) and its tensors."""

    path: str
    header: dict
    inputs: list = field(default_factory=list)  # [(name, ndarray)]
    grad_outputs: list = field(default_factory=list)  # [(name, ndarray)]
    idempotent: bool = True  # safe to resend after a dropped connection
    upload: list = field(default_factory=list)  # [(handle, ndarray)] to keep resident (wire.residents)
    written: Any = None  # client.serialize.Written: what its graph was written for (embedded: its layout is kept)


@dataclass
class Reply:
    """A call's answer: its JSON body ({} when embedded) and its tensors as the client's own arrays."""

    body: dict
    outputs: dict
    grads: dict
    tape: str | None = None
    fetched: dict = field(default_factory=dict)  # resident arrays the call fetched (wire.residents)


@dataclass
class Response:
    status: int
    headers: dict
    content: bytes

    def json(self):
        return orjson.loads(self.content)


def encode(call: Call, binary: bool) -> tuple[bytes, dict]:
    """(body, headers) of a call."""
    body, length = encode_request(call.header, call.inputs, call.grad_outputs, binary, call.upload)
    return body, content_headers(length)


def decode(response: Response, url: str | None) -> Reply:
    """A Reply from a successful answer (JSON or binary)."""
    raise_for_error(response, url)
    length = header_of(response.headers, HEADER_LENGTH)
    try:
        body, tail = read_body(response.content, None if length is None else int(length))
        result = decode_result(body, tail, MAX_ELEMENTS)
    except (ValueError, TypeError, AttributeError) as err:  # wire.errors.GraphError is a ValueError
        raise ProtocolError(f"unreadable answer from {url}: {err}", url) from None
    outputs, grads = owned(result.outputs.items()), owned(result.grads.items())
    return Reply(body, outputs, grads, result.tape, owned((result.fetched or {}).items()))


def raise_for_error(response: Response, url: str | None) -> Response:
    """The response, unless it is an error answer (status >= 400): then its ServerError subclass is raised."""
    if response.status < 400:
        return response
    try:
        body = response.json()
    except ValueError:  # not JSON
        body = None
    if not isinstance(body, dict):
        body = {}
    message = body.get("error")
    if message is None and "detail" in body:
        message = str(body["detail"])
    if not isinstance(message, str) or not message:
        text = response.content[:300].decode("utf-8", "replace").strip()
        message = f"HTTP {response.status}" + (f": {text}" if text else "")
    if response.status in (404, 405) and body.get("node") is None and url:  # "Not Found": of what (a URL's prefix)
        message = f"{message}: {url}"
    raise error_for_status(response.status, message)(message, response.status, body.get("node"), body.get("field"), url)


def owned(tensors, copy: bool = False) -> dict:
    """{name: host array} from (name, array) pairs, as arrays the client may keep and update in
    place: read-only ones (views of a body or of other arrays) and, with `copy`, all are copied."""
    own = {}
    for name, array in tensors:
        array = array if type(array) is numpy.ndarray else backend.to_numpy(array)
        own[name] = numpy.array(array) if copy or not array.flags.writeable else array
    return own


def header_of(headers: dict, name: str):
    """The value of header `name` (any case) in `headers`, or None."""
    name = name.lower()
    return next((value for key, value in headers.items() if key.lower() == name), None)


class EmbeddedTransport:
    """Requests answered in-process: `request` takes and answers bytes as the service does;
    `execute` answers the client's own calls without encoding anything."""

    def __init__(self, executor=None):
        self.executor = executor or Executor()

    def request(self, method, path, content=b"", headers=None) -> Response:
        if (method, path) == ("GET", "/healthz"):
            return _json(200, orjson.dumps({"status": "ok"}))
        if (method, path) == ("GET", "/info"):
            info = {
                "name": "gradserve",
                "embedded": True,
                "backend": {"device": backend.device},
                "limits": self.executor.limits.as_dict(),
            }
            return _json(200, orjson.dumps(info))
        if method != "POST" or path not in PATHS:
            return _json(404, error_body(f"no {method} {path} in embedded mode"))
        try:
            length = header_of(headers or {}, HEADER_LENGTH)
            length = None if length is None else int(length)
            check_body_size(self.executor.limits, len(content), length)
            parts, length, _ = handle(self.executor, path, content, length)
        except Exception as err:  # noqa: BLE001 - answered as the service would
            error = error_for_exception(err, path)
            return _json(error.status, error_body(error.message, error.node, error.field))
        return Response(200, content_headers(length), b"".join(parts))

    def execute(self, call: Call, where: str) -> Reply:
        """The Reply to a plan's call (a /forward or /backward), its arrays handed over as they are
        both ways (`wire.handler.run_arrays`; the result's copied when a retained tape may share them)."""
        written = call.written
        layout = None if written is None else written.layout
        try:
            result = run_arrays(
                self.executor, call.path, call.header, call.inputs, call.grad_outputs, call.upload, layout
            )
        except Exception as err:  # noqa: BLE001 - raised as the service's answer would be
            raise error_for_exception(err, where) from None
        if written is not None:
            written.layout = result.layout
        copy = result.tape is not None
        outputs, grads = owned(result.outputs.items(), copy), owned((result.grads or {}).items(), copy)
        return Reply({}, outputs, grads, result.tape, owned((result.fetched or {}).items()))

    def close(self):
        pass


def _json(status, body: bytes) -> Response:
    return Response(status, content_headers(None), body)


def check_body_size(limits, size: int, head_length: int | None) -> None:
    """A body over its limit is refused (413) as the service refuses it (`service.body`): a JSON body has the
    smaller `max_json_body_bytes` bound, a binary-extension one `max_body_bytes`."""
    limit, name = limits.max_body_bytes, "max_body_bytes"
    if head_length is None and limits.max_json_body_bytes < limit:
        limit, name = limits.max_json_body_bytes, "max_json_body_bytes"
    if size > limit:
        hint = ""
        if name == "max_json_body_bytes":
            hint = (
                "; JSON bodies are parsed in one piece, so they have a smaller limit: send large tensors with the "
                f"binary extension (Content-Type: application/octet-stream and an {HEADER_LENGTH} header)"
            )
        message = f"the request body declares {size} bytes, over the limit of {limit} bytes ({name}){hint}"
        raise RequestError(message, field="body", kind="too_large")


# A failed exchange's exception, as httpx maps httpcore's (HTTPCORE_EXC_MAP): the first row the failure is an
# instance of gives the client's class, its message ({url}: the service, {where}: the request's URL, {err}, {name}:
# the failure's class, {timeout}) and, for a ConnectionFailed, when a session may try again.
FAILURES = (
    (
        (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout),
        ConnectionFailed,
        "could not connect to the gradserve service at {url}: {err}",
        "always",  # nothing was sent
    ),
    (httpx.TimeoutException, RequestTimeout, "no answer from {where} within the timeout ({timeout} s): {name}", None),
    (
        (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError),
        ConnectionFailed,
        "the connection to {where} was dropped: {err}",
        "idempotent",  # the request may have run
    ),
    (httpx.HTTPError, ConnectionFailed, "request to {where} failed: {name}: {err}", None),
)


def _translate(err: httpx.HTTPError, url: str, path: str, timeout) -> ClientError:
    """The client's exception for an httpx failure (or one that `PlainHttpTransport` reports as the httpx
    failure it stands for), by the table FAILURES."""
    cls, text, retry = next((cls, text, retry) for types, cls, text, retry in FAILURES if isinstance(err, types))
    message = text.format(url=url, where=f"{url}{path}", err=err, name=type(err).__name__, timeout=timeout)
    return cls(message, url, retry=retry) if cls is ConnectionFailed else cls(message, url)


class HttpTransport:
    """httpx, synchronous."""

    _client_class = httpx.Client

    def __init__(self, url, headers, timeout, transport=None):
        self.url = url
        self.timeout = timeout
        if timeout is not None and not isinstance(timeout, httpx.Timeout):
            timeout = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))
        self.client = self._client_class(base_url=url, headers=headers, timeout=timeout, transport=transport)

    def request(self, method, path, content=None, headers=None) -> Response:
        try:
            r = self.client.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as err:
            raise _translate(err, self.url, path, self.timeout) from err
        return Response(r.status_code, dict(r.headers), r.content)

    def close(self):
        self.client.close()


class AsyncHttpTransport(HttpTransport):
    """httpx, asyncio."""

    _client_class = httpx.AsyncClient

    async def request(self, method, path, content=None, headers=None) -> Response:
        try:
            r = await self.client.request(method, path, content=content, headers=headers)
        except httpx.HTTPError as err:
            raise _translate(err, self.url, path, self.timeout) from err
        return Response(r.status_code, dict(r.headers), r.content)

    async def close(self):
        await self.client.aclose()


class PlainHttpTransport:
    """HTTP/1.1 over `http.client` with a thread-safe pool of keep-alive connections. Failures are
    reported as `HttpTransport` reports httpx's (as the httpx error they stand for)."""

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

    def _take(self):
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _readable(conn.sock):  # readable while idle: the server closed it (or broke protocol)
                    return conn
                conn.close()
        connect = None if self.timeout is None else min(self.timeout, CONNECT_TIMEOUT)
        conn = http.client.HTTPConnection(*self._address, timeout=connect)
        try:
            conn.connect()
        except OSError as err:
            failure = httpx.ConnectError("timed out" if isinstance(err, TimeoutError) else str(err))
            raise _translate(failure, self.url, "", self.timeout) from err
        conn.sock.settimeout(self.timeout)
        return conn

    def request(self, method, path, content=None, headers=None) -> Response:
        conn = self._take()
        try:
            answer, body, whole = _exchange(
                conn, method, self._prefix + path, content, {**self.headers, **(headers or {})}
            )
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            failure = httpx.ReadTimeout("") if isinstance(err, TimeoutError) else httpx.RemoteProtocolError(repr(err))
            raise _translate(failure, self.url, path, self.timeout) from err
        with self._lock:
            if not whole or answer.will_close or self._closed or len(self._idle) >= self.MAX_IDLE:
                conn.close()
            else:
                self._idle.append(conn)
        return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, body)

    def close(self):
        with self._lock:
            self._closed = True
            while self._idle:
                self._idle.pop().close()


def _exchange(conn, method, url, content, headers) -> tuple[http.client.HTTPResponse, bytes, bool]:
    """(answer, its body, whether the request went out whole) of one request on `conn`. A server may answer
    before it has read the whole body (413 for a declared length over its limit, 401, 415, 503) and close the
    connection, which resets it while the body is still being sent: the answer it sent first is read from the
    socket, as httpcore does; the send's error is raised only when there is none."""
    try:
        conn.request(method, url, body=content, headers=headers)
    except ConnectionError as failure:  # BrokenPipeError, ConnectionResetError: the server stopped reading
        try:
            answer = conn.getresponse()
            return answer, answer.read(), False
        except (OSError, http.client.HTTPException):
            raise failure from None
    answer = conn.getresponse()
    return answer, answer.read(), True


def _readable(sock) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


def http_transport(url, headers, timeout, transport=None):
    """The synchronous transport for `url`: `PlainHttpTransport` for http:// with no credentials in the URL,
    no proxy configured for it and no injected httpx `transport`; else httpx."""
    parts = urllib.parse.urlsplit(url)
    if transport is None and parts.scheme == "http" and parts.hostname and not (parts.username or parts.password):
        proxies = urllib.request.getproxies()
        if not (proxies.get("http") or proxies.get("all")) or urllib.request.proxy_bypass(parts.hostname):
            return PlainHttpTransport(url, headers, timeout)
    return HttpTransport(url, headers, timeout, transport)


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy of every session: a ConnectionFailed as its `retry` says, a 503 after its
    `Retry-After` (else after an exponential backoff); at most `retries` times."""

    retries: int = DEFAULT_RETRIES
    backoff: float = 0.1
    max_backoff: float = 5.0
    max_retry_after: float = 30.0

    def wait(self, attempt: int, outcome, idempotent: bool):
        """Seconds to wait before attempt `attempt + 1`; None: stop with `outcome` (a Response or ConnectionFailed)."""
        if attempt >= self.retries:
            return None
        backoff = min(self.backoff * (2**attempt), self.max_backoff)
        if isinstance(outcome, ConnectionFailed):
            return backoff if outcome.retry == "always" or outcome.retry == "idempotent" and idempotent else None
        if outcome.status != 503:
            return None
        value = header_of(outcome.headers, "retry-after")  # seconds, or an HTTP date
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                return backoff
        return max(0.0, min(seconds, self.max_retry_after))
