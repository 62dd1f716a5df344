"""Request ids: taken from a caller's `X-Request-ID` when it is safe to log and echo (1 to
MAX_LENGTH printable ASCII characters, no spaces), else generated; echoed in every response's
`X-Request-ID` header and put in every error body as `request_id`.

The id of the request being answered lives in its ASGI scope under `SCOPE_KEY`, where error
handlers and the request log find it."""

from __future__ import annotations

import itertools
import os
import re

HEADER = "x-request-id"
HEADER_KEY = HEADER.encode()
SCOPE_KEY = "gradserve.request_id"
MAX_LENGTH = 128
_SAFE = re.compile(f"[!-~]{{1,{MAX_LENGTH}}}")  # printable ASCII, no space: one token in a log line


_process = [os.urandom(8).hex(), itertools.count()]  # this process's random half of every id, and a counter


def _new_process() -> None:
    _process[:] = [os.urandom(8).hex(), itertools.count()]  # a forked worker's ids are its own


os.register_at_fork(after_in_child=_new_process)


def new_id() -> str:
    """32 hex digits (uuid4's length): 16 random ones drawn once per process, then a count of 16;
    unique, not secret. (`uuid.uuid4().hex` costs ~3 µs, `os.urandom(16).hex()` ~1.4, this ~0.3.)"""
    prefix, count = _process
    return f"{prefix}{next(count):016x}"


def safe(given: str | None) -> str | None:
    """`given` (an X-Request-ID header, None when absent) when it is safe to log and echo, else None."""
    return given if given is not None and _SAFE.fullmatch(given) else None


def accept(given: str | None) -> str:
    """The id of a request whose X-Request-ID header is `given` (None when absent): `given` when
    safe, else a new one."""
    return safe(given) or new_id()


def of_scope(scope) -> str:
    """The request's id, assigned now (from its headers) when it has none yet."""
    rid = scope.get(SCOPE_KEY)
    if rid is None:
        given = None
        for name, value in scope.get("headers", ()):
            if name == HEADER_KEY:
                given = value.decode("latin-1")
                break
        rid = scope[SCOPE_KEY] = accept(given)
    return rid


def of_known(scope, given: str | None) -> str:
    """`of_scope` for a request without an id yet whose X-Request-ID is `given`, `safe` already."""
    rid = scope[SCOPE_KEY] = given or new_id()
    return rid


def with_header(headers: list, rid: str) -> list:
    """ASGI response `headers` with X-Request-ID: `rid` added unless one is there."""
    for name, _ in headers:
        if name.lower() == HEADER_KEY:
            return headers
    return [*headers, (HEADER_KEY, rid.encode())]
