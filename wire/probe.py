"""Which vjps a compiled program may call on plain arrays.

A vjp is written with differentiable engine ops on Variables (`engine.registry`); many are array
operators only (`g * y`, `-g`, `g / (ans * 2)`), which NumPy evaluates with the very ufuncs the
engine's ops call. Such a vjp is called on the arrays themselves, skipping a Variable per operand
and a dispatch per operator. Which ones qualify is decided by running the vjp both ways on probe
values of the node's shapes and dtypes: only a plain-array result with the same bits, dtype and
shape qualifies (a vjp that reads `._data`, calls an `F.` op or branches on values fails the probe).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy

from engine.grad_mode import no_grad
from engine.node import Meta
from engine.variable import Variable

DECISIONS = 4096  # decisions kept (LRU): one per op, needs, shapes, dtypes and attributes seen
MAX_ATTRS_CHARS = 512
_decided: OrderedDict = OrderedDict()
_lock = threading.Lock()


def _key(op, needs, inputs, out, attrs):
    try:
        attrs_key = tuple(sorted(attrs.items()))
        hash(attrs_key)
    except TypeError:
        return None
    if len(repr(attrs_key)) > MAX_ATTRS_CHARS:  # large attributes (index lists): decided afresh, not kept
        return None
    return op.name, needs, tuple((v.shape, v.dtype) for v in inputs), out.shape, out.dtype, attrs_key


def vjps_on_arrays(op, needs, inputs, out, attrs, saved):
    """Whether the wanted vjps of `op` (needs) give the same bits on arrays as on Variables, for
    inputs of these shapes and dtypes (`_Value`s) and output `out`; `saved` as the node keeps it.
    When they do: per input, the (shape, dtype) of its gradient (None where not wanted), which
    array operators decide from the operands' shapes and dtypes alone; else None."""
    if op.vjp is not None or any(v.dtype.kind != "f" for v in inputs) or out.dtype.kind != "f":
        return None
    key = _key(op, needs, inputs, out, attrs)
    with _lock:
        if key in _decided:
            _decided.move_to_end(key)
            return _decided[key]
    decided = _probe(op, needs, inputs, out, attrs, saved)
    if key is not None:
        with _lock:
            _decided[key] = decided
            while len(_decided) > DECISIONS:
                _decided.popitem(last=False)
    return decided


def _probe(op, needs, inputs, out, attrs, saved):
    rng = numpy.random.default_rng(0)
    data = [numpy.asarray(rng.uniform(0.5, 2.0, v.shape).astype(v.dtype)) for v in inputs]
    g = numpy.asarray(rng.uniform(-2.0, 2.0, out.shape).astype(out.dtype))
    with no_grad(), numpy.errstate(all="ignore"):
        ans = numpy.asarray(op.forward(numpy, *data, **attrs)) if op.uses_output else None
        kept = [d if type(s) is int else s for d, s in zip(data, saved)]
        wrapped = [Variable._result(k, None) if type(s) is int else s for k, s in zip(kept, saved)]
        metas = []
        for fn, need in zip(op.vjps, needs):
            if not need:
                metas.append(None)
                continue
            try:
                on_arrays = fn(g, ans, *kept, **attrs)
            except Exception:  # noqa: BLE001 - not array operators only
                return None
            expected = fn(
                Variable._result(g, None), None if ans is None else Variable._result(ans, None), *wrapped, **attrs
            )._data
            if not isinstance(on_arrays, (numpy.ndarray, numpy.generic)) or isinstance(on_arrays, Meta):
                return None
            on_arrays = numpy.asarray(on_arrays)
            if (
                on_arrays.dtype != expected.dtype
                or on_arrays.shape != expected.shape
                or on_arrays.tobytes() != expected.tobytes()
            ):
                return None
            metas.append((on_arrays.shape, on_arrays.dtype))
    return tuple(metas)
