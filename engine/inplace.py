"""In-place arithmetic with PyTorch's rules: `w -= lr * w.grad` under `no_grad()` keeps `w` the
same object (still a leaf that requires grad), `x.add_(y, alpha=2)`, `h.clamp_(min=0)`...

- Outside grad mode (or when nothing involved requires grad) the values are written into the
  Variable's own storage (`_assign_values`), its version counter moves on, so a graph that
  saved it refuses a later backward, as PyTorch does.
- In grad mode, a leaf that requires grad refuses (PyTorch's error); any other Variable that
  gets a differentiable result stands for that result from now on (`_assign_recorded`): its
  grad_fn is the op's, and the op read a snapshot of the old value.
- The result must keep the Variable's shape and a dtype it can be cast to (`engine.promotion.can_cast`):
  `ints += 0.5` and `x_of_shape_3 += y_of_shape_2x3` raise PyTorch's errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy

from engine import modern, promotion, views
from engine.grad_mode import INFERENCE_INPLACE, INFERENCE_MADE

if TYPE_CHECKING:
    from engine.surface_types import Operand, V

LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."

# registry ops with a PyTorch `<name>_` method: elementwise, so the result keeps x's shape
OPS = (
    "add sub mul div pow neg exp log sqrt sign abs sin cos tanh sigmoid relu clamp floor ceil round trunc fmod "
    "remainder floor_divide log10 log2 exp2 tril triu masked_fill cumsum bitwise_and bitwise_or bitwise_xor "
    "bitwise_not bitwise_left_shift bitwise_right_shift acos asin atan atan2 cosh sinh tan expm1 log1p erf erfinv lgamma digamma polygamma cumprod eq ne lt le gt ge"
).split()
# composed functions (engine.modern, engine.tensor_math, engine.tensor_more) with a `<name>_`, likewise elementwise
COMPOSED = (
    "acosh asinh atanh rsqrt reciprocal square frac deg2rad rad2deg nan_to_num xlogy hypot lerp logit sgn fix erfc "
    "sinc float_power copysign ldexp gcd lcm clamp_min clamp_max logical_not logical_and logical_or logical_xor "
    "addcmul addcdiv addmm addmv addr addbmm baddbmm renorm mvlgamma"
).split()
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")  # their `<name>_` is differentiable, with gradient 0
# ops whose `<name>_` gives the Variable the result's shape (PyTorch's in-place views: `x.t_()`)
RESHAPING = ("t", "transpose", "squeeze", "unsqueeze")
# Tensor spellings of the above: `<alias>_` is `<name>_` (where there is one)
ALIASES: dict[str, str] = {
    **modern.ALIASES,
    "divide": "div",
    "clip": "clamp",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
}
OPERATORS = {
    "__iadd__": "add",
    "__isub__": "sub",
    "__imul__": "mul",
    "__itruediv__": "div",
    "__ipow__": "pow",
    "__ifloordiv__": "floor_divide",
    "__imod__": "remainder",
    "__iand__": "bitwise_and",
    "__ior__": "bitwise_or",
    "__ixor__": "bitwise_xor",
    "__ilshift__": "bitwise_left_shift",
    "__irshift__": "bitwise_right_shift",
}


def methods(functions, grad_mode, run) -> dict:
    """`<op>_` for each of OPS, COMPOSED, RESHAPING and ALIASES, the in-place operators, and `copy_`, over the
    side's `functions` (its registry ops and composed functions; `run(op)`: the side's `op.call`, for the views an
    in-place op rebases: engine.views) and `grad_mode` (`engine.grad_mode.GradMode`)."""
    setitem, cast, where = functions["setitem"], functions["cast"], functions["where"]

    def update(self, name, op, args, kwargs):
        if INFERENCE_MADE:
            grad_mode.refuse_inference(self, INFERENCE_INPLACE)
        recording = grad_mode.is_enabled()
        if recording and self._node is None and self.requires_grad:
            views.check_unrecorded(self)  # (a view made in no_grad mode)
            raise RuntimeError(LEAF_INPLACE)
        if name == "float_power" and self.dtype != numpy.float64:
            raise RuntimeError(
                f"the base given to float_power_ has dtype {promotion.type_name(self.dtype)} but the operation's "
                "result requires dtype Double"
            )
        if name not in ("tril", "triu", "masked_fill"):  # (PyTorch's do not refuse, masked_fill warns)
            views.check_overlap(self)
        old = self._snapshot()
        result = op(old, *[old if a is self else a for a in args], **kwargs)
        if name in RESHAPING:
            return _reshaped(self, result, recording, run)
        if tuple(result.shape) != tuple(self.shape):
            raise RuntimeError(
                f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(result.shape)}"
            )
        if result.dtype != self.dtype:
            if not promotion.can_cast(result.dtype, self.dtype):
                raise RuntimeError(
                    f"result type {promotion.type_name(result.dtype)} can't be cast to the desired output type "
                    f"{promotion.type_name(self.dtype)}"
                )
            if recording and self.requires_grad and name in COMPARISONS:  # `h.lt_(0)`: zero gradient, as torch
                result = where(
                    cast(result, dtype="bool") & False, old, cast(result, dtype=numpy.dtype(self.dtype).name)
                )
            if recording and result.requires_grad:
                result = cast(result, dtype=numpy.dtype(self.dtype).name)
        if recording and result.requires_grad:
            self._assign_recorded(result, run)
        else:
            self._assign_values(Ellipsis, result, setitem)
        return self

    def inplace(name):
        op = functions[name]

        def method(self, *args, **kwargs):
            return update(self, name, op, args, kwargs)

        method.__name__ = method.__qualname__ = name + "_"
        method.__doc__ = f"In place: this Variable becomes `{name}(self, ...)` (PyTorch's rules; see engine.inplace)."
        return method

    out = {name + "_": inplace(name) for name in (*OPS, *COMPOSED, *RESHAPING)}
    out.update({alias + "_": out[name + "_"] for alias, name in ALIASES.items() if name + "_" in out})
    for dunder, name in OPERATORS.items():
        out[dunder] = out[name + "_"]

    def copy_(self: V, source: Operand, non_blocking: bool = False) -> V:
        """Copy `source` (broadcast, cast) into this Variable; differentiable, like `x[...] = source`."""
        self[...] = source
        return self

    out["copy_"] = copy_
    return out


def _reshaped(self, result, recording, run):
    """`x.t_()`: the Variable takes the result's shape; recorded where it requires grad, else its storage is
    replaced (a leaf stays a leaf)."""
    if recording and result.requires_grad:
        self._assign_recorded(result, run)
        return self
    self.data = result.data
    self._version += 1
    return self
