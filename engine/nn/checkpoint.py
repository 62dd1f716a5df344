"""`torch.utils.checkpoint` (`engine.utils.checkpoint`, `client.utils.checkpoint`), written once for every Variable class: the values and gradients of
`function(*args)` exactly as without checkpointing. Memory is not traded for recomputation here:
the engine keeps the segment's intermediates (a server request runs the whole graph at once), so
`checkpoint` is PyTorch's result without its saving; `use_reentrant`, `preserve_rng_state` and
the other options are accepted and change nothing."""

from __future__ import annotations

import contextlib

from engine.nn.functional import _ns
from engine.user_warnings import warn


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, **kwargs):  # fmt: skip
    """`function(*args, **kwargs)`, its gradients PyTorch's (see the module docstring). As PyTorch's:
    without `use_reentrant` a warning and the reentrant variant, which, when no tensor argument
    requires grad, computes without a graph (the parameters inside get no gradient)."""
    if use_reentrant is None:
        warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in PyTorch "
            "2.9, calling checkpoint without use_reentrant will raise an exception. use_reentrant=False is "
            "recommended, but if you need to preserve the current default behavior, you can pass use_reentrant=True. "
            "Refer to docs for more details on the differences between the two variants."
        )
    tensors = [a for a in args if hasattr(a, "requires_grad") and hasattr(a, "grad_fn")]
    detached = use_reentrant is not False and not any(t.requires_grad for t in tensors)
    if detached:
        warn("None of the inputs have requires_grad=True. Gradients will be None")
    with _ns(tensors[0]).no_grad() if detached and tensors else contextlib.nullcontext():
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """The modules (or a Sequential's children) `functions` applied in order to `input`."""
    if hasattr(functions, "children") and callable(functions.children):
        functions = list(functions.children())
    for function in functions:
        input = function(input)
    return input


__all__ = ["checkpoint", "checkpoint_sequential"]
