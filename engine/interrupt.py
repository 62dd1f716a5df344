"""A per-thread hook that the backward walk calls between nodes, so whoever runs the engine (the
wire protocol's compute timeout) can stop a long backward at the next node by raising from it.
The engine knows nothing of what the hook checks; with no hook set the walk pays one `is None`."""

from __future__ import annotations

import threading

_local = threading.local()


def current():
    """The hook set for this thread, or None."""
    return getattr(_local, "check", None)


def set_hook(check):
    """Set this thread's hook (a no-argument callable, or None); returns the previous one."""
    previous = getattr(_local, "check", None)
    _local.check = check
    return previous
