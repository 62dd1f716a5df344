"""Grad mode: whether operations record a graph. Thread-local, like PyTorch's."""

from __future__ import annotations

import threading
from contextlib import contextmanager


class GradMode:
    """One thread-local grad-mode flag. The engine has one; the client keeps its own."""

    def __init__(self):
        self._state = threading.local()

    def is_enabled(self) -> bool:
        return getattr(self._state, "enabled", True)

    def set_enabled(self, enabled: bool) -> None:
        self._state.enabled = bool(enabled)

    @contextmanager
    def enabled_as(self, enabled: bool):
        previous = self.is_enabled()
        self._state.enabled = enabled
        try:
            yield
        finally:
            self._state.enabled = previous

    def no_grad(self):
        """Context manager: results computed inside record no graph and have no grad_fn."""
        return self.enabled_as(False)

    def enable_grad(self):
        """Context manager: turn graph recording back on (e.g. inside no_grad)."""
        return self.enabled_as(True)


_mode = GradMode()
is_grad_enabled = _mode.is_enabled
set_grad_enabled = _mode.set_enabled
no_grad = _mode.no_grad
enable_grad = _mode.enable_grad
