"""The client's side of the surface (`engine.surface`): how the client applies an op.

Embedded, an op whose result nothing needs recorded (no grad needed, every value at hand, no
trace) is computed at once on the engine (`eager`); otherwise it is recorded, its shape and dtype
by the op's registry rule, so a shape error is raised at the call. No op is named here: a new
registry op reaches the client with no client code. `install()` puts the surface on `client.Variable`.
"""

from __future__ import annotations

import functools
import operator
import weakref

import numpy

from client import state
from client.errors import TracingError
from client.graph import CONST, LEAF, OP, Node, Value, edge_of
from client.serialize import attrs_key
from client.variable import Variable, as_host_array
from client.views import layout_methods
from engine import backend
from engine.api import (
    GRAD_FN_BY_CALL,
    INFERENCE_MADE,
    OPS,
    Bounded,
    OpDef,
    Side,
    apply,
    array_of,
    composite_grad_fn,
    default_dtype,
    from_key,
    gives_floats,
    grad_fn_call_name,
    grad_fn_name,
    host_array,
    install_surface,
    make_function,
    note_view,
    promotion,
    reads_output,
    refuse_saved_inference,
    shape_proxy,
    to_key,
    variable_of,
)
from engine.api import ShapeError as EngineShapeError


class ShapeError(EngineShapeError):
    """An op's inputs don't fit its shape rule: raised when the op is called (nothing is sent)."""


# A ShapeError is also what PyTorch raises there (an `except RuntimeError` catches a shape mismatch): an IndexError
# for a dimension or an index out of range, a TypeError for an argument's type, else a RuntimeError.
_RAISED = {kind: type("ShapeError", (ShapeError, kind), {}) for kind in (RuntimeError, IndexError, TypeError)}


def coerce(inputs):
    """(Values, Variables-or-None) from a mix of Variables, arrays and Python scalars."""
    values = [(v._value if v._data is None else v._graph_value()) if type(v) is Variable else None for v in inputs]
    if None not in values:
        return values, inputs
    for i, v in enumerate(inputs):
        if values[i] is None and type(v) not in promotion.NUMBERS:
            values[i] = v._graph_value() if isinstance(v, Variable) else _array_value(v)
    if None in values:  # Python numbers: of the operands' result type, as the engine's coerce makes them
        dtype = promotion.of_operands([v if value is None else value for v, value in zip(inputs, values)])
        raised = dtype is not None and all(  # the numbers raised the category: `int_tensor * 2.5`
            w is None or promotion.CATEGORY[w.dtype.kind] < promotion.CATEGORY[dtype.kind] for w in values
        )
        for i, v in enumerate(inputs):
            if values[i] is None:
                values[i] = _constant(v, dtype, raised)
    return values, [v if isinstance(v, Variable) else None for v in inputs]


def _array_value(v) -> Value:
    array = as_host_array(v)
    return Value(LEAF, array.shape, array.dtype, array=array)


def _constant(v, dtype, raised) -> Value:
    """A Python number's Value, of the operands' result type `dtype` (None: alone: its own); the same number
    of the same dtype: the same Value, as values are immutable. Sent weak (its type, not its dtype), as the
    engine's coerce types it there, unless it raised the operands' category: then its dtype (the default
    dtype's, which a server may not share)."""
    dtype = host_array(v).dtype if dtype is None else dtype
    key = (type(v), float(v).hex() if isinstance(v, float) else v, dtype, raised)  # (-0.0 is not 0.0)
    constant = _CONSTANTS.get(key)
    if constant is None:
        weak = not raised and (isinstance(v, float) or type(v) is int)  # a numpy.float64 counts as a Python float
        value = float(v) if isinstance(v, float) else v
        constant = Value(CONST, (), dtype, attrs={"value": value, "dtype": None if weak else dtype})
        _remember(_CONSTANTS, key, constant)
    return constant


MEMO = 4096  # shape rules' results and scalars' Values remembered (all forgotten past it)
_INFERRED: dict = {}  # (op name, input shapes, dtypes, attributes' key) -> (shape, dtype) or None
_CONSTANTS: dict = {}  # (a Python number's type, its value, its dtype, whether it raised the category) -> its Value
_NODE_CLASSES: dict = {}  # op name, or (op name, grad_fn name, saves) for a composite op -> grad_fn class
_FLOATS: dict = {}  # OpDef -> gives_floats(op)
_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")  # (no Python frame per input)


