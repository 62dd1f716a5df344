"""The engine's side of the surface (`engine.surface`): ops are computed when they are called.

The operators here are the hot path of every engine program, so an operator is its op's `apply_op`
itself (no coercion when both operands are Variables, no attribute parsing)."""

from __future__ import annotations

from engine import autograd, grad_fn_names, grad_mode, surface
from engine.node import NO_ATTRS
from engine.ops.shape import reversed_dims
from engine.registry import F, coerce, trusted
from engine.variable import Variable, as_array


class EagerSide(surface.Side):
    def operator(self, op, kind, function):
        if kind == surface.REFLECTED:
            return grad_fn_names.reflected(lambda self, other: op.call(coerce((other, self)), NO_ATTRS), op.name)
        return op.operator  # `x * y` calls it as (x, y), `-x` as (x,): see `engine.node.apply_op`


SIDE = EagerSide(
    Variable,
    coerce,
    lambda op: op.call,
    grad_mode.mode,
    autograd.backward,
    as_array,
    functions=vars(F),  # the registry's functions; getitem/setitem are engine.ops.indexing's
    properties={"T": reversed_dims, "mT": lambda self: trusted.transpose(self, dim0=-2, dim1=-1)},
)
