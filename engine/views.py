"""Views, PyTorch's: `x[1:3]`, `x.view(2, 2)`, `x.t()`, `x.unbind()`... share their base's memory and version
counter, and an in-place change of a view changes its base (values and history) and the other way round.

The registry's `getitem`, `reshape` and `permute` are declared `view=True` (every other view is composed of
them): when a call's result shares its input's memory (`track`), it remembers its root base and the steps that
make it from that base (`View`), and the root keeps weak references to its live views, both in `KNOWN` (by id,
dropped when the Variable goes): nothing else pays.

An in-place op on a view V of root B (`assign_recorded`) runs as the out-of-place op on V (`engine.inplace`, the
surface's `__setitem__`); then `copy_slices(B, result, positions)`, a differentiable "B with V's elements
replaced" (`engine.ops.indexing`), is B's new history (PyTorch's `CopySlices`), the values are written
through V's memory, and every live view's node is its steps replayed on the new B. Version counters move
together (`bump`), so a graph that saved a view refuses a backward after its base changed, as PyTorch's does.
"""

from __future__ import annotations

import math
import threading
import weakref
from contextlib import contextmanager
from typing import Any

import numpy

from engine import backend
from engine.grad_mode import state as grad_state
from engine.indexing import from_key, to_key

VIEW_OF_LEAF = "a view of a leaf Variable that requires grad is being used in an in-place operation."
MULTIPLE = (
    "Output {index} of {function} is a view and is being modified inplace. This view is the output of a function "
    "that returns multiple views. Such functions do not allow the output views to be modified inplace. You should "
    "replace the inplace operation by an out-of-place one."
)
OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)
NO_GRAD = (
    "A view was created in no_grad mode and is being modified inplace with grad mode enabled. Given that this use "
    "case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view and the "
    "inplace either both inside the no_grad block (if you don't want the inplace to be tracked) or both outside "
    "(if you want the inplace to be tracked)."
)
STALE = NO_GRAD.replace("is being", "its base or another view of its base has been")  # (then used)
COPY_SLICES: list = []  # the `copy_slices` op (`engine.ops.indexing` declares it)
CLASSES: dict = {}  # "Variable" and "NoGradView" (`stale`'s nodes), given by `engine.ops.indexing` (no import cycle)
KNOWN: dict = {}  # id(Variable) -> its View (a view) or [its own weak reference, its views'...] (a base of views)


class _Together(threading.local):
    stack: list | None = None  # (function name, next output index) while `multiple` makes its views


TOGETHER = _Together()


class _Ref(weakref.ref):
    """A weak reference that drops its Variable's entry in KNOWN when the Variable goes."""

    __slots__ = ("key",)


def _forget(ref, known=KNOWN):  # (bound now: at interpreter exit the module's globals may be gone first)
    known.pop(ref.key, None)


def _ref(v):
    ref = _Ref(v, _forget)
    ref.key = id(v)
    return ref


class View:
    """What a view knows: its root `base`, the `steps` (op, extra inputs, attrs) that make it from the base,
    whether grad mode was on when it was made, and (`multiple`) the function and output index of a
    function returning several views (unbind, split, chunk), whose outputs refuse in-place ops."""

    __slots__ = ("base", "steps", "grad_mode", "multiple")
    base: Any
    steps: tuple
    grad_mode: bool
    multiple: tuple | None


def track(op):
    """`op.call`, the result remembered as a view of its first input when it shares that input's memory."""
    call = op.call

    def call_tracking(inputs, attrs):
        result = call(inputs, attrs)
        out, x = result._data.base, inputs[0]._data
        if out is not None and (out is x or out is x.base):
            note(inputs[0], result, (op, inputs[1:], attrs), grad_state.enabled)
            result._requires_grad = inputs[0]._requires_grad  # (made in no_grad mode: PyTorch's is a leaf)
            if grad_state.inference and not inputs[0].is_inference():  # (a normal tensor's view is one, as PyTorch's)
                result._inference = False
            if type(x) is numpy.ndarray and x.flags.writeable:
                result._data.flags.writeable = True  # (NumPy's diagonal and expand are read-only, PyTorch's not)
        return result

    op.untracked = call
    return call_tracking


