"""Grad mode: whether operations record a graph. Thread-local, like PyTorch's."""

from __future__ import annotations

import threading
from contextlib import ContextDecorator


class _State(threading.local):
    enabled = True


class _Setting(ContextDecorator):
    """A class, not a generator-based context manager: backward enters one per call, and this
    costs a fraction of contextlib.contextmanager's enter and exit."""

    __slots__ = ("state", "enabled", "previous")

    def __init__(self, state, enabled: bool):
        self.state = state
        self.enabled = enabled

    def _recreate_cm(self):
        return _Setting(self.state, self.enabled)  # a decorated function may run in several threads at once

    def __enter__(self):
        self.previous = self.state.enabled
        self.state.enabled = self.enabled

    def __exit__(self, *exc):
        self.state.enabled = self.previous
        return False


class GradMode:
    """One thread-local grad-mode flag. The engine has one; the client keeps its own.

    `state.enabled` is the flag itself, for hot paths that read it without a call."""

    def __init__(self):
        self.state = _State()

    def is_enabled(self) -> bool:
        return self.state.enabled

    def set_enabled(self, enabled: bool) -> None:
        self.state.enabled = bool(enabled)

    def enabled_as(self, enabled: bool) -> "_Setting":
        """Context manager (and decorator): the flag is `enabled` inside, restored after."""
        return _Setting(self.state, enabled)

    def no_grad(self):
        """Context manager: results computed inside record no graph and have no grad_fn."""
        return self.enabled_as(False)

    def enable_grad(self):
        """Context manager: turn graph recording back on (e.g. inside no_grad)."""
        return self.enabled_as(True)


mode = GradMode()  # the engine's
state = mode.state
is_grad_enabled = mode.is_enabled
set_grad_enabled = mode.set_enabled
no_grad = mode.no_grad
enable_grad = mode.enable_grad
