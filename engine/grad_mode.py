"""Grad mode: whether operations record a graph. Thread-local, like PyTorch's."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from contextlib import ContextDecorator
from typing import Any, Literal, TypeVar, cast, overload

F = TypeVar("F", bound=Callable[..., Any])
# one entry per inference mode entered (any thread): hot paths read the thread's flag only then
INFERENCE: list[None] = []
INFERENCE_MADE: list[None] = []  # one entry once any inference mode was entered: inference tensors' checks run
# PyTorch's refusals of inference tensors (made in inference mode) outside it
INFERENCE_INPLACE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a normal "
    "tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for more details."
)
INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use it in "
    "autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`."
)
INFERENCE_FLAG = "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed."


class _State(threading.local):
    enabled = True
    inference = False


class _Setting(ContextDecorator):
    """A class, not a generator-based context manager: backward enters one per call, and this
    costs a fraction of contextlib.contextmanager's enter and exit."""

    __slots__ = ("state", "enabled", "previous")

    def __init__(self, state: _State, enabled: bool | None):
        self.state = state
        self.enabled = enabled

    def _recreate_cm(self) -> _Setting:
        return _Setting(self.state, self.enabled)  # a decorated function may run in several threads at once

    def __call__(self, function: F) -> F:
        """A decorator; of a generator function, each of its steps runs in the mode (as PyTorch's), not the caller's
        code between them."""
        if not inspect.isgeneratorfunction(function):
            return super().__call__(function)

        @functools.wraps(function)
        def steps(*args: Any, **kwargs: Any) -> Any:
            generator, method, value = function(*args, **kwargs), "send", None
            while True:
                with self._recreate_cm():
                    try:
                        out = getattr(generator, method)(value)
                    except StopIteration as stop:
                        return stop.value
                try:
                    method, value = "send", (yield out)
                except GeneratorExit:
                    generator.close()
                    raise
                except BaseException as error:  # noqa: BLE001  (thrown into the generator, as PyTorch)
                    method, value = "throw", error

        return cast(F, steps)

    def __enter__(self) -> None:
        self.previous = self.state.enabled
        if self.enabled is not None:
            self.state.enabled = self.enabled

    def __exit__(self, *exc: object) -> Literal[False]:
        self.state.enabled = self.previous
        return False


class _Inference(_Setting):
    """`inference_mode(mode)`: grad mode is `not mode` inside, and `is_inference_mode_enabled()` is `mode`."""

    def _recreate_cm(self) -> _Inference:
        return _Inference(self.state, self.enabled)

    def __enter__(self) -> None:
        super().__enter__()
        self.was, self.state.inference = self.state.inference, not self.enabled
        INFERENCE.append(None)
        if not INFERENCE_MADE and not self.enabled:
            INFERENCE_MADE.append(None)

    def __exit__(self, *exc: object) -> Literal[False]:
        self.state.inference = self.was
        INFERENCE.pop()
        return super().__exit__(*exc)


class _Restore:
    """What `set_grad_enabled(flag)` returns: the flag is already set; leaving a `with` block
    restores it; as a decorator (`@set_grad_enabled(False)`) it restores it at once and sets
    `flag` around each call of the function instead."""

    __slots__ = ("state", "previous")

    def __init__(self, state: _State, previous: bool):
        self.state = state
        self.previous = previous

    def __call__(self, function: F) -> F:
        flag = self.state.enabled
        self.state.enabled = self.previous
        return _Setting(self.state, flag)(function)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        self.state.enabled = self.previous
        return False


class GradMode:
    """One thread-local grad-mode flag. The engine has one; the client keeps its own.

    `state.enabled` is the flag itself, for hot paths that read it without a call."""

    def __init__(self) -> None:
        self.state = _State()

    def is_enabled(self) -> bool:
        return self.state.enabled

    def set_enabled(self, enabled: bool) -> _Restore:
        """Set the flag now; as a context manager (`with set_grad_enabled(False):`) it is restored on exit."""
        previous = self.state.enabled
        self.state.enabled = bool(enabled)
        return _Restore(self.state, previous)

    def enabled_as(self, enabled: bool) -> _Setting:
        """Context manager (and decorator): the flag is `enabled` inside, restored after."""
        return _Setting(self.state, enabled)

    @overload
    def no_grad(self, function: None = None) -> _Setting: ...
    @overload
    def no_grad(self, function: F) -> F: ...
    def no_grad(self, function: F | None = None) -> _Setting | F:
        """Context manager: results computed inside record no graph and have no grad_fn. A decorator
        too, as `@no_grad()` or `@no_grad`."""
        return self._decorate(False, function)

    @overload
    def enable_grad(self, function: None = None) -> _Setting: ...
    @overload
    def enable_grad(self, function: F) -> F: ...
    def enable_grad(self, function: F | None = None) -> _Setting | F:
        """Context manager (and decorator): turn graph recording back on (e.g. inside no_grad)."""
        return self._decorate(True, function)

    def inference_mode(self, mode: bool | Callable[..., Any] = True) -> Any:
        """PyTorch's inference mode: no_grad that `is_inference_mode_enabled()` tells (`inference_mode(False)`
        enables grad, as PyTorch's does); a decorator too. What is made in it is marked (`is_inference()`)."""
        if callable(mode):
            return _Inference(self.state, False)(mode)
        return _Inference(self.state, not mode)

    def is_inference_mode_enabled(self) -> bool:
        return self.state.inference

    def refuse_inference(self, variable: Any, message: str) -> None:
        """PyTorch's `message` where `variable` is an inference tensor and inference mode is off (callers read
        INFERENCE_MADE first: no call before any inference mode)."""
        if not self.state.inference and variable.is_inference():
            raise RuntimeError(message)

    def _decorate(self, enabled: bool, function: F | None) -> _Setting | F:
        setting = self.enabled_as(enabled)
        return setting if function is None else setting(function)


mode = GradMode()  # the engine's
state = mode.state
is_grad_enabled = mode.is_enabled
set_grad_enabled = mode.set_enabled
no_grad = mode.no_grad
enable_grad = mode.enable_grad
