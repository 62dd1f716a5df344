"""Views on the client, PyTorch's as the engine's (`engine.views`): the results of `getitem` (without index
arrays), `reshape`, `permute` and their composites are noted as views of their root base, and an in-place op
recorded in grad mode on a view, or on a base with live views, records `copy_slices` as the base's new value and
each live view's steps replayed on it. Outside grad mode an assignment into a view is written into its root base
at the view's positions, and each other live view is its steps replayed on the root (`written_through`: the
client's views hold no memory of their base's, so this stands for the memory they would share)."""

from __future__ import annotations

import math

import numpy

from client.state import enable_grad, no_grad
from engine.api import OPS, check_rebase, live, positions, variable_of, view_of


def assign_recorded(v, other, run) -> bool:
    """`v` (a view, or a base with live views) stands for `other`, and its family with it; False when `v` has
    no family. `run(op)(inputs, attrs)` records an op."""
    members = live(v)
    if not members:
        return False
    info = view_of(v)
    root = info.base if info is not None else v
    if info is not None:
        check_rebase(info, root._data is not None and root._requires_grad)
        flat = variable_of(numpy.arange(math.prod(root.shape)).reshape(root.shape))
        index = type(root)._leaf(positions(flat, info.steps))
        root._stand_for(run(OPS["copy_slices"])([root._snapshot(), other, index], {}))
    else:
        v._stand_for(other)
    for view in members:
        steps = view_of(view)
        if steps is not None and steps.base is root and steps.grad_mode:
            replayed = root
            for op, extras, attrs in steps.steps:
                replayed = run(op)([replayed, *extras], attrs)
            view._stand_for(replayed)
    bump(v)
    return True


def written_through(v, setitem) -> None:
    """After `v` was assigned into outside autograd: its root base takes the view's values at its positions, the
    family's other live views are replayed on the root, and the version counters move
    together."""
    members = live(v)
    if not members:
        return
    root, info, version = members[0], view_of(v), v._version  # (the family's, moved on once by the assignment)
    if info is not None:
        flat = variable_of(numpy.arange(math.prod(root.shape)).reshape(root.shape))
        root._assign_own(numpy.unravel_index(positions(flat, info.steps), root.shape), v, setitem)
    for view in members[1:]:
        steps = view_of(view)  # (None: a detached member, no view)
        if (
            view is not v and steps is not None
        ):  # replayed in grad mode when it has a grad_fn, to keep one (into the root)
            replayed = root
            with enable_grad() if view._node is not None else no_grad():
                for op, extras, attrs in steps.steps:
                    replayed = type(v)._run(op)([replayed, *extras], attrs)
            if replayed._data is None:
                view._stand_for(replayed)
            else:
                view._data, view._value, view._shared = replayed._data, None, False
    for member in members:  # (writing the root moved them on again: one assignment, one version)
        member._version = version


def bump(v):
    """Move `v`'s version counter on, and its family's (its views, its base's, detached ones: PyTorch's)."""
    version = v._version + 1
    for member in live(v) or (v,):
        member._version = version


def _laid_out(v):
    """`v`'s steps replayed on an engine array of its root base's shape when `v` is a view, else None: the engine
    keeps PyTorch's strides, which the client's Variables don't hold (transpose, step slices, expand)."""
    info = view_of(v)
    if info is None:
        return None
    out = variable_of(numpy.empty(info.base.shape, "u1"))  # (its values never matter: only strides)
    for op, extras, attrs in info.steps:
        out = op.call([out, *extras], attrs)
    return out


def layout_methods() -> dict:
    """PyTorch's `view`, `view_as`, `contiguous` and `is_contiguous` of a client Variable, decided on `_laid_out`."""

    def is_contiguous(self, memory_format=None) -> bool:
        laid = _laid_out(self)
        return laid is None or laid.is_contiguous()

    def view(self, *shape, **kwargs):
        if not is_contiguous(self):
            _laid_out(self).view(*shape, **kwargs)  # PyTorch's refusal where its strides can't take the shape
        return self.reshape(*shape, **kwargs)

    def contiguous(self, memory_format=None):
        return self if is_contiguous(self) else self.clone()

    return {
        "is_contiguous": is_contiguous,
        "view": view,
        "contiguous": contiguous,
        "view_as": lambda s, o: view(s, o.shape),
    }