def node_class(op: OpDef, values, attrs) -> type:
    """The grad_fn class of a recorded call, named and saving as the engine's node would be."""
    key: str | tuple = op.name
    if key in _NODE_CLASSES:  # an op whose nodes' name and saves don't depend on the call, seen before
        return _NODE_CLASSES[key]
    body = {"__slots__": (), "op": op, "saves": op.saves}
    if op.composite:  # the name and what it saves depend on the call
        name, body["saves"] = composite_grad_fn(op, [v.shape for v in values], [v.dtype.str for v in values], attrs)
        key = (op.name, name, str(body["saves"]))
    elif (
        op.name in GRAD_FN_BY_CALL
    ):  # PyTorch's name depends on the call (x.sum() SumBackward0, x.sum(1) SumBackward1):
        # the class named as the engine's, its `name` as the call's
        body["name"] = grad_fn_call_name(op.name, attrs, [v.requires_grad for v in values], [v.shape for v in values])
        key, name = (op.name, body["name"]), None  # (the class's name is the engine's, made once: below)
    else:
        name = grad_fn_name(op.name)
    cls = _NODE_CLASSES.get(key)
    if cls is None:
        cls = _NODE_CLASSES[key] = type(name or grad_fn_name(op.name), (Node,), body)
    return cls


def infer(op: OpDef, values, attrs):
    """(shape, dtype) by the op's registry rule (every op has one, a function of the shapes, dtypes and
    attributes: remembered); None when it depends on values."""
    shapes, dtypes = tuple(map(_SHAPE, values)), tuple(map(_DTYPE, values))
    key = (op.name, shapes, dtypes, attrs_key(attrs) if attrs else ())  # (no call for an op without attributes)
    inferred = _INFERRED.get(key, _INFERRED)
    if inferred is not _INFERRED:
        return inferred
    try:
        inferred = op.infer(list(shapes), list(dtypes), attrs)  # type: ignore[misc]
    except RuntimeError:  # a dtype the op refuses (engine.shapes.DtypeError): PyTorch's error, as the engine's
        raise
    except (ValueError, TypeError, IndexError) as err:  # a ShapeError is a ValueError
        described = ", ".join(str(list(v.shape)) for v in values)
        kind = next((k for k in (IndexError, TypeError) if isinstance(err, k)), RuntimeError)
        raise _RAISED[kind](f"{op.name}(): {err} (input shapes: {described})") from None
    if inferred is not None and isinstance(inferred[0], Bounded):  # a bound (a mask's result) is not a shape
        inferred = None
    _remember(_INFERRED, key, inferred)
    return inferred


def _remember(memo: dict, key, value) -> None:
    if len(memo) >= MEMO:
        memo.clear()
    memo[key] = value


def eager(op: OpDef, args, attrs: dict):
    """`op` computed now on the engine, as a data leaf, when nothing needs it recorded: the
    session is embedded, nothing is being traced, every Variable's value is at hand and none
    requires grad while grad mode is on. None otherwise, or when it fails (the recorded path
    then reports it as the client does: a ShapeError now, or the service's error on fetch)."""
    grad_on = state.mode.state.enabled
    datas = []
    for v in args:
        if isinstance(v, Variable):
            data = v._data
            if data is None:
                data = v._value.array
                if data is None or (grad_on and v._value.requires_grad):
                    return None
            elif grad_on and v._requires_grad:
                return None
            datas.append(data)
    if state.current_phase() is not None or not state.current_session().embedded:
        return None
    host = backend.xp is numpy
    data_of = iter(datas)
    inputs = [
        variable_of(next(data_of) if host else backend.to_active(next(data_of))) if isinstance(v, Variable) else v
        for v in args
    ]
    try:
        array = array_of(apply(op.name, inputs, attrs))
        array = array if host else backend.to_numpy(array)
    except Exception:  # noqa: BLE001 - reported by the recorded path
        return None
    view = not array.flags.owndata
    for data in datas:
        view = view or data is array
    return Variable._leaf(array, shared=view)  # a view of an input is copied before it is written


