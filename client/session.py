"""Sessions: where a program's graphs are computed.

`connect("http://host:8000")` (or `GRADSERVE_URL`) selects a remote service; with neither, the
default session is *embedded*: it runs exactly the same requests in-process through
`wire.executor.Executor` (bytes in, bytes out, no HTTP), so every program also runs offline
and gets the same answers and the same errors.

`connect()` makes its session the default until it is closed (it is a context manager);
closing restores the previous default. `AsyncSession` is the asyncio flavour (httpx.AsyncClient):
`await s.fetch(v)`, `await s.backward(loss)`, `await s.grad(out, [x])`.

Transport (`client.transports`): one keep-alive connection pool per session. Binary tensors by
default (Triton's binary data extension, both ways), JSON with `binary=False`. Failures that
are safe to retry are retried by the one `RetryPolicy`: connection failures, dropped connections
(for stateless requests), and 503 answers (after the `Retry-After` they carry).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter, OrderedDict

import numpy
import orjson

from client import context
from client.autograd import (
    FetchPlan,
    backward,
    check_unused,
    grad,
    prepare_backward,
    prepare_grad,
)
from client.errors import ConflictError, NotFoundError, ServerError
from client.transports import (
    DEFAULT_RETRIES,
    AsyncHttpTransport,
    EmbeddedTransport,
    Retryable,
    RetryPolicy,
    http_transport,
)
from client.variable import Variable
from client.wire import Call, Response, decode, encode, raise_for_error

DEFAULT_TIMEOUT = 120.0  # above the service's default compute_timeout_s (60 s), which answers 503
USER_AGENT = "gradserve-client/0.1"


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
        self.retry = RetryPolicy(int(retries), backoff, max_backoff, max_retry_after)
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

    def _steps(self, plan):
        """Running `plan` as the calls it needs, without I/O: a generator that yields each Call,
        is sent its Reply (or thrown the error it raised) and returns the plan's result. A lost
        tape (404/409) is answered by sending the call's stateless fallback. Session and
        AsyncSession drive it, each with its own I/O."""
        pre = plan.prefetch()
        if pre is not None:
            yield from self._steps(pre)
        call = plan.call(self)
        if call is None:
            return plan.finish(None, self)
        try:
            reply = yield call
        except (NotFoundError, ConflictError):
            if call.fallback is None:
                raise
            reply = yield call.fallback
        return plan.finish(reply, self)

    def __repr__(self):
        where = self.url or "embedded"
        return f"<{type(self).__name__} {where} {'binary' if self.binary else 'json'}{' closed' if self.closed else ''}>"


def _advance(steps, answer, failed):
    """(the next call of a plan's steps, None) after sending it `answer` (or throwing it, when the
    exchange `failed`), or (None, the plan's result) once it is done."""
    try:
        return (steps.throw(answer) if failed else steps.send(answer)), None
    except StopIteration as done:
        return None, done.value


def _answer(outcome) -> Response:
    if isinstance(outcome, Retryable):
        raise outcome.error from None
    return outcome


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
                outcome = self._transport.request(method, path, content, headers)
            except Retryable as failure:
                outcome = failure
            wait = self.retry.wait(attempt, outcome, idempotent)
            if wait is None:
                return _answer(outcome)
            time.sleep(wait)
            attempt += 1

    def _execute_one(self, call: Call):
        body, headers = encode(call, self.binary)
        response = self._send("POST", call.path, body, headers, call.idempotent)
        return decode(response, self._where(call.path))

    def _exchange(self, call: Call):
        if not self.embedded:
            return self._execute_one(call)
        self._check_open()
        self.stats[call.path] += 1
        return self._transport.execute(call, self._where(call.path))

    def _attempt(self, call: Call):
        try:
            return self._exchange(call), False
        except ServerError as err:
            return err, True

    def run(self, plan):
        """Run a fetch/backward plan: at most one request (plus one to fetch a lazy gradient argument)."""
        steps = self._steps(plan)
        call, result = _advance(steps, None, False)
        while call is not None:
            call, result = _advance(steps, *self._attempt(call))
        return result

    # --- values and gradients --------------------------------------------------------------
    def fetch_values(self, values):
        self.run(FetchPlan(values))

    def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        lazy = [v._value for v in variables if v._data is None]
        if lazy:
            self.fetch_values(lazy)
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False):
        backward(*_backward_args(outputs, gradient), retain_graph, create_graph, session=self)

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
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
        context.remove(self)

    def __enter__(self):
        context.push(self)
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
                    outcome = await asyncio.to_thread(self._transport.request, method, path, content, headers)
                else:
                    outcome = await self._transport.request(method, path, content, headers)
            except Retryable as failure:
                outcome = failure
            wait = self.retry.wait(attempt, outcome, idempotent)
            if wait is None:
                return _answer(outcome)
            await asyncio.sleep(wait)
            attempt += 1

    async def _execute_one(self, call: Call):
        body, headers = encode(call, self.binary)
        response = await self._send("POST", call.path, body, headers, call.idempotent)
        return decode(response, self._where(call.path))

    async def _exchange(self, call: Call):
        if not self.embedded:
            return await self._execute_one(call)
        self._check_open()
        self.stats[call.path] += 1
        return await asyncio.to_thread(self._transport.execute, call, self._where(call.path))

    async def _attempt(self, call: Call):
        try:
            return await self._exchange(call), False
        except ServerError as err:
            return err, True

    async def run(self, plan):
        steps = self._steps(plan)
        call, result = _advance(steps, None, False)
        while call is not None:
            call, result = _advance(steps, *await self._attempt(call))
        return result

    async def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        lazy = [v._value for v in variables if v._data is None]
        if lazy:
            await self.run(FetchPlan(lazy))
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    async def item(self, variable):
        await self.fetch(variable)
        return variable.item()

    async def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False):
        await self.run(prepare_backward(*_backward_args(outputs, gradient), retain_graph, create_graph))

    async def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
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
    if isinstance(outputs, Variable):
        return [outputs], None if gradient is None else [gradient]
    return list(outputs), gradient


def _pairs(tensors):
    if isinstance(tensors, dict):
        tensors = tensors.items()
    return [(name, numpy.asarray(a)) for name, a in tensors]


# --- the default session -----------------------------------------------------------------------

current_session = context.current_session
context.set_default_factory(lambda: Session(os.environ.get("GRADSERVE_URL") or None))


def connect(url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, **options) -> Session:
    """A session for `url` (default: $GRADSERVE_URL; embedded when neither), made the default
    until closed. Options: retries, backoff, tapes, executor, transport, headers."""
    if url is None:
        url = os.environ.get("GRADSERVE_URL") or None
    session = Session(url, api_key=api_key, timeout=timeout, binary=binary, **options)
    context.push(session)
    return session


__all__ = ["Session", "AsyncSession", "connect", "current_session", "ServerError"]
