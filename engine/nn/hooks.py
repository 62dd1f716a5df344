"""`torch.nn.Module`'s hooks: forward pre-hooks, forward hooks, full backward (pre-)hooks, and the call
that runs them in PyTorch's order: pre-hooks (which may replace the arguments), the backward hooks'
inputs, `forward`, forward hooks (which may replace the output), the backward hooks' outputs.

A full backward hook gets (module, grad_input, grad_output) once the gradients of the module's tensor
arguments are computed, and what it returns replaces grad_input. It rides on tensor hooks of identity
views of the arguments and outputs: on the client those run when the backward's answer arrives, so they read the
gradients and a hook that replaces one is refused (`client.autograd`)."""

from __future__ import annotations

import functools
from collections import OrderedDict

from engine.grad_mode import is_grad_enabled
from engine.surface import RemovableHandle
from engine.surface_types import VariableSurface
from engine.user_warnings import warn


def add(module, kind: str, hook, prepend: bool = False, with_kwargs: bool = False, full=None) -> RemovableHandle:
    """Register `hook` in `module`'s hooks of `kind` (an OrderedDict by handle id, holding the hooks themselves as
    PyTorch's does: pruning's and weight_norm's are found there), `with_kwargs` in `<kind>_with_kwargs`; a backward
    hook `full` or not, as the module's others."""
    if full is not None:
        if module.__dict__.get("_is_full_backward_hook", full) is not full:
            raise RuntimeError(
                "Cannot use both regular backward hooks and full backward hooks on a single Module. "
                "Please use only one of them."
            )
        object.__setattr__(module, "_is_full_backward_hook", full)
    hooks: OrderedDict = module.__dict__[kind]
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if with_kwargs:
        module.__dict__.setdefault(kind + "_with_kwargs", {})[handle.id] = True
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    object.__setattr__(module, "_hooked", True)
    return handle


def call(module, args: tuple, kwargs: dict):
    """`module(*args, **kwargs)` with its hooks."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if key in module.__dict__.get("_forward_pre_hooks_with_kwargs", ()):
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(
                        f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}."
                    )
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward, full = None, module.__dict__.get("_is_full_backward_hook") is not False
    if ((full and module._backward_hooks) or module._backward_pre_hooks) and is_grad_enabled():
        backward = _BackwardCall(module)
        args = backward.inputs(args)
    out = module.forward(*args, **kwargs)
    for key, hook in list(module._forward_hooks.items()):
        with_kwargs = key in module.__dict__.get("_forward_hooks_with_kwargs", ())
        result = hook(module, args, kwargs, out) if with_kwargs else hook(module, args, out)
        if result is not None:
            out = result
    if not full and module._backward_hooks and is_grad_enabled():
        _on_the_output_node(module, out)
    return out if backward is None else backward.outputs(out)


def _on_the_output_node(module, out) -> None:
    """`register_backward_hook`'s (PyTorch's deprecated kind): `hook(module, grad_input, grad_output)` as a hook of
    the node that made the (first) output, so grad_input are that node's inputs' gradients."""
    while not isinstance(out, VariableSurface):
        out = next(v for v in out.values() if isinstance(v, VariableSurface)) if isinstance(out, dict) else out[0]
    if out.grad_fn is not None:
        for hook in list(module._backward_hooks.values()):
            try:
                out.grad_fn.register_hook(functools.partial(hook, module))
            except NotImplementedError:  # a client's grad_fn: the output's gradient as it arrives, no grad_input
                out.register_hook(functools.partial(_output_only, hook, module))


def _output_only(hook, module, grad) -> None:
    hook(module, (), (grad,))


class _BackwardCall:
    """One call's backward hooks: the gradients of its tensor arguments and outputs as they arrive."""

    def __init__(self, module):
        self.module, self.waiting, self.outputs_waiting = module, set(), set()
        self.grad_input: list = []
        self.grad_output: list = []

    def _watched(self, values, arrive, waiting):
        values, grads = list(values), []
        for i, value in enumerate(values):
            if isinstance(value, VariableSurface):
                grads.append(None)
                if value.requires_grad:
                    values[i] = value.view_as(value)
                    values[i].register_hook(functools.partial(arrive, len(grads) - 1))
                    waiting.add(len(grads) - 1)
        return values, grads

    def inputs(self, args):
        values, self.grad_input = self._watched(args, self._arrive, self.waiting)
        return tuple(values)

    def outputs(self, out):
        values, self.grad_output = self._watched(
            out if isinstance(out, tuple) else (out,), self._leave, self.outputs_waiting
        )
        return tuple(values) if isinstance(out, tuple) else values[0]

    def _leave(self, k, g):
        for hook in list(self.module._backward_pre_hooks.values()):
            result = hook(self.module, tuple(self.grad_output[:k]) + (g,) + tuple(self.grad_output[k + 1 :]))
            if result is not None:
                g = result[k]
        self.grad_output[k] = g
        self.outputs_waiting.discard(k)
        if not self.outputs_waiting and not self.waiting:  # no argument needs a gradient: run now
            if self.module._backward_hooks:
                warn(
                    "Full backward hook is firing when gradients are computed with respect to module outputs since "
                    "no inputs require gradients."
                )
            self._run()
        return g

    def _arrive(self, k, g):
        self.grad_input[k] = g
        self.waiting.discard(k)
        if not self.waiting:
            self._run()
        return self.grad_input[k]

    def _run(self):
        full = self.module.__dict__.get("_is_full_backward_hook") is not False
        for hook in list(self.module._backward_hooks.values()) if full else ():
            result = hook(self.module, tuple(self.grad_input), tuple(self.grad_output))
            if result is not None:
                result = result if isinstance(result, tuple) else (result,)
                if len(result) != len(self.grad_input):
                    raise RuntimeError(
                        f"Backward hook returned an invalid number of grad_input, got {len(result)}, "
                        f"but expected {len(self.grad_input)}"
                    )
                self.grad_input = list(result)
