"""Connections a slow or hostile client cannot pile up: uvicorn's HTTP/1.1 protocol with a cap on
open connections, a deadline on each request's line and headers, and a bound on their size.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`), but it arms no timer while a
request's headers trickle in, its `limit_concurrency` answers 503 only once headers are complete,
leaving the socket open, and its httptools protocol keeps every header byte a client sends. So
here: a connection over `max_connections` is answered 503 and closed as soon as it is accepted;
one whose request line and headers have not all arrived `header_timeout_s` after it opened (or
after its previous response) gets 408 and is closed; and one whose line and headers pass
MAX_HEADER_BYTES before they end gets 431 and is closed. Body reads have their own deadline
(service/body.py).

`BoundedProtocol` is these on uvicorn's httptools protocol (a C parser: a small request costs
~150 µs of CPU less than on its pure-Python h11 one), or on its h11 protocol where httptools is
not installed.
"""

from __future__ import annotations

import functools

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import error_body

MAX_HEADER_BYTES = 16 * 1024  # h11's own bound on an incomplete request line and headers
LINGER_S = 2.0  # how long a closed connection's unread upload is read and dropped (nginx's lingering_close)


class _LingeringTransport:
    """The transport uvicorn's protocol writes to, whose `close()` lingers: a client still uploading a
    body the server answered early (413, 401...) would get a reset that discards the answer before it
    reads it (asyncio does). So close half-closes (FIN after the answer), and what still arrives is
    dropped unparsed until the client closes or LINGER_S passes."""

    def __init__(self, transport, protocol):
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self.write, self.writelines = transport.write, transport.writelines  # not through __getattr__

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self.lingering or transport.is_closing() or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        transport.write_eof()
        transport.resume_reading()  # uvicorn may have paused it while its body buffer was full
        self._protocol.loop.call_later(LINGER_S, transport.close)

    def abort(self) -> None:
        """Close at once, without lingering (a connection refused before its request was read)."""
        self.lingering = True
        self._transport.close()


@functools.cache
def _settings():
    from service.settings import (
        Settings,  # the process's settings, from GRADSERVE_* (set by the CLI)
    )

    return Settings()


def _refusal(status: str, message: str) -> bytes:
    body = error_body(message)
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "retry-after: 1\r\nconnection: close\r\n\r\n"
    ).encode() + body


class _Bounds:
    """The bounds, mixed into one of uvicorn's HTTP/1.1 protocols (see the module doc)."""

    refused = 0  # connections closed at once, over max_connections or max_connections_per_peer (per process)
    by_peer: dict = {}  # open connections per client address (per process)
    headers_timed_out = 0
    headers_too_large = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = _settings()
        self.max_connections = settings.max_connections
        self.max_per_peer = settings.max_connections_per_peer
        self._peer = None
        self._counted = False  # whether this connection is in by_peer
        self.header_timeout_s = settings.header_timeout_s
        self._header_timer = None
        self._header_bytes = 0
        self._awaiting = None  # the cycle that was current when the header timer was armed

    def connection_made(self, transport) -> None:
        transport = _LingeringTransport(transport, self)
        super().connection_made(transport)
        peername = transport.get_extra_info("peername")
        peer = peername[0] if isinstance(peername, tuple) and peername else None
        count = self.by_peer.get(peer, 0) + 1
        if len(self.connections) > self.max_connections or count > self.max_per_peer:
            type(self).refused += 1
            which = (
                f"too many open connections (max_connections={self.max_connections})"
                if len(self.connections) > self.max_connections
                else f"too many open connections from this client (max_connections_per_peer={self.max_per_peer})"
            )
            transport.write(_refusal("503 Service Unavailable", f"{which}; retry shortly"))
            self.connections.discard(self)
            transport.abort()
            return
        self._peer, self._counted = peer, True
        self.by_peer[peer] = count
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.transport.lingering:
            return  # the rest of an upload the server has answered and closed: dropped unparsed
        cycle = self.cycle
        starting = self._header_timer is None and (cycle is None or cycle.response_complete)
        super().data_received(data)
        if starting:  # the next request on a kept-alive connection starts arriving: a timer unless this
            if self.cycle is not cycle:  # chunk brought its line and headers whole (no timer armed, ~3 µs)
                return
            self._arm_header_timer()
        elif self._header_timer is None:
            return
        elif self.cycle is not self._awaiting:
            self._disarm_header_timer()  # a new request's headers are complete
            return
        self._header_bytes += len(data)
        if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
            type(self).headers_too_large += 1
            self._disarm_header_timer()
            self.transport.write(
                _refusal(
                    "431 Request Header Fields Too Large",
                    f"the request line and headers are over {MAX_HEADER_BYTES} bytes",
                )
            )
            self.transport.abort()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm_header_timer()  # the keep-alive timer watches the idle connection now

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        if self._counted:
            self._counted = False
            left = self.by_peer.get(self._peer, 0) - 1
            if left > 0:
                self.by_peer[self._peer] = left
            else:
                self.by_peer.pop(self._peer, None)
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._awaiting = self.cycle
        self._header_bytes = 0
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.cycle is not self._awaiting:
            return
        type(self).headers_timed_out += 1
        self.transport.write(
            _refusal(
                "408 Request Timeout",
                f"the request line and headers did not arrive within header_timeout_s={self.header_timeout_s:g} s",
            )
        )
        self.transport.abort()


