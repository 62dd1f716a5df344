"""Indexing: `x[key]`, its adjoint (`index_add`) and in-place assignment (`setitem`).

Index arrays (integer or boolean) travel as extra inputs after the data inputs; the `index`
attribute says where each goes (see `engine.indexing`).
"""

from __future__ import annotations

import numpy

from engine import costs, indexing, shapes, views
from engine.attrs import Attr
from engine.node import Node, next_seq
from engine.registry import OPS, Sample, coerce, defop
from engine.variable import Variable, as_array

INDEX = Attr("index", doc='index items: int, null, "...", {"slice": [start, stop, step]}, {"tensor": k}')


def _arity(data_inputs):
    def check(count, attrs):
        expected = data_inputs + indexing.tensor_count(attrs["index"])
        return None if count == expected else f"takes {expected} input(s) for this index, got {count}"

    return check


def _index_arrays(arrays):
    return [a if a.dtype.kind in "biu" else a.astype(numpy.int64) for a in arrays]


def _key(spec, arrays):
    return indexing.to_key(spec, _index_arrays(arrays))


def _torch_index_error(error, x_shape, spec, arrays) -> IndexError:
    """NumPy's IndexError in PyTorch's words: the shape rule's (too many indices, a mask of the wrong shape), else
    NumPy's for an index array out of range, which names a dimension as PyTorch does."""
    try:
        shapes.index_result(x_shape, spec, [a.shape for a in arrays], [a.dtype for a in arrays])
    except shapes.DimensionError as refusal:
        return refusal
    return IndexError(str(error).replace(" for axis ", " for dimension "))


def _getitem_forward(xp, x, *arrays, index):
    try:
        out = x[_key(index, arrays)]
    except IndexError as error:
        raise _torch_index_error(error, x.shape, index, arrays) from None
    if not arrays and not isinstance(out, xp.ndarray):  # a single element: a 0-d view, as PyTorch's
        out = x[(*_key(index, arrays), Ellipsis)]
    return out


def _getitem_vjp(g, ans, xs, needs, index):
    x, arrays = xs[0], xs[1:]
    if not needs[0]:
        return [None] * len(xs)
    return [apply(OPS["index_add"], [g, *arrays], {"index": index, "shape": tuple(x.shape)})] + [None] * len(arrays)


def _index_add_forward(xp, g, *arrays, index, shape):
    out = xp.zeros(shape, dtype=g.dtype)
    key = _key(index, arrays)
    if arrays:
        xp.add.at(out, key, g)
    else:
        out[key] = g
    return out


def _index_add_vjp(g, ans, xs, needs, index, shape):
    return [take(g, index, xs[1:]) if needs[0] else None] + [None] * (len(xs) - 1)


def _setitem_forward(xp, x, value, *arrays, index):
    out, key = x.copy(), _key(index, arrays)
    try:
        out[key] = value
    except (IndexError, ValueError) as error:
        raise assignment_refusal(error, x, value, index, arrays) from None
    return out


def refused_assignment(error, x, key, value) -> Exception:
    """`assignment_refusal` of Variable x's x[key] = value (the error itself where its words cannot be read)."""
    try:
        spec, arrays = indexing.from_key(key, as_array)
        return assignment_refusal(error, as_array(x), as_array(value), spec, arrays)
    except Exception:
        return error


def assignment_refusal(error, x, value, spec, arrays) -> Exception:
    """NumPy's refusal of x[key] = value in PyTorch's words and type: an index out of range, or a value that does
    not broadcast to the positions (expand's refusal; index_put's with index arrays)."""
    if isinstance(error, IndexError):
        return _torch_index_error(error, x.shape, spec, arrays)
    key = _key(spec, arrays)
    if arrays:
        got = f"value tensor of shape {list(numpy.shape(value))} cannot be broadcast to indexing result of shape"
        return shapes.ShapeMismatch(f"shape mismatch: {got} {list(x[key].shape)}")
    try:
        shapes.expand(
            [numpy.shape(value)], [numpy.result_type(getattr(value, "dtype", value))], {"shape": x[key].shape}
        )
    except shapes.ShapeError as refusal:
        return shapes.as_raised(refusal)
    return error


def _setitem_vjp(g, ans, xs, needs, index):
    arrays = xs[2:]
    gx = apply(OPS["setitem"], [g, 0.0, *arrays], {"index": index}) if needs[0] else None
    gv = take(g, index, arrays) if needs[1] else None
    return [gx, gv] + [None] * len(arrays)


def _copy_slices_forward(xp, base, value, positions):
    out = base.copy()
    out.reshape(-1)[positions] = value
    return out


def _copy_slices_vjp(g, ans, xs, needs):
    positions = xs[2]
    gbase = apply(OPS["copy_slices"], [g, 0.0, positions], {}) if needs[0] else None
    gvalue = take(g.reshape(-1), ({"tensor": 0},), [positions]) if needs[1] else None
    return [gbase, gvalue, None]


def _infer_index(data_inputs):
    """The result shape of indexing input 0 (getitem) or `attrs["shape"]` (index_add) by the index
    spec, symbolically: index arrays contribute only their shapes (see `shapes.index_result`)."""

    def infer(shapes_, dtypes, attrs):
        index_dtypes = [numpy.dtype(d) for d in dtypes[data_inputs:]]
        target = tuple(attrs["shape"]) if "shape" in attrs else tuple(shapes_[0])
        result = shapes.index_result(target, attrs["index"], shapes_[data_inputs:], index_dtypes)
        if data_inputs == 1 and "shape" not in attrs:
            return result, dtypes[0]
        value = shapes_[data_inputs - 1] if "shape" not in attrs else shapes_[0]
        if not isinstance(result, shapes.Bounded):
            try:
                numpy.broadcast_shapes(tuple(value), result)
            except ValueError:
                if "shape" not in attrs and len(shapes_) == data_inputs:  # PyTorch's refusal is expand's
                    shapes.expand([value], dtypes[1:], {"shape": result})
                got = f"value tensor of shape {list(value)} cannot be broadcast to indexing result of shape"
                raise shapes.ShapeError(f"shape mismatch: {got} {list(result)}") from None
        return target, dtypes[0] if "shape" in attrs else numpy.result_type(dtypes[0])

    return infer


