"""The client's grad mode (thread-local, like the engine's) and the tracing state of custom Functions.

The client keeps its own flag rather than sharing `engine.grad_mode`'s: in embedded mode the
executor runs in this very thread, and a user's `with no_grad():` must not reach into it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from engine.grad_mode import GradMode

mode = GradMode()
_state = threading.local()
is_grad_enabled, set_grad_enabled, no_grad, enable_grad = mode.is_enabled, mode.set_enabled, mode.no_grad, mode.enable_grad


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
        with mode.enabled_as(False):
            yield
    finally:
        phases.pop()
