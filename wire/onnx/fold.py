"""ONNX ops computed at import time on values known then (shape arithmetic, constants).

Exporters compute reshape targets from `Shape` at run time (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape). The importer knows every shape but a dynamic one (a batch), so it computes
these at import: arrays of dtype object stand for partly known values, None where a dimension
is known only when a request comes. A fold returns the outputs' arrays, or None when the op
cannot be folded (then it is converted to graph nodes like any other). FOLD_MAX bounds what a
fold may produce.
"""

from __future__ import annotations

import math
import operator

import numpy

from wire.onnx.values import Dim, unknown

FOLD_MAX = 2**16  # elements a folded value may have


def _elementwise(fn):
    """fn on arrays, element by element through None for the object (partly known) ones."""
    lifted = numpy.frompyfunc(lambda a, b: _symbolic(fn, a, b) if unknown(a) or unknown(b) else fn(a, b), 2, 1)

    def run(a, b):
        if a.dtype == object or b.dtype == object:
            return lifted(a.astype(object), b.astype(object))
        return numpy.asarray(fn(a, b))

    return run


def _symbolic(fn, a, b):
    """fn on a Dim (a size known only when running) and an int or Dim: a product or an exact quotient, else None."""
    if a is None or b is None:
        return None
    other = b if isinstance(a, Dim) else a
    if fn is numpy.equal and not isinstance(other, Dim):  # a size is never -1 (an exporter's "keep this dim")
        return False if other < 0 else None
    if fn is operator.mul:
        return a.times(b) if isinstance(a, Dim) else b.times(a)
    return a.over(b) if fn is _divide and isinstance(a, Dim) else None


def _divide(a, b):
    if numpy.asarray(a).dtype.kind in "iub" and numpy.asarray(b).dtype.kind in "iub":
        quotient = numpy.trunc(numpy.true_divide(a, b))  # ONNX's integer division truncates
        return quotient.astype(numpy.int64) if isinstance(quotient, numpy.ndarray) else int(quotient)
    return numpy.true_divide(a, b)


BINARY = {
    "Add": operator.add,
    "Sub": operator.sub,
    "Mul": operator.mul,
    "Div": _divide,
    "Mod": numpy.mod,
    "Equal": numpy.equal,
    "Less": numpy.less,
    "Greater": numpy.greater,
    "LessOrEqual": numpy.less_equal,
    "GreaterOrEqual": numpy.greater_equal,
    "Max": numpy.maximum,
    "Min": numpy.minimum,
}
UNARY = {
    "Neg": numpy.negative,
    "Abs": numpy.abs,
    "Sqrt": numpy.sqrt,
    "Reciprocal": numpy.reciprocal,
    "Floor": numpy.floor,
    "Ceil": numpy.ceil,
    "Not": numpy.logical_not,
}


def _known(array) -> bool:
    return array.dtype != object or not any(unknown(v) for v in array.flat)


