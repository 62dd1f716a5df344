"""Sessions: where a program's graphs are computed.

`connect("http://host:8000")` (or `GRADSERVE_URL`) selects a remote service; with neither, the
default session is *embedded*: it runs exactly the same requests in-process through
`wire.executor.Executor` (bytes in, bytes out, no HTTP), so every program also runs offline
and gets the same answers and the same errors.

`connect()` makes its session the default until it is closed (it is a context manager);
closing restores the previous default. `AsyncSession` is the asyncio flavour (httpx.AsyncClient):
`await s.fetch(v)`, `await s.backward(loss)`, `await s.grad(out, [x])`.

Transport: one keep-alive connection pool per session. A plain `http://` URL is spoken with the
standard library's `http.client` (`PlainHttpTransport`: a fraction of httpx's per-request cost on
large binary bodies); `https://`, a proxy from the environment, an injected `transport=` and
`AsyncSession` use httpx. Binary tensors by default (Triton's binary data extension, both ways),
JSON with `binary=False`. Failures that are safe to retry are
retried with exponential backoff, a bounded number of times: connection failures, dropped
connections (for stateless requests), and 503 answers (after the `Retry-After` they carry).
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import os
import select
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter, OrderedDict

import httpx
import numpy
import orjson

from client.errors import (
    ConflictError,
    ConnectionFailed,
    NotFoundError,
    RequestTimeout,
    ServerError,
    status_of_kind,
)
from client.wire import (
    Call,
    Reply,
    Response,
    _header,
    decode,
    encode,
    owned,
    raise_for_error,
)
from wire.codec import HEADER_LENGTH, datatype_of

DEFAULT_TIMEOUT = 120.0  # above the service's default compute_timeout_s (60 s), which answers 503
CONNECT_TIMEOUT = 10.0
DEFAULT_RETRIES = 3
USER_AGENT = "gradserve-client/0.1"


class _Retryable(Exception):
    """A transport failure; `always`: safe to retry even for a non-idempotent request."""

    def __init__(self, error: Exception, always: bool):
        super().__init__(str(error))
        self.error = error
        self.always = always


# --- transports --------------------------------------------------------------------------------


class EmbeddedTransport:
    """The service's request handling, in-process: body bytes -> Executor -> body bytes
    (`request`), or, for the client's own calls, tensors -> Executor -> tensors (`execute`)."""

    url = "embedded"

    def __init__(self, executor=None):
        from wire.executor import Executor

        self.executor = executor or Executor()

    def request(self, method, path, content=b"", headers=None) -> Response:
        from engine import backend
        from wire import codec
        from wire.messages import decode_request, encode_result

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
        from wire.messages import decode_request

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
        from engine.grad_mode import enable_grad
        from wire.errors import GraphError

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
        return _Retryable(ConnectionFailed(f"could not connect to the gradserve service at {url}: {err}", url), True)
    if isinstance(err, httpx.PoolTimeout):
        return _Retryable(ConnectionFailed(f"no free connection to the gradserve service at {url}: {err}", url), True)
    if isinstance(err, httpx.TimeoutException):
        return RequestTimeout(f"no answer from {where} within the timeout ({timeout} s): {type(err).__name__}", url)
    if isinstance(err, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return _Retryable(ConnectionFailed(f"the connection to {where} was dropped: {err}", url), False)
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
            raise _Retryable(ConnectionFailed(f"could not connect to the gradserve service at {self.url}: {what}",
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
            raise _Retryable(ConnectionFailed(f"the connection to {where} was dropped: {err!r}", self.url), False) from err
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


def _retry_after(response: Response, cap: float):
    value = None
    for key, v in response.headers.items():
        if key.lower() == "retry-after":
            value = v
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


# --- sessions ----------------------------------------------------------------------------------


class _Base:
    def __init__(self, url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, retries=DEFAULT_RETRIES,
                 backoff=0.1, max_backoff=5.0, max_retry_after=30.0, tapes=False, executor=None, transport=None,
                 headers=None):
        if url and "://" not in url:
            url = "http://" + url
        self.url = url.rstrip("/") if url else None
        self.binary = bool(binary)
        self.timeout = timeout
        self.retries = int(retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.tapes = bool(tapes)
        self.session_id = uuid.uuid4().hex
        self.stats = Counter()  # requests sent (attempts), by path
        self.closed = False
        self._tapes = OrderedDict()
        self._executor = executor
        self._http_transport = transport
        self._headers = {"User-Agent": USER_AGENT, "X-GradServe-Session": self.session_id, **(headers or {})}
        if api_key is None and self.url is not None:
            api_key = os.environ.get("GRADSERVE_API_KEY") or None
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    @property
    def embedded(self) -> bool:
        return self.url is None

    def _where(self, path):
        return f"{self.url}{path}" if self.url else f"embedded:{path}"

    def _check_open(self):
        if self.closed:
            raise RuntimeError(f"{self!r} is closed")

    def _delay(self, attempt):
        return min(self.backoff * (2 ** attempt), self.max_backoff)

    def __repr__(self):
        where = self.url or "embedded"
        return f"<{type(self).__name__} {where} {'binary' if self.binary else 'json'}{' closed' if self.closed else ''}>"


class Session(_Base):
    """A synchronous session: the default one computes every Variable's value and gradient."""

    def __init__(self, url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, **options):
        super().__init__(url, api_key, timeout, binary, **options)
        if self.url is None:
            self._transport = EmbeddedTransport(self._executor)
        else:
            self._transport = http_transport(self.url, self._headers, timeout, self._http_transport)

    # --- plumbing -------------------------------------------------------------------------
    def _send(self, method, path, content=None, headers=None, idempotent=True) -> Response:
        self._check_open()
        attempt = 0
        while True:
            self.stats[path] += 1
            try:
                response = self._transport.request(method, path, content, headers)
            except _Retryable as failure:
                if (failure.always or idempotent) and attempt < self.retries:
                    time.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise failure.error from None
            if response.status == 503 and attempt < self.retries:
                wait = _retry_after(response, self.max_retry_after)
                time.sleep(self._delay(attempt) if wait is None else wait)
                attempt += 1
                continue
            return response

    def _execute_one(self, call: Call):
        body, headers = encode(call, self.binary)
        response = self._send("POST", call.path, body, headers, call.idempotent)
        return decode(response, self._where(call.path))

    def _execute_embedded(self, call: Call):
        self._check_open()
        self.stats[call.path] += 1
        return self._transport.execute(call, self._where(call.path))

    def _execute(self, call: Call):
        exchange = self._execute_embedded if self.embedded else self._execute_one
        try:
            return exchange(call)
        except (NotFoundError, ConflictError):
            if call.fallback is None:
                raise
            return exchange(call.fallback)

    def run(self, plan):
        """Run a fetch/backward plan: at most one request (plus one to fetch a lazy gradient argument)."""
        pre = plan.prefetch()
        if pre is not None:
            self.run(pre)
        call = plan.call(self)
        reply = self._execute(call) if call is not None else None
        return plan.finish(reply, self)

    # --- values and gradients --------------------------------------------------------------
    def fetch_values(self, values):
        from client.autograd import FetchPlan

        self.run(FetchPlan(values))

    def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        lazy = [v._value for v in variables if v._data is None]
        if lazy:
            self.fetch_values(lazy)
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False):
        from client.autograd import backward

        backward(*_backward_args(outputs, gradient), retain_graph, create_graph, session=self)

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
        from client.autograd import grad

        return grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused, session=self)

    # --- the protocol, raw ---------------------------------------------------------------
    def send(self, path, header: dict, inputs=(), grad_outputs=()):
        """POST a protocol request (header without tensors; tensors as {name: array} or pairs).
        Returns a `wire.Reply` (`.outputs`, `.grads`, `.tape`, `.body`); errors raise ServerError."""
        call = Call(path, dict(header), _pairs(inputs), _pairs(grad_outputs))
        return self._execute_one(call)

    def post(self, path, content=b"", headers=None, json=None) -> Response:
        """POST raw bytes (or a JSON object); the answer as is, errors included (not raised)."""
        if json is not None:
            content, headers = orjson.dumps(json), {"Content-Type": "application/json", **(headers or {})}
        return self._send("POST", path, content, headers or {})

    def get(self, path) -> Response:
        return self._send("GET", path)

    def healthz(self) -> dict:
        return self._get_json("/healthz")

    def info(self) -> dict:
        return self._get_json("/info")

    def metrics(self) -> str:
        response = self.get("/metrics")
        raise_for_error(response, self._where("/metrics"))
        return response.content.decode()

    def _get_json(self, path):
        response = self.get(path)
        raise_for_error(response, self._where(path))
        return response.json()

    # --- lifetime ------------------------------------------------------------------------
    def close(self):
        if not self.closed:
            self.closed = True
            self._transport.close()
        _remove(self)

    def __enter__(self):
        with _lock:
            if self not in _stack:
                _stack.append(self)
        return self

    def __exit__(self, *exc):
        self.close()


class AsyncSession(_Base):
    """An asyncio session. Variables record as usual; values and gradients come from awaiting:

        async with AsyncSession("http://127.0.0.1:8000") as s:
            loss = (x.mm(w) - y).pow(2).sum()
            print(await s.item(loss))
            await s.backward(loss)        # fills w.grad
    """

    def __init__(self, url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, **options):
        super().__init__(url, api_key, timeout, binary, **options)
        if self.url is None:
            self._transport = EmbeddedTransport(self._executor)
        else:
            self._transport = AsyncHttpTransport(self.url, self._headers, timeout, self._http_transport)

    async def _send(self, method, path, content=None, headers=None, idempotent=True) -> Response:
        self._check_open()
        attempt = 0
        while True:
            self.stats[path] += 1
            try:
                if self.url is None:
                    response = await asyncio.to_thread(self._transport.request, method, path, content, headers)
                else:
                    response = await self._transport.request(method, path, content, headers)
            except _Retryable as failure:
                if (failure.always or idempotent) and attempt < self.retries:
                    await asyncio.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise failure.error from None
            if response.status == 503 and attempt < self.retries:
                wait = _retry_after(response, self.max_retry_after)
                await asyncio.sleep(self._delay(attempt) if wait is None else wait)
                attempt += 1
                continue
            return response

    async def _execute_one(self, call: Call):
        body, headers = encode(call, self.binary)
        response = await self._send("POST", call.path, body, headers, call.idempotent)
        return decode(response, self._where(call.path))

    async def _execute_embedded(self, call: Call):
        self._check_open()
        self.stats[call.path] += 1
        return await asyncio.to_thread(self._transport.execute, call, self._where(call.path))

    async def _execute(self, call: Call):
        exchange = self._execute_embedded if self.embedded else self._execute_one
        try:
            return await exchange(call)
        except (NotFoundError, ConflictError):
            if call.fallback is None:
                raise
            return await exchange(call.fallback)

    async def run(self, plan):
        pre = plan.prefetch()
        if pre is not None:
            await self.run(pre)
        call = plan.call(self)
        reply = await self._execute(call) if call is not None else None
        return plan.finish(reply, self)

    async def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        from client.autograd import FetchPlan

        lazy = [v._value for v in variables if v._data is None]
        if lazy:
            await self.run(FetchPlan(lazy))
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    async def item(self, variable):
        await self.fetch(variable)
        return variable.item()

    async def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False):
        from client.autograd import prepare_backward

        await self.run(prepare_backward(*_backward_args(outputs, gradient), retain_graph, create_graph))

    async def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
        from client.autograd import check_unused, prepare_grad

        plan = prepare_grad(outputs, inputs, grad_outputs, retain_graph, create_graph)
        return check_unused(await self.run(plan), allow_unused)

    async def send(self, path, header: dict, inputs=(), grad_outputs=()):
        return await self._execute_one(Call(path, dict(header), _pairs(inputs), _pairs(grad_outputs)))

    async def post(self, path, content=b"", headers=None, json=None) -> Response:
        if json is not None:
            content, headers = orjson.dumps(json), {"Content-Type": "application/json", **(headers or {})}
        return await self._send("POST", path, content, headers or {})

    async def get(self, path) -> Response:
        return await self._send("GET", path)

    async def aclose(self):
        if not self.closed:
            self.closed = True
            if self.url is not None:
                await self._transport.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


def _backward_args(outputs, gradient):
    """`backward(out, gradient)` of one output, as Variable.backward spells it, or of a list."""
    from client.variable import Variable

    if isinstance(outputs, Variable):
        return [outputs], None if gradient is None else [gradient]
    return list(outputs), gradient


def _pairs(tensors):
    if isinstance(tensors, dict):
        tensors = tensors.items()
    return [(name, numpy.asarray(a)) for name, a in tensors]


# --- the default session -----------------------------------------------------------------------

_stack: list = []
_default: Session | None = None
_lock = threading.RLock()


def _remove(session):
    with _lock:
        if session in _stack:
            _stack.remove(session)


def current_session() -> Session:
    """The session Variables use now: the innermost open `connect()`, else the module default
    (remote when GRADSERVE_URL is set, embedded otherwise)."""
    global _default
    with _lock:
        if _stack:
            return _stack[-1]
        if _default is None or _default.closed:
            _default = Session(os.environ.get("GRADSERVE_URL") or None)
        return _default


def connect(url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, **options) -> Session:
    """A session for `url` (default: $GRADSERVE_URL; embedded when neither), made the default
    until closed. Options: retries, backoff, tapes, executor, transport, headers."""
    if url is None:
        url = os.environ.get("GRADSERVE_URL") or None
    session = Session(url, api_key=api_key, timeout=timeout, binary=binary, **options)
    with _lock:
        _stack.append(session)
    return session


__all__ = ["Session", "AsyncSession", "connect", "current_session", "EmbeddedTransport", "ServerError"]
