"""Sessions: where a program's graphs are computed.

`connect("http://host:8000")` (or `GRADSERVE_URL`) selects a remote service; with neither, the
default session is *embedded*: the same requests run in-process (`client.transports`), so every
program also runs offline and gets the same answers and the same errors. `connect()` makes its
session the default until it is closed (it is a context manager); closing restores the previous
default. `AsyncSession` is the asyncio flavour: `await s.fetch(v)`, `await s.backward(loss)`.

Both are thin shells over one core written without I/O: each operation is a generator that
yields what it needs done (`request`, `execute` or `sleep`) and is sent the answer (or thrown
the error). One loop (`_Core._drive`) runs it; the I/O is each session's `_perform`: `Session`
does it at once, `AsyncSession` awaits it. Retries follow the one `RetryPolicy`; a lost tape
(404/409) is answered by the call's stateless fallback.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time
import uuid
from collections import Counter, OrderedDict

import numpy
import orjson

from client import state
from client.autograd import BackwardPlan, FetchPlan
from client.errors import ConflictError, NotFoundError, ServerError
from client.transports import (
    DEFAULT_RETRIES,
    AsyncHttpTransport,
    Call,
    EmbeddedTransport,
    Response,
    Retryable,
    RetryPolicy,
    decode,
    encode,
    http_transport,
    raise_for_error,
)
from client.variable import Variable
from engine.autograd import backward_arguments, check_unused, grad_arguments

DEFAULT_TIMEOUT = 120.0  # above the service's default compute_timeout_s (60 s), which answers 503
USER_AGENT = "gradserve-client/0.1"
MAX_PLAN_IDS = 256  # graphs whose plan ids a session remembers


class _Core:
    """What both sessions do; the generators' steps are run by `_drive`, their I/O done by a subclass's `_perform`."""

    def __init__(self, url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, retries=DEFAULT_RETRIES,
                 backoff=0.1, max_backoff=5.0, max_retry_after=30.0, tapes=False, executor=None, transport=None,
                 headers=None):
        if url and "://" not in url:
            url = "http://" + url
        self.url, self.binary, self.timeout, self.tapes = url.rstrip("/") if url else None, bool(binary), timeout, bool(tapes)
        self.retry = RetryPolicy(int(retries), backoff, max_backoff, max_retry_after)
        self.session_id = uuid.uuid4().hex
        self.stats = Counter()  # requests sent (attempts), by path
        self.closed = False
        self._tapes = OrderedDict()  # (output values) -> (tape id, graph fingerprint, output refs): `client.autograd`
        self._plans = OrderedDict()  # graph text -> the plan id the server gave it (sent instead of the graph)
        self._headers = {"User-Agent": USER_AGENT, "X-GradServe-Session": self.session_id, **(headers or {})}
        if api_key is None and self.url is not None:
            api_key = os.environ.get("GRADSERVE_API_KEY") or None
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = EmbeddedTransport(executor) if self.url is None else \
            self._remote_transport(self.url, self._headers, timeout, transport)

    @property
    def embedded(self) -> bool:
        return self.url is None

    def _where(self, path):
        return f"{self.url}{path}" if self.url else f"embedded:{path}"

    def _check_open(self):
        if self.closed:
            raise RuntimeError(f"{self!r} is closed")

    def _sending(self, method, path, content=None, headers=None, idempotent=True):
        """The Response to one request, tried again as long as `self.retry` says."""
        self._check_open()
        for attempt in itertools.count():
            self.stats[path] += 1
            try:
                outcome = yield "request", method, path, content, headers
            except Retryable as failure:
                outcome = failure
            wait = self.retry.wait(attempt, outcome, idempotent)
            if wait is None:
                if isinstance(outcome, Retryable):
                    raise outcome.error from None
                return outcome
            yield "sleep", wait

    def _calling(self, call: Call, raw=False):
        """The Reply to a call; embedded (unless `raw`), its tensors go to the executor as they are."""
        if self.embedded and not raw:
            self._check_open()
            self.stats[call.path] += 1
            return (yield "execute", call, self._where(call.path))
        body, headers = encode(call, self.binary)
        response = yield from self._sending("POST", call.path, body, headers, call.idempotent)
        return decode(response, self._where(call.path))

    def _running(self, plan):
        """A fetch/backward plan's result: at most one call (plus one to fetch a lazy gradient argument)."""
        pre = plan.prefetch()
        if pre is not None:
            yield from self._running(pre)
        call = plan.call(self)
        if call is None:
            return plan.finish(None, self)
        graph_text = None if self.embedded or "graph" not in call.header else orjson.dumps(call.header["graph"])
        call = self._by_plan_id(call, graph_text)
        try:
            reply = yield from self._calling(call)
        except (NotFoundError, ConflictError):
            if call.fallback is None:
                raise
            self._plans.pop(graph_text, None)
            reply = yield from self._calling(call.fallback)
        self._learn_plan_id(graph_text, reply)
        return plan.finish(reply, self)

    def _by_plan_id(self, call: Call, graph_text) -> Call:
        """The call with the plan id the server gave its graph in place of the graph (falling
        back to the call itself), when there is one."""
        if graph_text not in self._plans:
            return call
        header = {k: v for k, v in call.header.items() if k != "graph"}
        return Call(call.path, {**header, "plan": self._plans[graph_text]}, call.inputs, call.grad_outputs,
                    fallback=call, idempotent=call.idempotent)

    def _learn_plan_id(self, graph_text, reply):
        if graph_text is not None and reply.body.get("plan"):
            self._plans[graph_text] = reply.body["plan"]
            self._plans.move_to_end(graph_text)
            while len(self._plans) > MAX_PLAN_IDS:
                self._plans.popitem(last=False)

    async def _drive(self, steps):
        """An operation's result: what each step needs done is `_perform`ed (the subclass's I/O)
        and the outcome sent back to the steps (an error thrown into them)."""
        answer, failed = None, False
        while True:
            try:
                what = steps.throw(answer) if failed else steps.send(answer)
            except StopIteration as done:
                return done.value
            try:
                answer, failed = await self._perform(*what), False
            except Exception as err:  # noqa: BLE001 - thrown into the steps, which may handle it
                answer, failed = err, True

    # --- the operations, each driven by both sessions ------------------------------------------
    def run(self, plan):
        """Run a fetch/backward plan."""
        return self._running(plan)

    def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        lazy = [v._value for v in variables if v._data is None]
        if lazy:
            yield from self._running(FetchPlan(lazy))
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False):
        """Accumulate the gradients of `outputs` (one Variable, or a list) into the leaves' `.grad`."""
        if isinstance(outputs, Variable):
            outputs, gradient = [outputs], None if gradient is None else [gradient]
        outputs, seeds = backward_arguments(list(outputs), gradient, Variable)
        return self._running(BackwardPlan(outputs, seeds, retain_graph, None, create_graph))

    def grad(self, outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
        """The gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
        outputs, inputs, seeds = grad_arguments(outputs, inputs, grad_outputs, Variable)
        plan = BackwardPlan(outputs, seeds, retain_graph, inputs, create_graph)
        return check_unused((yield from self._running(plan)), allow_unused)

    def send(self, path, header: dict, inputs=(), grad_outputs=()):
        """POST a protocol request (header without tensors; tensors as {name: array} or pairs).
        Returns a `client.wire.Reply` (`.outputs`, `.grads`, `.tape`, `.body`); errors raise ServerError."""
        return self._calling(Call(path, dict(header), _pairs(inputs), _pairs(grad_outputs)), raw=True)

    def post(self, path, content=b"", headers=None, json=None):
        """POST raw bytes (or a JSON object); the Response as is, errors included (not raised)."""
        if json is not None:
            content, headers = orjson.dumps(json), {"Content-Type": "application/json", **(headers or {})}
        return self._sending("POST", path, content, headers or {})

    def get(self, path):
        """GET `path`; the Response as is."""
        return self._sending("GET", path)

    def __repr__(self):
        where = self.url or "embedded"
        return f"<{type(self).__name__} {where} {'binary' if self.binary else 'json'}{' closed' if self.closed else ''}>"


def _sync(operation):
    @functools.wraps(operation)
    def method(self, *args, **kwargs):
        try:  # a Session's `_drive` never waits (its `_perform` does the work at once): one send finishes it
            self._drive(operation(self, *args, **kwargs)).send(None)
        except StopIteration as done:
            return done.value
    return method


def _async(operation):
    @functools.wraps(operation)
    async def method(self, *args, **kwargs):
        return await self._drive(operation(self, *args, **kwargs))
    return method


OPERATIONS = ("run", "fetch", "backward", "grad", "send", "post", "get")


class Session(_Core):
    """A synchronous session: the default one computes every Variable's value and gradient."""

    _remote_transport = staticmethod(http_transport)
    run, fetch, backward, grad, send, post, get = (_sync(getattr(_Core, name)) for name in OPERATIONS)

    async def _perform(self, action, *args):
        return (time.sleep if action == "sleep" else getattr(self._transport, action))(*args)

    def fetch_values(self, values):
        self.run(FetchPlan(values))

    def healthz(self) -> dict:
        return self._answer("/healthz").json()

    def info(self) -> dict:
        return self._answer("/info").json()

    def metrics(self) -> str:
        return self._answer("/metrics").content.decode()

    def _answer(self, path) -> Response:
        return raise_for_error(self.get(path), self._where(path))

    def close(self):
        if not self.closed:
            self.closed = True
            self._transport.close()
        state.remove(self)

    def __enter__(self):
        state.push(self)
        return self

    def __exit__(self, *exc):
        self.close()


class AsyncSession(_Core):
    """An asyncio session. Variables record as usual; values and gradients come from awaiting:

        async with AsyncSession("http://127.0.0.1:8000") as s:
            loss = (x.mm(w) - y).pow(2).sum()
            print(await s.item(loss))
            await s.backward(loss)        # fills w.grad
    """

    _remote_transport = AsyncHttpTransport
    run, fetch, backward, grad, send, post, get = (_async(getattr(_Core, name)) for name in OPERATIONS)

    async def _perform(self, action, *args):
        if action == "sleep":
            return await asyncio.sleep(*args)
        act = getattr(self._transport, action)
        return await (asyncio.to_thread(act, *args) if self.embedded else act(*args))

    async def item(self, variable):
        await self.fetch(variable)
        return variable.item()

    async def aclose(self):
        if not self.closed:
            self.closed = True
            if not self.embedded:
                await self._transport.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


def _pairs(tensors):
    if isinstance(tensors, dict):
        tensors = tensors.items()
    return [(name, numpy.asarray(a)) for name, a in tensors]


# --- the default session -----------------------------------------------------------------------

current_session = state.current_session
state.set_default_factory(lambda: Session(os.environ.get("GRADSERVE_URL") or None))


def connect(url=None, api_key=None, timeout=DEFAULT_TIMEOUT, binary=True, **options) -> Session:
    """A session for `url` (default: $GRADSERVE_URL; embedded when neither), made the default
    until closed. Options: retries, backoff, tapes, executor, transport, headers."""
    url = (os.environ.get("GRADSERVE_URL") or None) if url is None else url
    session = Session(url, api_key=api_key, timeout=timeout, binary=binary, **options)
    state.push(session)
    return session


__all__ = ["AsyncSession", "ServerError", "Session", "connect", "current_session"]
