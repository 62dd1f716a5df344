"""The client's grad mode (thread-local, like the engine's) and the tracing state of custom Functions.

The client keeps its own flag rather than sharing `engine.grad_mode`'s: in embedded mode the
executor runs in this very thread, and a user's `with no_grad():` must not reach into it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


def set_grad_enabled(enabled: bool) -> None:
    _state.enabled = bool(enabled)


@contextmanager
def _grad_mode(enabled: bool):
    previous = is_grad_enabled()
    _state.enabled = enabled
    try:
        yield
    finally:
        _state.enabled = previous


def no_grad():
    """Context manager: results computed inside record no graph and have no grad_fn."""
    return _grad_mode(False)


def enable_grad():
    """Context manager: turn graph recording back on (e.g. inside no_grad)."""
    return _grad_mode(True)


# --- tracing -------------------------------------------------------------------------------
# While a custom Function's forward or backward is traced, `_state.phases` holds the trace
# phases being recorded (innermost last). Every value created meanwhile belongs to the
# innermost phase, and no value may be fetched.


def current_phase():
    phases = getattr(_state, "phases", None)
    return phases[-1] if phases else None


@contextmanager
def tracing(phase):
    phases = getattr(_state, "phases", None)
    if phases is None:
        phases = _state.phases = []
    phases.append(phase)
    try:
        with _grad_mode(False):
            yield
    finally:
        phases.pop()
