"""torch.autograd.graph's `register_multi_grad_hook`, for both sides: one hook over several tensors' gradients in
a backward, made of a tensor hook on each. A backward is one call of a side's pass function (`passes`: the
engine's walk, the client's run of a backward's hooks), wrapped when a multi-grad hook is first registered (so
nothing is paid before); mode "all" hands its buffered gradients (None for tensors that got none) to `fn` when that
call ends (PyTorch's: when the last expected one arrives, before its leaf's `.grad` accumulates), mode "any" the
first gradient, once a backward."""

from __future__ import annotations

import functools
import threading

MODES = ("all", "any")
OUTSIDE = "expected this hook to be called inside a backward call"


class _Passes(threading.local):
    def __init__(self):
        self.stack, self.count = [], 0  # the backwards running on this thread, innermost last: (number, pending)


PASSES = _Passes()
_WRAPPED: set = set()


def passes(module, name):
    """A function that makes each call of `module.<name>` (a side's one backward) a pass, once."""

    def install():
        if (module.__name__, name) in _WRAPPED:
            return
        run = getattr(module, name)

        @functools.wraps(run)
        def one_pass(*args, **kwargs):
            PASSES.count += 1
            pending: list = []
            PASSES.stack.append((PASSES.count, pending))
            try:
                result = run(*args, **kwargs)
            finally:
                PASSES.stack.pop()
            for flush in pending:
                flush()
            return result

        setattr(module, name, one_pass)
        _WRAPPED.add((module.__name__, name))

    return install


def _current():
    if not PASSES.stack:
        raise AssertionError(OUTSIDE)
    return PASSES.stack[-1]


class MultiHandle:
    """What `register_multi_grad_hook` returns: `remove()` removes its tensor hooks (a context manager too)."""

    def __init__(self, handles):
        self.handles = tuple(handles)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def multi_grad_hook(install):
    """`register_multi_grad_hook` for the side whose backward `install` wraps."""

    def register_multi_grad_hook(tensors, fn, *, mode="all") -> MultiHandle:
        """`fn(grads)` once all of `tensors`' gradients in a backward are computed (mode "all": a list, None for
        those that got none; tensors not in that backward are not waited for), or `fn(grad)` with the first one
        computed (mode "any"), once per backward."""
        if mode not in MODES:
            raise ValueError(f"Expects mode to be one of {MODES} but got {mode}")
        install()
        tensors = list(tensors)
        if mode == "any":
            seen: set = set()

            @functools.wraps(fn)
            def first(grad):
                key, pending = _current()
                if key not in seen:
                    seen.add(key)
                    pending.append(lambda: seen.discard(key))
                    fn(grad)

            return MultiHandle(t.register_hook(first) for t in tensors if t.requires_grad)
        if not all(t.requires_grad for t in tensors):  # (PyTorch's: no grad_fn or grad accumulator to wait for)
            raise AssertionError("Expected gradient function to be set")
        buffers: dict = {}

        def kept(i):
            def hook(grad):
                key, pending = _current()
                if key not in buffers:
                    buffers[key] = [None] * len(tensors)
                    pending.append(lambda: fn(buffers.pop(key)))
                buffers[key][i] = grad

            return hook

        return MultiHandle([t.register_hook(kept(i)) for i, t in enumerate(tensors)])

    return register_multi_grad_hook
