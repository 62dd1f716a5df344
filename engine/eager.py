"""The engine's side of the surface (`engine.surface`): ops are computed when they are called.

The operators here are the hot path of every engine program, so they call `apply_op` directly
when both operands are Variables (no coercion, no attribute parsing)."""

from __future__ import annotations

from engine import autograd, grad_mode, surface
from engine.node import apply_op
from engine.ops.shape import reversed_dims
from engine.registry import F, coerce, trusted
from engine.variable import Variable, as_array


class EagerSide(surface.Side):
    def operator(self, op, kind, function):
        empty = {}
        if kind == surface.UNARY:
            return lambda self: apply_op(op, (self,), empty)
        if kind == surface.REFLECTED:

            def reflected_op(self, other):
                return op.call(coerce((other, self)), empty)

            return reflected_op

        def forward_op(self, other):
            if type(other) is Variable:
                return apply_op(op, (self, other), empty)
            return op.call(coerce((self, other)), empty)

        return forward_op


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
