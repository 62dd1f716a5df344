"""The client's per-thread and per-process state: grad mode, the trace being recorded, the current session.

* Grad mode is the client's own flag rather than `engine.grad_mode`'s: in embedded mode the
  executor runs in this very thread, and a user's `with no_grad():` must not reach into it.
* While a custom Function's forward or backward is traced, `tracing(phase)` holds its phase:
  every value created meanwhile belongs to the innermost phase, and no value may be fetched.
* The current session is the innermost open `connect()`, else a module default, made by the
  factory `client.session` registers (so Variables and ops need not import the sessions).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from engine.api import INFERENCE, GradMode  # noqa: F401  (INFERENCE: for client.variable)

mode = GradMode()
is_grad_enabled, set_grad_enabled = mode.is_enabled, mode.set_enabled
no_grad, enable_grad = mode.no_grad, mode.enable_grad
_thread = threading.local()


def current_phase():
    return _thread.__dict__.get("phase")  # not getattr(_thread, "phase", None): it raises and catches while unset


@contextmanager
def tracing(phase):
    outer = current_phase()
    _thread.phase = phase
    try:
        with mode.enabled_as(False):
            yield
    finally:
        _thread.phase = outer


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
    if _default is None or _default.closed:
        with _lock:
            if _default is None or _default.closed:  # unless another thread made it meanwhile
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
