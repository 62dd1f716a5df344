"""Sessions: where a program's graphs are computed.

`connect("http://host:8000")` (or `$GRADSERVE_URL`) makes a remote session the default until it is closed; with
neither, the default is *embedded*: the same requests run in-process, with the same answers and errors.
Each operation is a generator without I/O: it yields what it needs done (`request`, `execute`, `sleep`, `settle`...) and
is sent the answer. `_Core._run` drives it, doing the I/O by `_perform`: `Session` at once, `AsyncSession` awaited.
A `Session` may leave up to PIPELINE_DEPTH operations in flight (those that yield `in_flight`: a resident
optimizer's steps): the next request of each is sent without waiting for the answers before it (`client.pipeline`,
or a background thread for an httpx transport) and the operation finishes when something needs its answer
(`_settle`: the next request, a value read, closing, a step past the depth), raising there what it would have
raised; the steps sent after one that failed are dropped (the server refused them: `wire.resident_update`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import itertools
import os
import sys
import time
import uuid
import weakref
from collections import Counter, OrderedDict
from typing import Any

import numpy
import orjson

from client import ops, state, transports
from client.autograd import backwarding, fetching
from client.errors import ConflictError, ConnectionFailed, NotFoundError, ServerError
from client.pipeline import Pipeline
from client.transports import Call
from client.variable import Variable
from engine.api import (
    backward_arguments,
    backward_inputs,
    batched_rows,
    check_unused,
    grad_arguments,
    profiling,
    stacked_rows,
    unused_rule,
)

DEFAULT_TIMEOUT = 120.0  # above the service's default compute_timeout_s (60 s), which answers 503
USER_AGENT = "gradserve-client/0.1"
MAX_PLAN_IDS = 256  # graphs whose plan ids a session remembers
MAX_TAPE_IDS = 128  # tapes a session remembers
PIPELINE_DEPTH = 2  # operations a Session leaves in flight at most


def _operation(steps):
    """A session method running the generator `steps` by the session's `_run` (an AsyncSession's: awaited)."""

    @functools.wraps(steps)
    def method(self, *args, **kwargs):
        return self._run(steps(self, *args, **kwargs))

    return method


class _Core:
    """What both sessions do; their I/O is a subclass's `_perform`."""

    def __init__(
        self,
        url=None,
        api_key=None,
        timeout=DEFAULT_TIMEOUT,
        binary=True,
        retries=transports.DEFAULT_RETRIES,
        backoff=0.1,
        max_backoff=5.0,
        max_retry_after=30.0,
        tapes=False,
        executor=None,
        transport=None,
        headers=None,
    ):
        if url and "://" not in url:
            url = "http://" + url
        self.url = url.rstrip("/") if url else None
        self.embedded = self.url is None
        self.binary = bool(binary)
        self.timeout = timeout
        self.tapes = bool(tapes)
        self.retry = transports.RetryPolicy(int(retries), backoff, max_backoff, max_retry_after)
        self.session_id = uuid.uuid4().hex
        self.stats = Counter()  # requests sent (attempts), by path
        self.closed = False
        self._in_flight: list = []  # [(an operation's coroutine, the Future of its request)]: sent, not yet answered
        self._tapes = OrderedDict()  # (ids of a backward's output Values) -> (tape id, graph text, weakrefs to them)
        self._plans = OrderedDict()  # graph text -> the plan id the server gave it
        self._written = OrderedDict()  # a program's key -> what its request's Builder wrote (client.serialize)
        api_key = os.environ.get("GRADSERVE_API_KEY") if api_key is None else api_key
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        headers = {"User-Agent": USER_AGENT, "X-GradServe-Session": self.session_id, **(headers or {}), **auth}
        if self.embedded:
            self._transport = transports.EmbeddedTransport(executor)
        else:
            self._transport = self._remote_transport(self.url, headers, timeout, transport)

    def _where(self, path):
        return f"{self.url}{path}" if self.url else f"embedded:{path}"

    def _check_open(self):
        if self.closed:
            raise RuntimeError(f"{self!r} is closed")

    def _sending(self, method, path, content=None, headers=None, idempotent=True):
        """The Response to one request, tried again as long as `self.retry` says; requests go in order (an
        operation in flight is finished first, unless this request is left in flight too)."""
        if self._in_flight and not getattr(self, "_leave", False):
            yield ("settle",)
        self._check_open()
        for attempt in itertools.count():
            self.stats[path] += 1
            try:
                outcome = yield "request", method, path, content, headers
            except ConnectionFailed as failure:
                outcome = failure
            wait = self.retry.wait(attempt, outcome, idempotent)
            if wait is None:
                if isinstance(outcome, ConnectionFailed):
                    raise outcome
                return outcome
            yield "sleep", wait

    def _calling(self, call: Call, raw=False):
        """The Reply to a call; embedded (unless `raw`), its tensors go to the executor as they are."""
        if self.embedded and not raw:
            self._check_open()
            self.stats[call.path] += 1
            return (yield "execute", call, self._where(call.path))
        body, headers = transports.encode(call, self.binary)
        response = yield from self._sending("POST", call.path, body, headers, call.idempotent)
        return transports.decode(response, self._where(call.path))

    def _exchanging(self, call: Call, outputs=()):
        """The Reply to a fetch's or a backward's call, with what the server holds of it sent in place of the graph:
        the tape the last backward of the same `outputs` (its Values, given when the session keeps `tapes`) and graph
        retained, else the plan id the server gave the graph. A lost plan or tape (404/409): the call itself is sent."""
        if not outputs and self.embedded:  # (no plan id, no tape: the graph itself, handed over)
            return (yield from self._calling(call))
        graph_text = orjson.dumps(call.header["graph"])
        key = tuple(map(id, outputs))
        tape = self._tapes.get(key)
        sent = call
        if tape is not None and tape[1] == graph_text and all(ref() is v for ref, v in zip(tape[2], outputs)):
            rest = {k: v for k, v in call.header.items() if k != "graph"}
            sent = Call(call.path, {"tape": tape[0], **rest}, [], call.grad_outputs, False, call.upload)
        elif graph_text in self._plans:
            rest = {k: v for k, v in call.header.items() if k != "graph"}
            plan = {**rest, "plan": self._plans[graph_text]}
            sent = Call(call.path, plan, call.inputs, call.grad_outputs, call.idempotent, call.upload)
        try:
            reply = yield from self._calling(sent)
        except (NotFoundError, ConflictError):
            if sent is call:
                raise
            self._plans.pop(graph_text, None)
            reply = yield from self._calling(call)
        if graph_text is not None and reply.body.get("plan"):
            self._plans[graph_text] = reply.body["plan"]
            self._plans.move_to_end(graph_text)
            while len(self._plans) > MAX_PLAN_IDS:
                self._plans.popitem(last=False)
        if outputs and reply.tape is None:
            self._tapes.pop(key, None)
        elif outputs:
            self._tapes[key] = (reply.tape, graph_text, [weakref.ref(v) for v in outputs])
            while len(self._tapes) > MAX_TAPE_IDS:
                self._tapes.popitem(last=False)
        return reply

    async def _run(self, steps):
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

    # --- the operations ---------------------------------------------------------------------------
    @_operation
    def fetch(self, *variables):
        """The values of Variables, computed in one /forward (cached on them)."""
        yield from fetching(self, [v._value for v in variables if v._data is None])
        arrays = [v._array() for v in variables]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    fetch_values = _operation(fetching)  # client.graph.Values: what a Variable needing its value asks for

    @_operation
    def backward(self, outputs, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradients of `outputs` (one Variable, or a list) into the leaves' `.grad` (into
        those of `inputs` only, leaves or not, when given)."""
        if isinstance(outputs, Variable):
            outputs, gradient = [outputs], None if gradient is None else [gradient]
        outputs, seeds = backward_arguments(list(outputs), gradient, Variable)
        inputs = backward_inputs(inputs, Variable)
        yield from backwarding(self, outputs, seeds, retain_graph, inputs, create_graph, into_grad=True)

    def _grad(
        self,
        outputs,
        inputs,
        grad_outputs=None,
        retain_graph=None,
        create_graph=False,
        allow_unused=None,
        materialize_grads=False,
        is_grads_batched=False,
    ):
        """The gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
        zeros = lambda v: Variable(numpy.zeros(v.shape, v.dtype), create_graph)  # noqa: E731
        allow_unused = unused_rule(allow_unused, materialize_grads)
        if is_grads_batched:
            outputs, inputs, rows = batched_rows(outputs, inputs, grad_outputs)
            results = []
            for r, row in enumerate(rows):
                retain = retain_graph if r == len(rows) - 1 else True
                results.append((yield from self._grad(outputs, inputs, row, retain, create_graph, True)))
            return stacked_rows(results, ops.stacked, zeros, inputs, allow_unused, materialize_grads)
        outputs, inputs, seeds = grad_arguments(outputs, inputs, grad_outputs, Variable)
        grads = yield from backwarding(self, outputs, seeds, retain_graph, inputs, create_graph)
        return check_unused(grads, allow_unused, (lambda i: zeros(inputs[i])) if materialize_grads else None)

    grad = _operation(_grad)

    @_operation
    def send(self, path, header: dict, inputs=(), grad_outputs=()):
        """POST a protocol request (header without tensors; tensors as {name: array} or pairs).
        Returns a `client.transports.Reply` (`.outputs`, `.grads`, `.tape`, `.body`); errors raise ServerError."""
        return (yield from self._calling(Call(path, dict(header), _pairs(inputs), _pairs(grad_outputs)), raw=True))

    @_operation
    def post(self, path, content=b"", headers=None, json=None):
        """POST raw bytes (or a JSON object); the Response as is, errors included (not raised)."""
        if json is not None:
            content, headers = orjson.dumps(json), {"Content-Type": "application/json", **(headers or {})}
        return (yield from self._sending("POST", path, content, headers or {}))

    @_operation
    def get(self, path):
        """GET `path`; the Response as is."""
        return (yield from self._sending("GET", path))

    def __repr__(self):
        encoding = "binary" if self.binary else "json"
        return f"<{type(self).__name__} {self.url or 'embedded'} {encoding}{' closed' if self.closed else ''}>"


