"""`torch.autograd.forward_ad` on the client: `dual_level`, `make_dual`, `unpack_dual`, as
`engine.forward_ad` has them, recorded lazily. A dual Variable remembers its tangent; `unpack_dual(y)`
records one `jvp` node (graph format 1.1) per dual that `y` is computed from, so the tangent is
computed with `y`, by one request, when it is read.

Differences from the engine (and PyTorch), because the service computes tangents from the graph:
a dual made from a Variable that does not require grad does (`requires_grad` is True: its graph
must be kept to be differentiated), and a custom Function's tangent comes from its (traced)
`backward` by the transpose trick, not from its `jvp`, so both must agree.
"""

from __future__ import annotations

import weakref

from client.autograd import jvp_node
from client.variable import Variable
from engine.api import UnpackedDualTensor, check_dual

_LEVELS: list = []  # the active level (one at most): {id(dual Variable): (weak ref, its Value, tangent)}


def enter_dual_level() -> int:
    if _LEVELS:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _LEVELS.append({})
    return 0


def exit_dual_level(*, level=None):
    if not _LEVELS:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created")
    _LEVELS.pop().clear()


class dual_level:  # noqa: N801  (PyTorch's spelling)
    """Context manager of a forward-AD level: tangents exist inside it only."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()


def make_dual(tensor, tangent, *, level=None):
    """A Variable with `tensor`'s values (gradients flow to `tensor`) and `tangent` as its tangent."""
    check_dual(tensor, tangent, Variable, bool(_LEVELS))
    dual = tensor.view_as(tensor) if tensor.requires_grad else tensor.detach().requires_grad_(True)
    duals = _LEVELS[-1]
    key = id(dual)
    duals[key] = (weakref.ref(dual, lambda ref: duals.pop(key, None)), dual._graph_value(), tangent)
    return dual


def _sources(value, wanted) -> list:
    """The values of `wanted` (by id) that `value` is computed from."""
    found, seen, stack = [], set(), [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in wanted:
            found.append(v)
        stack.extend(v.inputs)
    return found


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): `tensor` without the tangent, and the tangent (a lazy jvp; None without one)."""
    if not _LEVELS or not isinstance(tensor, Variable):
        return UnpackedDualTensor(tensor, None)
    duals = _LEVELS[-1]
    made = duals.get(id(tensor))
    if made is not None and made[0]() is tensor:  # a dual itself: its tangent, the object given (as PyTorch's)
        return UnpackedDualTensor(tensor.detach() if not tensor.requires_grad else tensor, made[2])
    by_value = {id(value): (ref, value, tangent) for ref, value, tangent in duals.values() if ref() is not None}
    value = tensor._graph_value()
    sources = _sources(value, by_value)
    if not sources:
        return UnpackedDualTensor(tensor, None)
    pairs = [(by_value[id(v)][0](), by_value[id(v)][2]) for v in sources]
    primal = tensor.detach() if not tensor.requires_grad else tensor
    return UnpackedDualTensor(primal, jvp_node(tensor, pairs))