def _ints(array) -> list:
    return [int(v) for v in numpy.asarray(array).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def fold(op: str, arrays: list, attrs: dict, dtypes: list):
    """The outputs' arrays of ONNX op `op` on known inputs `arrays` (None for an absent optional
    input), or None when it is not folded; `dtypes` are the outputs' dtypes where ONNX says."""
    if _elements(op, [numpy.asarray(a) for a in arrays if a is not None], attrs) > FOLD_MAX:
        return None  # converted to graph nodes, whose cost the request budgets bound
    if op in BINARY and len(arrays) == 2:
        return [_elementwise(BINARY[op])(*arrays)]
    if op in ("Max", "Min", "Add", "Mul") and arrays:
        out = arrays[0]
        for other in arrays[1:]:
            out = _elementwise(BINARY[op])(out, other)
        return [out]
    if op in UNARY:
        return [UNARY[op](arrays[0])] if _known(arrays[0]) else None
    handler = FOLDS.get(op)
    return None if handler is None else handler(arrays, attrs, dtypes)


def _elements(op: str, arrays: list, attrs: dict) -> float:
    """How many elements op's result has at most, where it can be larger than every input: a
    broadcast of small inputs, a Gather, or a Concat of one small input many times."""
    if op == "Concat":
        return sum(a.size for a in arrays)
    if op == "Gather" and len(arrays) == 2:
        data, indices = arrays
        axis = _axis(attrs.get("axis", 0), data.ndim)
        return data.size // max(1, data.shape[axis]) * indices.size if 0 <= axis < data.ndim else math.inf
    if op in BINARY or op == "Where":
        try:
            return math.prod(numpy.broadcast_shapes(*(a.shape for a in arrays)))
        except ValueError:
            return math.inf
    return 0


def _identity(arrays, attrs, dtypes):
    return [arrays[0]]


def _cast(arrays, attrs, dtypes):
    if not _known(arrays[0]):
        return [arrays[0]] if dtypes[0] is not None and dtypes[0].kind in "iuf" else None  # arange(seq, dtype=float)
    if dtypes[0] is None:
        return None
    return [numpy.asarray(arrays[0].tolist() if arrays[0].dtype == object else arrays[0]).astype(dtypes[0])]


def _gather(arrays, attrs, dtypes):
    data, indices = arrays
    if not _known(indices):
        return None
    return [numpy.take(data, numpy.asarray(indices, dtype=numpy.int64), axis=attrs.get("axis", 0))]


def _concat(arrays, attrs, dtypes):
    parts = [a for a in arrays if a is not None]
    if any(p.dtype == object for p in parts):
        parts = [p.astype(object) for p in parts]
    return [numpy.concatenate(parts, axis=attrs["axis"])]


def _unsqueeze(arrays, attrs, dtypes):
    axes = _ints(arrays[1]) if len(arrays) > 1 and arrays[1] is not None else attrs.get("axes", [])
    rank = arrays[0].ndim + len(axes)
    return [numpy.expand_dims(arrays[0], tuple(sorted(_axis(a, rank) for a in axes)))]


def _squeeze(arrays, attrs, dtypes):
    axes = _ints(arrays[1]) if len(arrays) > 1 and arrays[1] is not None else attrs.get("axes")
    return [numpy.squeeze(arrays[0], axis=None if axes is None else tuple(axes))]


def _slice(arrays, attrs, dtypes):
    data = arrays[0]
    starts, ends = _ints(arrays[1]), _ints(arrays[2])
    axes = _ints(arrays[3]) if len(arrays) > 3 and arrays[3] is not None else list(range(len(starts)))
    steps = _ints(arrays[4]) if len(arrays) > 4 and arrays[4] is not None else [1] * len(starts)
    key = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        key[_axis(axis, data.ndim)] = slice(start, end, step)
    return [data[tuple(key)]]


def _reshape(arrays, attrs, dtypes):
    data, shape = arrays
    if not _known(shape):
        return None
    target = [data.shape[i] if s == 0 and not attrs.get("allowzero", 0) else s for i, s in enumerate(_ints(shape))]
    return [data.reshape(target)]


def _range(arrays, attrs, dtypes):
    if not all(_known(a) for a in arrays):
        return None
    start, limit, delta = (numpy.asarray(a).item() for a in arrays)
    if delta == 0 or max(0, math.ceil((limit - start) / delta)) > FOLD_MAX:
        return None
    return [numpy.arange(start, limit, delta, dtype=dtypes[0] or numpy.asarray(arrays[0]).dtype)]


def _where(arrays, attrs, dtypes):
    condition, x, y = arrays
    if not _known(condition):
        return None
    return [numpy.where(condition.astype(bool), x, y)]


def _expand(arrays, attrs, dtypes):
    data, shape = arrays
    if not _known(shape):
        return None
    target = numpy.broadcast_shapes(data.shape, tuple(_ints(shape)))
    if math.prod(target) > FOLD_MAX:
        return None
    return [numpy.broadcast_to(data, target).copy()]


def _transpose(arrays, attrs, dtypes):
    return [numpy.transpose(arrays[0], attrs.get("perm"))]


def _trilu(arrays, attrs, dtypes):
    k = int(numpy.asarray(arrays[1]).reshape(())) if len(arrays) > 1 and arrays[1] is not None else 0
    return [(numpy.triu if attrs.get("upper", 1) else numpy.tril)(arrays[0], k)] if _known(arrays[0]) else None


FOLDS = {
    "Identity": _identity,
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Reshape": _reshape,
    "Range": _range,
    "Where": _where,
    "Expand": _expand,
    "Transpose": _transpose,
    "Trilu": _trilu,
}