def _index_scratch(in_metas, out_meta, attrs):
    """The default, and a boolean mask's positions: `add.at` (index_add, getitem's vjp) takes the
    mask's nonzero() indices, int64 per dimension of each true element (its size bounds them)."""
    scratch = costs.default_scratch(in_metas, out_meta, attrs)
    masks = sum(costs.numel(shape) * len(shape) * 8 for shape, dtype in in_metas if numpy.dtype(dtype) == bool)
    return costs.Scratch(scratch.forward + masks, scratch.kept, scratch.backward + masks)


def _pick_sample(rng):
    return [rng.uniform(-2, 2, (4, 3)), numpy.array([0, 2, 2, 3])]


def _mask_sample(rng):
    return [rng.uniform(-2, 2, (3, 4)), rng.random((3, 4)) > 0.5]


def apply(op, inputs, attrs):
    return op.call(coerce(inputs), attrs)


def take(x, spec, arrays=()):
    return apply(OPS["getitem"], [x, *arrays], {"index": tuple(spec)})


def getitem(x, key):
    """x[key] with ints, slices (with steps), None, ..., and integer or boolean arrays."""
    spec, arrays = indexing.from_key(
        key, lambda a: a if isinstance(a, Variable) else Variable._result(as_array(a), None)
    )
    return apply(OPS["getitem"], [x, *arrays], {"index": spec})


def setitem(x, value, key):
    """x with x[key] = value, out of place (Variable.__setitem__ builds in-place on it)."""
    spec, arrays = indexing.from_key(
        key, lambda a: a if isinstance(a, Variable) else Variable._result(as_array(a), None)
    )
    return apply(OPS["setitem"], [x, value, *arrays], {"index": spec})


# The vjps read only the index arrays (x and value contribute their shapes), so `saves` names those
# inputs: in-place changes to x or value after the call don't invalidate the graph, as in PyTorch.
defop(
    "getitem",
    _getitem_forward,
    vjp=_getitem_vjp,
    variadic=True,
    attrs={"index": INDEX},
    methods=(),
    check_arity=_arity(1),
    function=getitem,
    infer=_infer_index(1),
    saves=slice(1, None),
    scratch=_index_scratch,
    view=True,
    samples=(
        Sample(((4, 5),), {"index": (1,)}),
        Sample(((4, 5),), {"index": ({"slice": [None, None, 2]}, {"slice": [1, 4, None]})}),
        Sample(((4, 5),), {"index": (None, "...", -1)}),
        Sample(make=_pick_sample, attrs={"index": ({"tensor": 0},)}),
        Sample(make=_mask_sample, attrs={"index": ({"tensor": 0},)}),
    ),
    doc="x[index]",
)
defop(
    "index_add",
    _index_add_forward,
    vjp=_index_add_vjp,
    variadic=True,
    attrs={"index": INDEX, "shape": Attr("shape")},
    methods=(),
    check_arity=_arity(1),
    saves=slice(1, None),
    infer=_infer_index(1),
    scratch=_index_scratch,
    samples=(
        Sample(
            ((3,),),
            {"index": ({"tensor": 0},), "shape": (5,)},
            make=lambda rng: [rng.uniform(-2, 2, (3,)), numpy.array([0, 4, 0])],
        ),
    ),
    doc="zeros(shape) with g added at [index] (the adjoint of getitem; repeated indices add up)",
)
defop(
    "setitem",
    _setitem_forward,
    vjp=_setitem_vjp,
    variadic=True,
    attrs={"index": INDEX},
    methods=(),
    check_arity=_arity(2),
    saves=slice(2, None),
    function=setitem,
    infer=_infer_index(2),
    samples=(
        Sample(((4, 5), (5,)), {"index": (1,)}),
        Sample(((4, 5), ()), {"index": ({"slice": [1, 3, None]},)}),
        Sample(
            make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, ()), rng.random((3, 4)) > 0.5],
            attrs={"index": ({"tensor": 0},)},
        ),
    ),
    doc="a copy of x with x[index] = value",
)
# PyTorch's CopySlices: a base whose view was modified in place (engine.views); `positions` are the view's
# elements' flat indices in the base (distinct), `value` the view's new values
defop(
    "copy_slices",
    _copy_slices_forward,
    vjp=_copy_slices_vjp,
    arity=3,
    named_inputs=("base", "value", "positions"),
    methods=(),
    saves=slice(2, None),
    infer=lambda shapes_, dtypes, attrs: (tuple(shapes_[0]), dtypes[0]),
    samples=(
        Sample(
            make=lambda rng: [rng.uniform(-2, 2, (3, 4)), rng.uniform(-2, 2, (2, 2)), numpy.array([[1, 5], [2, 11]])]
        ),
    ),
    doc="a copy of base with the elements at flat `positions` replaced by value (a view's in-place change)",
)
views.COPY_SLICES.append(OPS["copy_slices"])


class NoGradView(Node):
    """A view made in no_grad mode whose family changed in place (`engine.views.stale`): its backward refuses."""

    __slots__ = ()
    next = next_seq

    def vjp(self, grad, needs):
        raise RuntimeError(views.STALE)


views.CLASSES.update(Variable=Variable, NoGradView=NoGradView)
