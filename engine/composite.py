"""The grad_fn a composite op's call gets: PyTorch's name (t() TBackward0, softmax SoftmaxBackward0:
`engine.grad_fn_names`) on its last primitive's node, and whether a backward through it needs saved
values, learnt by running the call on the engine, so that a lazy client names its nodes as the engine does."""

from __future__ import annotations

import math

import numpy

from engine.autograd import reachable
from engine.grad_fn_names import call_name
from engine.grad_mode import enable_grad
from engine.registry import OpDef
from engine.variable import Variable

PROBE_MAX_ELEMENTS = 1 << 16
_FOUND: dict = {}  # (op, shapes, dtypes, attrs) -> (name, saves)


def _probe(op: OpDef, shapes, dtypes, attrs):
    """Run on zeros of the call's shapes when they are small, else on the op's first registry sample."""
    if sum(math.prod(s) for s in shapes) <= PROBE_MAX_ELEMENTS:
        arrays = [numpy.zeros(s, d) for s, d in zip(shapes, dtypes)]
    else:
        sample, rng = op.samples[0], numpy.random.default_rng(0)
        arrays = (
            sample.make(rng)
            if sample.make is not None
            else [rng.uniform(sample.low, sample.high, s) for s in sample.shapes]
        )
        attrs = op.check_attrs(dict(sample.attrs))
    inputs = [Variable(a, requires_grad=a.dtype.kind == "f") for a in map(numpy.asarray, arrays)]
    with enable_grad(), numpy.errstate(all="ignore"):
        node = op.call(inputs, attrs).grad_fn
    nodes, _ = reachable([node])
    saves = any(
        getattr(n, "op", None) is None or n.op.saves is True or bool(n.op.saves and len(n.saved[n.op.saves]))
        for n in nodes
    )
    return node.name, saves


def composite_grad_fn(op: OpDef, shapes, dtypes, attrs) -> tuple[str, bool]:
    """(grad_fn name, whether a backward through it needs saved values) of a composite op's call
    on inputs of `shapes` and `dtypes` (dtype strings); a call that fails keeps the default name."""
    key = (op.name, tuple(map(tuple, shapes)), tuple(dtypes), repr(attrs))
    if key not in _FOUND:
        try:
            found = _probe(op, key[1], key[2], attrs)
        except Exception:  # noqa: BLE001 - the op's default name, saving values
            found = call_name(op.name, attrs, (), None), True
        if len(_FOUND) > 4096:
            _FOUND.clear()
        _FOUND[key] = found
    return _FOUND[key]
