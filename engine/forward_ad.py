"""`torch.autograd.forward_ad`: dual Variables and their tangents, op by op.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        primal_out, tangent_out = forward_ad.unpack_dual(y)

Tangents live in the active level (`DualLevel`: Variable -> tangent, weakly keyed), not on the
Variables. While a level is active, `engine.node.apply_op` and `Function.apply` call this module's
hook (`engine.node.FORWARD`) after each op: an output gets a tangent when one of its inputs has one.
A registry op's tangent comes from its vjps by the transpose trick (`engine.linearize`), so ops need
no jvp rules; a custom Function's from its `jvp(ctx, *tangents)` (what it saved with
`ctx.save_for_forward` is its `ctx.saved_tensors` there). One level at a time, as in PyTorch.
In-place updates of a dual Variable keep its old tangent.
"""

from __future__ import annotations

import inspect
import weakref
from collections import namedtuple
from contextlib import contextmanager

from engine import node as _node
from engine.function import Function
from engine.grad_mode import enable_grad
from engine.linearize import differentiable, keeps_graph, transpose_jvp, zeros_like
from engine.variable import Variable

UnpackedDualTensor = namedtuple("UnpackedDualTensor", "primal tangent")

JVP_MISSING = "You must implement the jvp function for custom autograd.Function to use it with forward mode AD."


class DualLevel:
    """The tangents of one forward-AD level, keyed by Variable identity, and by grad_fn node for
    Variables in a graph (a vjp that reads its op's output, e.g. tanh's, rebuilds that output
    from its node: it has the tangent too). Entries go with their Variables and nodes."""

    def __init__(self, index):
        self.index = index
        self.tangents = {}  # id(variable or node) -> (weak reference to it, tangent)

    def tangent(self, v):
        entry = self.tangents.get(id(v))
        if entry is not None and entry[0]() is v:
            return entry[1]
        node = v._node
        if node is not None:
            entry = self.tangents.get(id(node))
            if entry is not None and entry[0]() is node:
                return entry[1]
        return None

    def set(self, v, tangent):
        self._keep(v, tangent)
        if v._node is not None:
            self._keep(v._node, tangent)

    def _keep(self, obj, tangent):
        key = id(obj)
        tangents = self.tangents

        def forget(ref):
            if tangents.get(key, (None,))[0] is ref:
                del tangents[key]

        tangents[key] = (weakref.ref(obj, forget), tangent)

    # the hook that engine.node.apply_op and engine.function.Function.apply call
    def op(self, op, inputs, attrs, result):
        tangents = [self.tangent(v) for v in inputs]
        if not op.differentiable or result.dtype.kind != "f" or all(t is None for t in tangents):
            return
        keep = keeps_graph(inputs, tangents)
        with _paused(), enable_grad():
            xs = [x if t is None else differentiable(x) for x, t in zip(inputs, tangents)]
            out = op.call(xs, attrs)
            self.set(result, transpose_jvp([out], xs, tangents, keep)[0])

    def function(self, cls, ctx, args, result):
        tangents = [self.tangent(a) if isinstance(a, Variable) else None for a in args]
        if all(t is None for t in tangents):
            return
        if inspect.getattr_static(cls, "jvp", None) is inspect.getattr_static(Function, "jvp"):
            raise NotImplementedError(JVP_MISSING)
        tangents = [
            t if t is not None or not isinstance(a, Variable) else zeros_like(a) for a, t in zip(args, tangents)
        ]
        saved, versions = ctx.to_save, ctx._versions
        ctx.to_save = ctx.saved_for_forward
        ctx._versions = tuple(v._version if isinstance(v, Variable) else None for v in ctx.to_save)
        try:
            with _paused():
                out_tangents = cls.jvp(ctx, *tangents)
        finally:
            ctx.to_save, ctx._versions = saved, versions
        results = result if isinstance(result, tuple) else (result,)
        for result, tangent in zip(results, out_tangents if isinstance(out_tangents, tuple) else (out_tangents,)):
            if tangent is None or not isinstance(result, Variable):
                continue
            if not isinstance(tangent, Variable):
                tangent = Variable(tangent)
            if tuple(tangent.shape) != tuple(result.shape):
                raise RuntimeError(
                    f"{cls.__name__}.jvp returned a tangent of shape {list(tangent.shape)} for an output of shape "
                    f"{list(result.shape)}"
                )
            self.set(result, tangent)


_LEVELS: list = []  # the active level (one at most)


@contextmanager
def _paused():
    """No tangent propagation inside (the hook's own computations)."""
    hooks = list(_node.FORWARD)
    _node.FORWARD.clear()
    try:
        yield
    finally:
        _node.FORWARD[:] = hooks


def enter_dual_level() -> int:
    if _LEVELS:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    level = DualLevel(0)
    _LEVELS.append(level)
    _node.FORWARD[:] = [level]
    return level.index


def exit_dual_level(*, level=None):
    if not _LEVELS:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created")
    _LEVELS.pop().tangents.clear()
    _node.FORWARD.clear()


class dual_level:  # noqa: N801  (PyTorch's spelling)
    """Context manager of a forward-AD level: tangents exist inside it only."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()


def _level(level):
    if not _LEVELS:
        return None
    return _LEVELS[-1]


def check_dual(tensor, tangent, variable, level_open: bool) -> None:
    """make_dual's checks, PyTorch's errors: a level is open, both are `variable`s of floating dtypes
    and of the same shape."""
    if not level_open:
        raise RuntimeError(
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to enter_dual_level() first."
        )
    if not isinstance(tensor, variable) or not isinstance(tangent, variable):
        raise TypeError("make_dual expects Variables for the primal and the tangent")
    if tensor.dtype.kind != "f" or tangent.dtype.kind != "f":
        raise ValueError(
            f"Expected both tensor and its forward grad to be floating point or complex (got {tensor.dtype} and "
            f"{tangent.dtype})"
        )
    if tuple(tensor.shape) != tuple(tangent.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the original Tensor, this is "
            f"not supported. Tensor is of size {list(tensor.shape)} while the given forward gradient is of size "
            f"{list(tangent.shape)}."
        )


def make_dual(tensor, tangent, *, level=None):
    """A Variable with `tensor`'s values (a view: gradients flow to `tensor`) and `tangent` as its tangent."""
    current = _level(level)
    check_dual(tensor, tangent, Variable, current is not None)
    with _paused():
        dual = tensor.view_as(tensor)
    current.set(dual, tangent)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent): the values without the tangent (a view), and the tangent (None without one)."""
    current = _level(level)
    tangent = current.tangent(tensor) if current is not None and isinstance(tensor, Variable) else None
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with _paused():
        primal = tensor.view_as(tensor)
    return UnpackedDualTensor(primal, tangent)
