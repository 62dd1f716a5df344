"""Grad mode: whether operations record a graph. Thread-local, like PyTorch's."""

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
