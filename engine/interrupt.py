"""A per-thread hook that the backward walk calls between nodes, so whoever runs the engine (the
wire protocol's compute timeout) can stop a long backward at the next node by raising from it.
The engine knows nothing of what the hook checks; with no hook set the walk pays one `is None`."""

from __future__ import annotations

import threading


class _Local(threading.local):
    check = None  # a class default: `getattr(_local, "check", None)` raised and caught ~4k instructions per walk


_local = _Local()


def current():
    """The hook set for this thread, or None."""
    return _local.check


def set_hook(check):
    """Set this thread's hook (a no-argument callable, or None); returns the previous one."""
    previous = _local.check
    _local.check = check
    return previous
