"""Grad mode: whether operations record a graph. Thread-local, like PyTorch's."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class _State(threading.local):
    enabled = True


class GradMode:
    """One thread-local grad-mode flag. The engine has one; the client keeps its own.

    `state.enabled` is the flag itself, for hot paths that read it without a call."""

    def __init__(self):
        self.state = _State()

    def is_enabled(self) -> bool:
        return self.state.enabled

    def set_enabled(self, enabled: bool) -> None:
        self.state.enabled = bool(enabled)

    @contextmanager
    def enabled_as(self, enabled: bool):
        previous = self.is_enabled()
        self.state.enabled = enabled
        try:
            yield
        finally:
            self.state.enabled = previous

    def no_grad(self):
        """Context manager: results computed inside record no graph and have no grad_fn."""
        return self.enabled_as(False)

    def enable_grad(self):
        """Context manager: turn graph recording back on (e.g. inside no_grad)."""
        return self.enabled_as(True)


_mode = GradMode()
state = _mode.state
is_grad_enabled = _mode.is_enabled
set_grad_enabled = _mode.set_enabled
no_grad = _mode.no_grad
enable_grad = _mode.enable_grad
