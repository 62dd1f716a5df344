"""Views on the client, PyTorch's as the engine's (`engine.views`): the results of `getitem` (without index
arrays), `reshape`, `permute` and their composites are noted as views of their root base, and an in-place op
recorded in grad mode on a view, or on a base with live views, records `copy_slices` as the base's new value and
each live view's steps replayed on it. Outside grad mode a view's in-place change is its own (the client's views
hold no memory of their base's)."""

from __future__ import annotations

import math

import numpy

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


def bump(v):
    """Move `v`'s version counter on, and its family's (its views, its base's, detached ones: PyTorch's)."""
    version = v._version + 1
    for member in live(v) or (v,):
        member._version = version