class Session(_Core):
    """A synchronous session: the default one computes every Variable's value and gradient."""

    _remote_transport = staticmethod(transports.http_transport)

    _leave = False  # the next request is left in flight (the operation yielded `in_flight`)
    _sender = None  # the thread that sends a request left in flight (an httpx transport's)
    _pipeline = None  # the connection requests left in flight go on (`client.pipeline`), for http.client's

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self._transport, transports.PlainHttpTransport):
            self._pipeline = Pipeline(self._transport)

    def _run(self, steps):
        """Run the operation `steps`: `_perform` does the work at once, so one send finishes the coroutine,
        unless the operation left a request in flight: then it waits for its answer (`_settle`) and `_run`
        returns None."""
        coroutine = super()._run(steps)
        try:
            waiting = coroutine.send(None)
        except StopIteration as done:
            return done.value
        finally:
            self._leave = False
        self._in_flight.append((coroutine, waiting.future))
        return None

    def _settle(self, keep: int = 0) -> None:
        """Finish the operations left in flight, oldest first, until `keep` are left and the oldest has no
        answer yet: wait for each answer, then run the rest of it (its error, the server's or the
        connection's, is raised here, and the operations sent after it are dropped: the server refuses a
        step whose step before it failed)."""
        while self._in_flight and (len(self._in_flight) > keep or self._in_flight[0][1].done()):
            coroutine, future = self._in_flight.pop(0)
            try:
                answer = future.result()
            except Exception as err:  # noqa: BLE001 - thrown into the operation, as `_perform` would
                resume = functools.partial(coroutine.throw, err)
            else:
                resume = functools.partial(coroutine.send, answer)
            leave, self._leave = self._leave, False  # (its own requests, a retry's, are not left in flight)
            try:
                resume()
            except StopIteration:
                pass
            except BaseException as err:
                dropped, self._in_flight = self._in_flight, []
                for later, _ in dropped:
                    later.close()
                if dropped:
                    err.add_note(f"gradserve: the {len(dropped)} optimizer step(s) sent after it were not applied")
                raise
            finally:
                self._leave = leave

    def _settle_at_exit(self) -> None:
        """A program that ends with a step in flight and its session open (the default session, say) still
        waits for that step's answer, and says on stderr if the server refused it."""
        try:
            self._settle()
        except Exception as err:  # noqa: BLE001 - nothing is left to raise it to
            sys.stderr.write(f"gradserve: the optimizer step left in flight at exit failed: {err}\n")

    async def _perform(self, action, *args):
        if action == "settle":
            return self._settle(*args)
        if action == "in_flight":  # its next request is sent without waiting for the answer
            self._leave = True
            return None
        if action == "request" and self._leave:
            self._leave = False
            if self._sender is None:
                self._sender = concurrent.futures.ThreadPoolExecutor(1, "gradserve-sender")
                atexit.register(self._settle_at_exit)
            if self._pipeline is not None:
                return await _Answer(self._pipeline.submit(*args))
            return await _Answer(self._sender.submit(self._transport.request, *args))
        if profiling.REQUESTS and action in ("request", "execute"):  # a client-side profile runs: timed as events
            name = f"{args[0]} {args[1]}" if action == "request" else f"execute {args[0].path}"
            return profiling.request(name, functools.partial(getattr(self._transport, action), *args))
        return (time.sleep if action == "sleep" else getattr(self._transport, action))(*args)

    def healthz(self) -> dict:
        return self._answer("/healthz").json()

    def info(self) -> dict:
        return self._answer("/info").json()

    def metrics(self) -> str:
        return self._answer("/metrics").content.decode()

    def _answer(self, path) -> transports.Response:
        return transports.raise_for_error(self.get(path), self._where(path))

    def close(self):
        if not self.closed:
            try:
                self._settle()
            finally:
                self.closed = True
                if self._sender is not None:
                    atexit.unregister(self._settle_at_exit)
                    self._sender.shutdown()
                if self._pipeline is not None:
                    self._pipeline.close()
                self._transport.close()
        state.remove(self)

    def __enter__(self):
        state.push(self)
        return self

    def __exit__(self, *exc):
        self.close()


class _Answer:
    """Awaited for a request left in flight: `Session._run` gets it (and its Future) from the suspended
    coroutine, `Session._settle` sends the answer in (or throws the failure)."""

    def __init__(self, future):
        self.future = future

    def __await__(self):
        return (yield self)


class AsyncSession(_Core):
    """An asyncio session. Variables record as usual; values and gradients come from awaiting:

    async with AsyncSession("http://127.0.0.1:8000") as s:
        loss = (x.mm(w) - y).pow(2).sum()
        print(await s.item(loss))
        await s.backward(loss)        # fills w.grad
    """

    _remote_transport = transports.AsyncHttpTransport

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


def connect(
    url: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    binary: bool = True,
    **options: Any,
) -> Session:
    """A session for `url` (default: $GRADSERVE_URL; embedded when neither), made the default
    until closed. Options: retries, backoff, tapes, executor, transport, headers."""
    url = (os.environ.get("GRADSERVE_URL") or None) if url is None else url
    session = Session(url, api_key=api_key, timeout=timeout, binary=binary, **options)
    state.push(session)
    return session


__all__ = ["AsyncSession", "ServerError", "Session", "connect", "current_session"]
