"""Connections a slow or hostile client cannot pile up: uvicorn's h11 protocol with a cap on open
connections and a deadline on each request's line and headers.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) and bounds a header's size
(`h11_max_incomplete_event_size`), but it arms no timer while a request's headers trickle in, and
its `limit_concurrency` answers 503 only once headers are complete, leaving the socket open. So
here: a connection over `max_connections` is answered 503 and closed as soon as it is accepted,
and one whose request line and headers have not all arrived `header_timeout_s` after it opened
(or after its previous response) is closed. Body reads have their own deadline (service/body.py).
"""

from __future__ import annotations

import functools

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.errors import error_body


@functools.cache
def _settings():
    from service.settings import (
        Settings,  # the process's settings, from GRADSERVE_* (set by the CLI)
    )

    return Settings()


def _refusal(status: str, message: str) -> bytes:
    body = error_body(message)
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "retry-after: 1\r\nconnection: close\r\n\r\n").encode() + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with `max_connections` and `header_timeout_s` (see the module doc)."""

    refused = 0        # connections closed at once, over max_connections (per process)
    headers_timed_out = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = _settings()
        self.max_connections = settings.max_connections
        self.header_timeout_s = settings.header_timeout_s
        self._header_timer = None
        self._awaiting = None  # the cycle that was current when the header timer was armed

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            type(self).refused += 1
            transport.write(_refusal("503 Service Unavailable",
                                     f"too many open connections (max_connections={self.max_connections}); retry shortly"))
            self.connections.discard(self)
            transport.close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_timer()  # the next request on a kept-alive connection starts arriving
        super().data_received(data)
        if self._header_timer is not None and self.cycle is not self._awaiting:
            self._disarm_header_timer()  # a new request's headers are complete

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm_header_timer()  # the keep-alive timer watches the idle connection now

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._awaiting = self.cycle
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
        self.transport.write(_refusal("408 Request Timeout",
                                      f"the request line and headers did not arrive within header_timeout_s="
                                      f"{self.header_timeout_s:g} s"))
        self.transport.close()
