"""Which session computes values now: the innermost open `connect()`, else a module default.

Kept apart from `client.session` so that Variables and ops can ask for the current session
without importing the sessions (which import them); `client.session` registers how the default
session is made (`set_default_factory`)."""

from __future__ import annotations

import threading

_stack: list = []
_default = None
_make_default = None
_lock = threading.RLock()


def set_default_factory(make) -> None:
    global _make_default
    _make_default = make


def current_session():
    """The session Variables use now (see the module docstring)."""
    global _default
    try:
        return _stack[-1]
    except IndexError:
        pass
    if _default is not None and not _default.closed:
        return _default
    with _lock:
        if _stack:
            return _stack[-1]
        if _default is None or _default.closed:
            _default = _make_default()
        return _default


def push(session) -> None:
    with _lock:
        if session not in _stack:
            _stack.append(session)


def remove(session) -> None:
    with _lock:
        if session in _stack:
            _stack.remove(session)
