"""Reading request bodies: within their size limit (JSON bodies have a smaller one than binary
ones), within `body_timeout_s`, and within the server-wide budget of body bytes held at once."""

from __future__ import annotations

import asyncio
import ctypes
import sys
import threading
from types import CoroutineType

import numpy

from service.connections import whole_body
from service.errors import ApiError
from wire.codec import HEADER_LENGTH
from wire.limits import Limits

CLOSE = {"Connection": "close"}
HEADER_LENGTH_NAME = HEADER_LENGTH.lower()


class BodyBudget:
    """Bytes of request bodies held at once (`max_inflight_body_bytes`), all requests together and per
    peer (`max_peer_inflight_body_bytes`: one client address cannot take the whole budget). A body is
    counted as its bytes arrive, not by what its Content-Length declares, so connections that declare
    large bodies and send nothing hold nothing; they are closed after `idle_s` without a byte."""

    def __init__(self, capacity: int, peer_share: int | None = None, idle_s: float = 10.0):
        self.capacity = capacity
        self.peer_share = capacity if peer_share is None else min(peer_share, capacity)
        self.idle_s = idle_s
        self.held = 0
        self.refused = 0
        self.by_peer: dict = {}
        self._lock = threading.Lock()

    def take(self, n: int, peer=None) -> str | None:
        """None when `n` more bytes fit; else which bound refused them ("all" or "peer")."""
        with self._lock:
            mine = self.by_peer.get(peer, 0)
            if self.held + n > self.capacity or mine + n > self.peer_share:
                self.refused += 1
                return "all" if self.held + n > self.capacity else "peer"
            self.held += n
            self.by_peer[peer] = mine + n
            return None

    def give_back(self, n: int, peer=None) -> None:
        with self._lock:
            self.held -= n
            left = self.by_peer.get(peer, 0) - n
            if left > 0:
                self.by_peer[peer] = left
            else:
                self.by_peer.pop(peer, None)


class BodyHold:
    """One request's share of the BodyBudget, as its client `peer`'s; `release()` when the request ends."""

    __slots__ = ("budget", "bytes", "peer", "received")

    def __init__(self, budget: BodyBudget, peer=None):
        self.budget, self.bytes, self.peer = budget, 0, peer
        self.received = 0  # body bytes that came in so far

    def check(self, n: int) -> None:
        """413 when a body of `n` bytes could never fit the budget (its Content-Length, before any byte)."""
        if n > self.budget.peer_share:
            share = self.budget.peer_share < self.budget.capacity
            raise ApiError(
                413,
                f"the request body needs {n} bytes, over the server's "
                + (
                    f"budget for one client's bodies (max_peer_inflight_body_bytes={self.budget.peer_share})"
                    if share
                    else f"whole budget for bodies (max_inflight_body_bytes={self.budget.capacity})"
                ),
                field="body",
                headers=CLOSE,
            )

    def grow(self, n: int) -> None:
        if self.bytes + n > self.budget.peer_share:
            self.check(self.bytes + n)
        refused = self.budget.take(n, self.peer)
        if refused is not None:
            setting = "max_inflight_body_bytes" if refused == "all" else "max_peer_inflight_body_bytes"
            who = "too many request bodies at once" if refused == "all" else "too many request bodies from this client"
            raise ApiError(
                503,
                f"the server is receiving {who} ({setting}={getattr(self.budget, 'capacity' if refused == 'all' else 'peer_share')}); retry shortly",
                field="body",
                headers={"Retry-After": "1", **CLOSE},
            )
        self.bytes += n

    def release(self) -> None:
        self.budget.give_back(self.bytes, self.peer)
        self.bytes = 0


def peer_of(scope) -> str | None:
    """The client address of an ASGI scope (the host, without its port)."""
    client = scope.get("client")
    return client[0] if client else None


def body_limit(limits: Limits, head_length: int | None) -> tuple[int, str]:
    """(limit, its setting's name) of a body: binary-extension bodies may be larger than JSON ones."""
    if head_length is None and limits.max_json_body_bytes < limits.max_body_bytes:
        return limits.max_json_body_bytes, "max_json_body_bytes"
    return limits.max_body_bytes, "max_body_bytes"


def _check_json_header(limits: Limits, head_length: int | None, total: int) -> None:
    """The JSON header of a binary body is parsed in one piece too: it has the JSON bound. (A
    header length past the body's end is a framing error, answered 400 when the body is split.)"""
    if head_length is not None and limits.max_json_body_bytes < head_length <= total:
        raise ApiError(
            413,
            f"the binary body's JSON header is {head_length} bytes, over the limit of "
            f"{limits.max_json_body_bytes} bytes for JSON (max_json_body_bytes); send tensors as binary "
            "data, not in the header",
            field=HEADER_LENGTH,
        )


def _too_large(limit: int, name: str, what: str) -> ApiError:
    hint = ""
    if name == "max_json_body_bytes":
        hint = (
            f"; JSON bodies are parsed in one piece, so they have a smaller limit: send large tensors with the binary "
            f"extension (Content-Type: application/octet-stream and an {HEADER_LENGTH} header)"
        )
    return ApiError(
        413, f"the request body {what} the limit of {limit} bytes ({name}){hint}", field="body", headers=CLOSE
    )