def record(op: OpDef, args, attrs: dict, rule=None) -> Variable:
    """Record `op` on `args` with checked `attrs`; nothing is computed or sent, unless the op's
    result shape depends on values (its rule returns None): then it is computed right away.
    `rule()`, when given, says the result's (shape, dtype) in place of the op's registry rule."""
    result = eager(op, args, attrs)
    if result is not None:
        return result
    floats = _FLOATS[op] if op in _FLOATS else _FLOATS.setdefault(op, gives_floats(op))
    if floats and not any(isinstance(v, float) or isinstance(v, Variable) and v.is_floating_point() for v in args):
        # integers in an op of floating results (`/`, `sqrt`): cast first to this side's default dtype, which
        # a server may not share (recorded casts; the engine casts them so too)
        dtype = {"dtype": default_dtype().name}
        args = [record(OPS["cast"], [v], dtype) if isinstance(v, Variable) else v for v in args]
    values, variables = coerce(args)
    if (op.check_arity is not None or op.arity != len(values)) and (problem := op.arity_error(len(values), attrs)):
        raise TypeError(f"{op.name}() {problem}")
    meta = infer(op, values, attrs) if rule is None else rule()
    phase = state.current_phase()
    if meta is None:
        if phase is not None:
            raise TracingError(f"{op.name}(): the shape of its result depends on values, which a trace can't know")
        value = Value(OP, (), values[0].dtype if values else numpy.float64, op=op, inputs=values, attrs=attrs)
        state.current_session().fetch_values([value])
    else:
        value = Value(OP, meta[0], meta[1], op=op, inputs=values, attrs=attrs, phase=phase)
    result = Variable._lazy(value)
    if (
        op.differentiable
        and value.dtype.kind == "f"
        and state.mode.state.enabled
        and any([v.requires_grad for v in values])
    ):  # noqa: C419 E501 - a list is faster
        cls = _NODE_CLASSES.get(op.name) or node_class(op, values, attrs)  # (the common case without a call)
        node = value.node = cls([v.node if v.node is not None else edge_of(v) for v in values], value, variables)
        if INFERENCE_MADE and node.saves is not False:
            refuse_saved_inference(variables, node.saves)
        value.requires_grad = True
        if op.uses_output and reads_output(op, node.edges):
            node.out_ref = weakref.ref(result)
    return result


def _index_variable(a):
    return a if isinstance(a, Variable) else Variable._leaf(as_host_array(a))


def _masked_meta(x, spec, arrays):
    """The shape of x[key] when the key has boolean arrays: it depends on how many are true,
    so the masks' values are needed (fetched in one /forward when they are computed ones)."""
    lazy = [a for a in arrays if a.dtype == numpy.bool_ and not a._has_value]
    if lazy:
        state.current_session().fetch(*lazy)
    real = []
    for a in arrays:
        array = a._array() if a.dtype == numpy.bool_ or a._has_value else shape_proxy(a.shape, a.dtype)
        real.append(array if array.dtype.kind in "biu" else array.astype(numpy.int64))
    try:
        out = shape_proxy(x.shape, x.dtype)[to_key(spec, real)]
        return tuple(out.shape), numpy.dtype(out.dtype)
    except (IndexError, ValueError, TypeError) as err:
        raise _RAISED[IndexError](f"getitem(): index {list(spec)} does not fit shape {list(x.shape)}: {err}") from None


def getitem(x, key):
    """x[key] with ints, slices (with steps), None, ..., and integer or boolean arrays."""
    op = OPS["getitem"]
    spec, arrays = from_key(key, _index_variable)
    masked = (
        isinstance(x, Variable)
        and any(a.dtype == numpy.bool_ for a in arrays)
        and not any(a._data is None and a._value.phase is not None for a in arrays)
    )
    rule = functools.partial(_masked_meta, x, spec, arrays) if masked else None
    attrs = op.check_attrs({"index": spec})
    result = record(op, [x, *arrays], attrs, rule)
    return (
        result
        if arrays or not isinstance(x, Variable)
        else note_view(x, result, (op, (), attrs), state.is_grad_enabled())
    )


def setitem(x, value, key):
    """x with x[key] = value, out of place (Variable.__setitem__ builds in-place on it)."""
    op = OPS["setitem"]
    spec, arrays = from_key(key, _index_variable)
    return record(op, [x, value, *arrays], op.check_attrs({"index": spec}))


def stacked(rows, dim=0) -> Variable:
    """`stack(rows, dim)`, recorded (for the client's own batched results: is_grads_batched, vmap)."""
    return record(OPS["stack"], list(rows), {"dim": dim})


# the registry's ops whose results are views (the engine's view=True ops, and composites of them the client records)
VIEWS = ("reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "flatten", "diagonal", "expand", "as_strided")


def _viewing(name):
    """The function of view op `name` (engine.views): its result a view of its input (client.views)."""
    op = OPS[name]

    def run(inputs, attrs):
        result = record(op, inputs, attrs)
        if isinstance(inputs[0], Variable):
            note_view(inputs[0], result, (op, (), attrs), state.is_grad_enabled())
        return result

    return make_function(op, lambda inputs: inputs, run)


def install(backward) -> dict:
    """Install the surface on client.Variable (backward: `client.autograd.backward`); the module-level names."""
    side = Side(
        Variable,
        lambda inputs: inputs,
        lambda op: functools.partial(record, op),
        state.mode,
        backward,
        as_host_array,
        functions={"getitem": getitem, "setitem": setitem, **{name: _viewing(name) for name in VIEWS}},
    )
    Variable._run = side.run
    surface = install_surface(side)
    for name, method in layout_methods().items():
        setattr(Variable, name, method)
    return surface