class BoundedH11Protocol(_Bounds, H11Protocol):
    """uvicorn's h11 protocol with the bounds."""


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as _Cycle
except ImportError:  # pragma: no cover - httptools comes with uvicorn[standard] on CPython
    BoundedProtocol, _Cycle = BoundedH11Protocol, None
else:

    class BoundedHttpToolsProtocol(_Bounds, HttpToolsProtocol):
        """uvicorn's httptools protocol with the bounds."""

    BoundedProtocol = BoundedHttpToolsProtocol


def answered(send, headers: list, parts: list) -> bool:
    """Whether a 200 with our own `headers` (lower-case, valid names and values) and the body `parts` (not joined:
    bytes or an answer's arrays, viewed) went out as one write: uvicorn's httptools `send` for its start and body
    messages, without their two writes and checking each header against two patterns (~16k instructions). False,
    with nothing done, where `send` is not that cycle's, or where its checks do more (a paused or closing
    connection, an access log): then send the two messages.
    Every attribute of uvicorn's cycle it uses is read before any is set: a uvicorn whose cycle lacks one gets the
    two messages (tests/service/test_one_write_answer.py compares the bytes with its own send's)."""
    cycle = getattr(send, "__self__", None)
    if type(cycle) is not _Cycle:
        return False
    try:
        if cycle.response_started or cycle.flow.write_paused or cycle.disconnected or cycle.access_log:
            return False
        if not cycle.keep_alive:
            return False
        default_headers, writelines = cycle.default_headers, cycle.transport.writelines
        complete, next_request = cycle.message_event.set, cycle.on_response
    except AttributeError:
        return False
    cycle.response_started = cycle.response_complete = True
    cycle.waiting_for_100_continue = cycle.chunked_encoding = False
    lines = (b"HTTP/1.1 200 OK", *map(b": ".join, default_headers), *map(b": ".join, headers), b"", b"")
    writelines((b"\r\n".join(lines), *parts))
    complete()
    next_request()  # (the next pipelined request starts)
    return True


def whole_body(receive) -> dict | None:
    """The message uvicorn's httptools `receive` would return now, when the whole body is there and it would do
    nothing more (no 100 Continue), else None: the cycle's bytearray taken, not copied into `bytes`, the cycle left
    as `receive` leaves it (reading resumed, the event cleared, a new bytearray)."""
    cycle = getattr(receive, "__self__", None)
    if type(cycle) is not _Cycle:
        return None
    try:
        body, event, resume = cycle.body, cycle.message_event, cycle.flow.resume_reading
        more = cycle.more_body or cycle.disconnected or cycle.response_complete or cycle.waiting_for_100_continue
    except AttributeError:
        return None
    if more or type(body) is not bytearray or not event.is_set():
        return None
    resume()
    event.clear()
    cycle.body = bytearray()
    return {"type": "http.request", "body": body, "more_body": False}


def alone(send) -> bool:
    """Whether the request answering through `send` (uvicorn's httptools cycle's) is the only one its server
    is running: no other request's task waits for the event loop meanwhile."""
    cycle = getattr(send, "__self__", None)
    tasks = getattr(getattr(getattr(cycle, "on_response", None), "__self__", None), "tasks", ())
    return type(cycle) is _Cycle and len(tasks) == 1