def note(parent, result, step, grad_mode):
    """Make `result` a view of `parent`'s root base, `step` away from `parent` (made in `grad_mode`)."""
    view = View()
    info = KNOWN.get(id(parent))
    if type(info) is View:
        view.base, view.steps, view.multiple = info.base, (*info.steps, step), info.multiple
    else:
        view.base, view.steps, view.multiple = parent, (step,), None
    view.grad_mode = grad_mode
    view.multiple = made_together() or view.multiple
    base = view.base
    result._version = base._version
    KNOWN[id(result)] = view
    family = info if type(info) is list else KNOWN.get(id(base))
    if family is None:
        family = KNOWN[id(base)] = [_ref(base)]
    _join(family, result)
    return result


def _join(family, v):
    """Add `v` to `family`, dropping its dead members every 16 joins (a base viewed or detached every step)."""
    if not len(family) % 16:
        family[1:] = [ref for ref in family[1:] if ref() is not None]
    family.append(_ref(v))


def made_together():
    """(function, output index) of the view being made inside `multiple`, else None."""
    stack = TOGETHER.stack
    if not stack:
        return None
    name, index = stack[-1]
    stack[-1] = (name, index + 1)
    return name, index


@contextmanager
def multiple(name):
    """The views made inside are the outputs of `name`, a function returning several (see `View`)."""
    if TOGETHER.stack is None:
        TOGETHER.stack = []
    TOGETHER.stack.append((name, 0))
    try:
        yield
    finally:
        TOGETHER.stack.pop()


def view_of(v):
    """`v`'s View when it is a view, else None."""
    info = KNOWN.get(id(v))
    return info if type(info) is View else None


VIEW_SIZE = (
    "view size is not compatible with input tensor's size and stride (at least one dimension spans across two "
    "contiguous subspaces). Use .reshape(...) instead."
)


def laid_out(v) -> bool:
    """Whether `v`'s array's strides are PyTorch's: a view of a row-major or `kept_layout` root, or such a copy."""
    info = KNOWN.get(id(v))
    root = info.base if type(info) is View else v if id(v) in LAID else None
    flags = getattr(root._data, "flags", None) if root is not None else None
    return flags is not None and (flags.c_contiguous or id(root) in LAID) and hasattr(v._data, "flags")


LAID: dict = {}  # id(Variable) -> its weak reference: the copies `kept_layout` made


def kept_layout(copy, like):
    """`copy` (new, of view `like`) laid out densely in the order of `like`'s strides unless expanded (PyTorch's
    clone with `preserve_format`: a transpose's copy is no more contiguous)."""
    shape, steps = copy.shape, strides(like)
    if steps is None or any(step == 0 and size > 1 for step, size in zip(steps, shape)):
        return copy
    order = sorted(range(len(shape)), key=lambda d: (steps[d], shape[d] != 1), reverse=True)  # outermost first
    data = backend.array_module(copy._data).empty([shape[d] for d in order], copy._data.dtype)
    data = data.transpose([order.index(d) for d in range(len(shape))])
    data[...] = copy._data
    copy._data, key = data, id(copy)
    LAID[key] = weakref.ref(copy, lambda ref, key=key, laid=LAID: laid.pop(key, None))
    return copy