def declared_length(headers, limit: int, name: str = "max_body_bytes") -> int | None:
    """The Content-Length, refused with 413 when it is over `limit` (before any byte is read)."""
    declared = headers.get("content-length")
    if declared is None:
        return None
    try:
        length = int(declared)
    except ValueError:
        raise ApiError(400, f"Content-Length is not an integer: {declared!r}", field="Content-Length") from None
    if length > limit:
        raise _too_large(limit, name, f"declares {length} bytes, over")
    return length


async def read_body(
    receive, headers, limits: Limits, head_length: int | None, hold: BodyHold, timeout_s: float
) -> bytes | memoryview | bytearray:
    """The raw body from ASGI `receive`. Refused with 413 before reading when its Content-Length is
    over its limit, and while reading (chunked or lying streams) as soon as the bytes pass it; with
    503 when the server-wide body budget has no room for it; with 408 when it has not all arrived
    within `timeout_s`. Its bytes are counted in `hold` (the caller releases it). `headers`: a
    mapping of lower-case names (`request_headers`, or Starlette's Headers)."""
    limit, name = body_limit(limits, head_length)
    declared = declared_length(headers, limit, name)
    if declared and declared > hold.budget.peer_share:
        hold.check(declared)  # reserved as it arrives, not up front: a declared body sent by no one holds nothing
    body, total = None, 0
    idle_s = hold.budget.idle_s
    end = None  # when the whole body's time is up: timed from the first wait (a body already received is not)
    whole = whole_body(receive)  # uvicorn's, all there already: taken without a copy or a coroutine
    while True:
        ready, message = _start(receive()) if whole is None else (True, whole)
        whole = None
        if not ready:  # it waits: one timer, the idle bound, or the whole body's when it comes first
            end = end or asyncio.get_running_loop().time() + timeout_s
            wait = Deadline(idle_s, end)
            try:
                with wait:
                    message = await message
            except TimeoutError:
                if wait.when >= end:
                    raise ApiError(
                        408,
                        f"the request body did not arrive within body_timeout_s={timeout_s:g} s ({total} bytes came)",
                        field="body",
                        headers=CLOSE,
                    ) from None
                raise ApiError(
                    408,
                    f"the request body stalled: no byte for body_idle_timeout_s={idle_s:g} s ({total} bytes came)",
                    field="body",
                    headers=CLOSE,
                ) from None
        if message["type"] == "http.disconnect":
            raise ApiError(400, "the client disconnected before sending the whole body", field="body")
        chunk = message.get("body", b"")
        end_byte = total + len(chunk)
        hold.received = end_byte
        if end_byte > limit:
            raise _too_large(limit, name, "is over")
        if end_byte > hold.bytes:
            hold.grow(end_byte - hold.bytes)
        if declared is not None and end_byte > declared:
            raise ApiError(400, f"the body is longer than its Content-Length {declared}", field="body")
        more = message.get("more_body", False)
        if body is None:
            if not more:  # the whole body in one message: kept as it came, no copy
                body, total = chunk, end_byte
                break
            # one buffer filled in place, never zero-filled nor joined (each would hold the
            # GIL for a pass over the whole body); a chunked body grows a bytearray
            body = _buffer(declared, head_length) if declared else bytearray()
        if isinstance(body, bytearray):
            body += chunk
        else:
            body[total:end_byte] = chunk
        total = end_byte
        if not more:
            break
    if total < len(body):
        body = body[:total]
    _check_json_header(limits, head_length, total)
    return body


def _start(awaitable) -> tuple:
    """Run `awaitable` (a `receive()`) up to its first wait: (True, its result) when it finished without
    waiting, a body already received (no timer is armed for it: ~2-3 µs of a small request); else (False,
    the rest of it to await)."""
    if type(awaitable) is not CoroutineType:
        return False, awaitable
    try:
        waiting_for = awaitable.send(None)
    except StopIteration as done:
        return True, done.value
    return False, _finish(awaitable, waiting_for)


async def _finish(coro, waiting_for):
    """The result of a coroutine `_start` ran up to its first wait, awaited as asyncio's Task would go
    on: each future it waits for awaited here (a bare yield is one pass of the loop), then it is resumed,
    with the error (a cancellation of this task too) thrown into it when the wait raised."""
    while True:
        try:
            if waiting_for is None:
                await asyncio.sleep(0)
            else:
                waiting_for._asyncio_future_blocking = False  # taken, as a Task takes it, then awaited here
                await waiting_for
        except BaseException as exc:  # noqa: BLE001 - the coroutine's to handle, as a Task would throw it
            resume, value = coro.throw, exc
        else:
            resume, value = coro.send, None
        try:
            waiting_for = resume(value)
        except StopIteration as done:
            return done.value


