"""The engine's side of the surface (`engine.surface`): ops are computed when they are called.

The operators here are the hot path of every engine program, so an operator is its op's `apply_op`
itself (no coercion when both operands are Variables, no attribute parsing)."""

from __future__ import annotations

import functools

from engine import autograd, grad_fn_names, grad_mode, surface
from engine.mixed_precision import CAST, STATE
from engine.node import NO_ATTRS
from engine.ops.shape import reversed_dims
from engine.registry import OPS, F, coerce, parse_call, trusted
from engine.surface_methods import METHOD_OPS
from engine.variable import Variable, as_array


class EagerSide(surface.Side):
    def operator(self, op, kind, function):
        if kind == surface.REFLECTED:  # `2 - x`: its node named as PyTorch's (`grad_fn_names.reflected`'s work)
            name, call = grad_fn_names.REFLECTED.get(op.name), op.call

            def reflected(self, other):
                out = call(coerce((other, self)), NO_ATTRS)
                if name is not None and (type(other) is int or type(other) is float):
                    return grad_fn_names.renamed(out, name, (self.grad_fn,))
                return out

            return reflected
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


def direct_methods(cls=Variable) -> None:
    """`x.tanh()`, `x.mm(w)`, `x.pow(2)`, `x.sum()`, `x.clamp(min=0)`: a plain call (no attribute, keyword or
    autocast) goes straight to the op's own `apply_op`, as an operator does, past the autocast wrapper, the op
    function and its coercion; any other call takes the op function, which ends in the same `apply_op`. The op
    methods stay the surface's (`_ops` is what they call); sum and clamp's are the class's own."""
    for name in set(METHOD_OPS.values()):
        op = OPS[name]
        if op.operator is not None and not op.view and not op.attrs and op.function is None and op.arity in (1, 2):
            setattr(cls._ops, name, _direct(getattr(cls._ops, name), op.operator, op.arity == 2, name in CAST))
    surface_sum, surface_clamp, clamp_op = cls.sum, cls.clamp, OPS["clamp"]
    sum_call, defaults = OPS["sum"].call, OPS["sum"].default_attrs

    def sum(self, *args, **kwargs):
        return sum_call((self,), defaults) if not args and not kwargs else surface_sum(self, *args, **kwargs)

    def clamp(self, min=None, max=None):  # (number bounds: the op's attributes; tensors: composed)
        if type(min) in PLAIN and type(max) in PLAIN and (min is not None or max is not None):
            return clamp_op.call((self,), parse_call(clamp_op, (), {"min": min, "max": max}))
        return surface_clamp(self, min, max)

    cls.sum, cls.clamp = functools.wraps(surface_sum)(sum), functools.wraps(surface_clamp)(clamp)


PLAIN = frozenset((int, float, type(None)))


def _direct(function, operator, binary, cast):
    def direct(x, *args, **kwargs):
        if kwargs or len(args) != binary or cast and STATE.dtype is not None:
            return function(x, *args, **kwargs)
        return operator(x, args[0]) if binary else operator(x)

    return functools.wraps(function)(direct)