def strides(v) -> tuple | None:
    """PyTorch's strides of a view `laid_out` (in elements), else None."""
    return tuple(step // v._data.itemsize for step in v._data.strides) if laid_out(v) else None


def strided(v) -> bool:
    """Whether view `v` is not contiguous (PyTorch's `is_contiguous()` False: a transpose, a step or an expand of
    its root base)."""
    return laid_out(v) and not v._data.flags.c_contiguous


DETACH_VIEW = (
    "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel (DDP) for training, "
    "and gradient_as_bucket_view is set as True, gradients are views of DDP buckets, and hence detach_() cannot be "
    "called on these gradients. To fix this error, please refer to the Optimizer.zero_grad() function in "
    "torch/optim/optimizer.py as the solution."
)


def base_of(v):
    """PyTorch's `v._base`: the root base of a view, None for any other Variable."""
    info = KNOWN.get(id(v))
    return info.base if type(info) is View else None


def live(v) -> list:
    """The root base of `v`'s family and its live views ([] when `v` is no view and has none)."""
    info = KNOWN.get(id(v))
    if info is None:
        return []
    family = KNOWN[id(info.base)] if type(info) is View else info
    family[:] = [ref for ref in family if ref() is not None]  # (a detached one may outlive the root)
    return [ref() for ref in family] if len(family) > 1 else []


def alias(source, result):
    """`result`, `source.detach()`, shares its memory and version counter (PyTorch's), a member of its family
    that is no view (its own views are its)."""
    info = KNOWN.get(id(source))
    family = KNOWN.get(id(info.base)) if type(info) is View else info
    if family is None:
        family = KNOWN[id(source)] = [_ref(source)]
    result._version, KNOWN[id(result)] = source._version, family
    _join(family, result)
    return result


def bump(members):
    """Move the shared version counter of a family on by one; a view made in no_grad mode that requires grad
    then refuses to be used in grad mode (`stale`)."""
    version = members[0]._version + 1
    for v in members:
        v._version = version
        info = KNOWN[id(v)]
        if type(info) is View and not info.grad_mode and v._requires_grad:
            v._node = stale(v)


def stale(v):
    """A node for view `v` whose family changed: its backward raises PyTorch's error (and its grad_fn read)."""
    node = CLASSES["NoGradView"]()
    node.edges, node.saved, node.retained, node.seq = (v,), (v,), None, node.next()
    return node


def assign_recorded(v, result) -> bool:
    """`v` (a view, or a base with live views) becomes `result`, in place: see the module docstring. False when
    `v` has no family (the caller's plain assignment then holds)."""
    members = live(v)
    if not members:
        return False
    info = KNOWN[id(v)]
    root = info.base if type(info) is View else v
    if type(info) is View:
        check_rebase(info, root._node is None and root._requires_grad)
        old = type(root)._result(root._data, root._node)
        old._requires_grad = root._requires_grad
        data = root._data
        xp = numpy if type(data) is numpy.ndarray else backend.array_module(data)
        flat = type(root)._result(xp.arange(data.size).reshape(data.shape), None)
        index = type(root)._result(positions(flat, info.steps), None)
        rebased = COPY_SLICES[0].call((old, result, index), {})
        v._data[...] = result._data
        root._node, root._requires_grad = rebased._node, True
    else:
        v._data[...] = result._data
        v._node, v._requires_grad = result._node, True
    bump(members)
    for view in members:
        info = KNOWN[id(view)]
        if type(info) is View and info.base is root and info.grad_mode:
            view._node, view._requires_grad = replay(root, info.steps)._node, True
    return True


def check_unrecorded(v):
    """PyTorch's error for a view made in no_grad mode of a base that requires grad, changed in grad mode
    with a value that requires none."""
    info = view_of(v)
    if info is not None and not info.grad_mode and grad_state.enabled and info.base._requires_grad:
        raise RuntimeError(NO_GRAD)


def check_overlap(v, key=Ellipsis) -> bool:
    """PyTorch's refusal to write `v[key]` where elements share a memory location (an expand's view), after its
    autograd errors; True when `v` is an expand's view (`v[key]` is then written as a view of its own)."""
    info = view_of(v)
    if info is None or all(op.name not in ("expand", "as_strided") for op, _, _ in info.steps):
        return False
    if grad_state.enabled and info.base.requires_grad:
        check_rebase(info, info.base.grad_fn is None)
    spec, arrays = from_key(key, lambda a: a)
    at = positions(
        CLASSES["Variable"]._leaf(numpy.arange(math.prod(info.base.shape)).reshape(info.base.shape)), info.steps
    )
    at = at[to_key(spec, ())] if not arrays else at[:0]  # (with index arrays PyTorch warns, and writes)
    if any(n > 1 and not numpy.diff(at, axis=d).any() for d, n in enumerate(at.shape)):  # a stride 0: torch's rule
        raise RuntimeError(OVERLAP)
    return not arrays


def check_rebase(info, leaf):
    """PyTorch's errors for an in-place op on view `info` recorded in grad mode (`leaf`: its base is a leaf
    that requires grad)."""
    if info.multiple is not None:
        name, index = info.multiple
        raise RuntimeError(MULTIPLE.format(index=index, function=name))
    if not info.grad_mode:
        raise RuntimeError(NO_GRAD)
    if leaf:
        raise RuntimeError(VIEW_OF_LEAF)


def positions(index, steps):
    """Where a view's elements are in its root base: the view's `steps` applied to `index`, a Variable of the
    base's flat indices in its shape (an array)."""
    for op, extras, attrs in steps:
        index = getattr(op, "untracked", op.call)((index, *extras), attrs)
    return index._data


def replay(root, steps):
    """The view `steps` make of `root`, recorded (its node reads `root`'s history now)."""
    v = root
    for op, extras, attrs in steps:
        v = op.untracked((v, *extras), attrs)
    return v


def snapshot_data(v):
    """The values an in-place op on `v` reads: a copy when `v` is in a family (its memory is written then)."""
    return v._data.copy() if live(v) else v._data