HEAP_TOP_PAD = 32 * 2**20  # bytes glibc keeps at a heap's top (M_TOP_PAD), see `keep_heap_pad`...
MMAP_THRESHOLD = 32 * 2**20  # ... and the smallest block it maps by itself (M_MMAP_THRESHOLD; glibc's largest)
M_TOP_PAD, M_MMAP_THRESHOLD = -2, -3  # glibc's mallopt parameters


def keep_heap_pad(pad: int = HEAP_TOP_PAD, threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc keep `pad` bytes of a heap mapped when it grows or trims it (M_TOP_PAD), and take
    blocks under `threshold` bytes from its heaps (M_MMAP_THRESHOLD); whether it could. A request
    allocates and frees blocks of 128 KiB to tens of MiB (a body, its parsed lists and arrays, an
    answer's text; orjson's parse of a JSON body takes ~12x its size at once): by default the heap's
    top is given back after each (above the 128 KiB trim threshold) and faulted in again by the
    next, ~0.6 ms of page faults per MiB on a VM. Setting
    the pad turns off glibc's sliding mmap threshold, which otherwise rises to the largest block
    freed so far: without a threshold set too, every block over 128 KiB is then a fresh mapping,
    zero-filled page by page and unmapped when freed (a seed-net JSON request: ~1,100 page faults,
    ~20% of its CPU). The pad bounds what a heap keeps; blocks of 32 MiB or more (a 64 MiB tensor)
    are mapped and given back whole."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
        return bool(mallopt(M_TOP_PAD, pad)) and bool(mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False


ALIGN = 64  # where a binary body's tensor bytes start in the buffer it is read into


def _buffer(declared: int, head_length: int | None) -> memoryview:
    """An uninitialised buffer of `declared` bytes in which a binary body's tail (its tensors' bytes,
    after the `head_length` bytes of its JSON header) starts ALIGN-aligned: its tensors are then used
    in place (`wire.codec` copies one that is not aligned for its dtype, a pass over its bytes)."""
    if head_length is None or not 0 <= head_length <= declared:
        return memoryview(numpy.empty(declared, numpy.uint8))
    raw = numpy.empty(declared + ALIGN, numpy.uint8)
    start = -(raw.ctypes.data + head_length) % ALIGN
    return memoryview(raw[start : start + declared])


DRAIN_BYTES = 64 * 2**20  # the longest rest of a refused body read (and dropped) after its early answer...
DRAIN_SECONDS = 2.0  # ... and for how long


async def drain(receive, headers, received: int, limit: int = DRAIN_BYTES, seconds: float = DRAIN_SECONDS) -> bool:
    """Read and drop the rest of a body refused before it was read whole (`received` bytes of it came), when
    its Content-Length says that rest is at most `limit` bytes, within `seconds`: whether it all came. The
    answer is already out: a client that sends its whole body before reading (http.client, httpx) then
    finishes and reads it, where closing at once resets its upload, and an asyncio client loses an answer
    its reset connection had received. Nothing is read of a body without a length (a stream is not read
    past its limit), of a longer one (closed at once), nor when the client sent `Expect: 100-continue`
    (it sends no body unless asked, and reading would ask)."""
    declared = headers.get("content-length", "")
    if (
        not declared.isdigit()
        or int(declared) - received > limit
        or "100-continue" in headers.get("expect", "").lower()
    ):
        return False
    try:
        with Deadline(seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return False
                if not message.get("more_body", False):
                    return True
    except TimeoutError:
        pass
    return False


class Deadline:
    """`asyncio.timeout(delay)` for the awaits of the current task, as a plain context manager on
    one timer handle: the same protocol (the timer cancels the task; leaving with that
    cancellation raises TimeoutError, unless the task was also cancelled from elsewhere), at
    ~1.9 µs instead of ~5.1 µs on uvloop (asyncio.timeout builds a Timeout and looks the loop up
    three times): ~4% of a tiny request's instructions. `until`: a loop time it expires at, at
    the latest; `when`: the loop time it expires at."""

    __slots__ = ("cancelling", "expired", "handle", "task", "when")

    def __init__(self, delay: float, until: float | None = None):
        self.task = task = asyncio.current_task()
        self.cancelling = task.cancelling()
        self.expired = False
        loop = task.get_loop()
        when = loop.time() + delay
        self.when = when if until is None or when < until else until
        self.handle = loop.call_at(self.when, self._expire)

    def _expire(self) -> None:
        self.expired = True
        self.task.cancel()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.handle.cancel()
        if self.expired and exc_type is asyncio.CancelledError and self.task.uncancel() <= self.cancelling:
            raise TimeoutError from exc
        return False


def request_headers(scope) -> dict:
    """A request's headers as {lower-case name: value} (latin-1 text; the first of repeated ones,
    as Starlette's Headers.get gives): one pass over the ASGI scope's list."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope["headers"])}


def header_length(headers) -> int | None:
    """The JSON header's length for a binary-extension body (None for a plain JSON body)."""
    value = headers.get(HEADER_LENGTH_NAME)
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise ApiError(400, f"{HEADER_LENGTH} must be a non-negative integer, got {value!r}", field=HEADER_LENGTH)
    return int(text)
