"""Ops, derived from the engine's registry (`engine.registry.OPS`): nothing here names an op.

For every `OpDef` the client gets a function (`client.<name>`), its methods (`op.methods`) and
its operators (the dunders the engine installs with `binary_dunders`/`unary_dunder`, found by
looking at `engine.Variable`). Calling one records a node locally: its inputs, its attributes
(parsed and checked by the registry's own `_parse_call`/`OpDef.check_attrs`) and its shape and
dtype (by the op's `infer` rule, so a shape error is raised here, at the call). A new op in the
registry reaches the client with no client code.
"""

from __future__ import annotations

import math
import weakref
from collections import namedtuple

import numpy

from client.errors import TracingError
from client.grad_mode import current_phase, is_grad_enabled
from client.graph import CONST, LEAF, OP, FunctionNode, OpNode, Value, edge_of
from client.variable import Variable, as_host_array
from engine import shapes
from engine.indexing import from_key, to_key
from engine.registry import OPS, OpDef, _camel, _parse_call
from engine.shapes import ShapeError as EngineShapeError

FUNCTIONS: dict = {}


class ShapeError(EngineShapeError):
    """An op's inputs don't fit its shape rule: raised when the op is called (nothing is sent)."""


# --- coercion: the engine's `coerce`, over client values --------------------------------------


def _reference(inputs):
    first = None
    for v in inputs:
        if isinstance(v, Variable):
            if v.dtype.kind == "f":
                return v
            if first is None:
                first = v
    return first


def _scalar(v, ref):
    """A constant Value for a Python scalar, typed as the engine's coerce types it."""
    if ref is not None:
        dtype = numpy.result_type(ref.dtype, float(v) if isinstance(v, float) else v)
    else:
        dtype = as_host_array(v).dtype
    if isinstance(v, float):  # a numpy.float64 counts as a Python float (the engine's rule)
        v = float(v)
        weak = True
    else:
        weak = type(v) is int
    value = v.item() if isinstance(v, numpy.generic) else v
    return Value(CONST, (), dtype, attrs={"value": value, "dtype": None if weak else dtype})


def coerce(inputs):
    """(Values, Variables-or-None) from a mix of Variables, arrays and Python scalars."""
    ref = _reference(inputs)
    values, variables = [], []
    for v in inputs:
        if isinstance(v, Variable):
            values.append(v._graph_value())
            variables.append(v)
        elif isinstance(v, (bool, int, float)):
            values.append(_scalar(v, ref))
            variables.append(None)
        else:
            array = as_host_array(v)
            values.append(Value(LEAF, array.shape, array.dtype, array=array))
            variables.append(None)
    return values, variables


# --- node classes ----------------------------------------------------------------------------

_NODE_CLASSES: dict = {}


PROBE_MAX_ELEMENTS = 1 << 16
_PROBES: dict = {}


def _probe_composite(op: OpDef, shapes=None, dtypes=None, attrs=None):
    """(grad_fn name, whether a backward through it needs saved values) of a composite op, read
    off the engine: a composite's grad_fn is the last primitive it runs (t() gives
    PermuteBackward, logsumexp ReshapeBackward or AddBackward by keepdim). Probed on zeros of the
    call's shapes when they are small, else on the op's first registry sample."""
    import engine
    from engine.node import Node as EngineNode
    from engine.variable import Variable as EngineVariable

    if shapes is not None and sum(math.prod(s) for s in shapes) <= PROBE_MAX_ELEMENTS:
        arrays = [numpy.zeros(s, d) for s, d in zip(shapes, dtypes)]
    else:
        sample = op.samples[0]
        rng = numpy.random.default_rng(0)
        arrays = sample.make(rng) if sample.make is not None else [rng.uniform(sample.low, sample.high, s) for s in sample.shapes]
        attrs = op.check_attrs(dict(sample.attrs))
    inputs = [EngineVariable(numpy.asarray(a), requires_grad=numpy.asarray(a).dtype.kind == "f") for a in arrays]
    with engine.enable_grad(), numpy.errstate(all="ignore"):
        out = op.call(inputs, attrs)
    node = out.grad_fn
    saves, stack, seen = False, [node], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        op_saves = getattr(getattr(n, "op", None), "saves", True)
        saves = saves or op_saves is True or bool(op_saves and len(n.saved[op_saves]))
        stack.extend(e for e in n.edges if isinstance(e, EngineNode))
    return node.name, saves


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def node_class(op: OpDef, values=(), attrs=None) -> type:
    if op.composite:
        return _composite_node_class(op, values, attrs)
    cls = _NODE_CLASSES.get(op.name)
    if cls is None:
        cls = type(f"{_camel(op.name)}Backward", (OpNode,), {"__slots__": (), "op": op, "saves": op.saves})
        _NODE_CLASSES[op.name] = cls
    return cls


def _composite_node_class(op, values, attrs):
    shapes = tuple(v.shape for v in values)
    dtypes = tuple(v.dtype.str for v in values)
    key = (op.name, shapes, dtypes, _freeze(attrs or {}))
    cls = _PROBES.get(key)
    if cls is None:
        try:
            name, saves = _probe_composite(op, shapes, dtypes, attrs or {})
        except Exception:  # noqa: BLE001 - a probe that fails keeps the default name
            name, saves = f"{_camel(op.name)}Backward", True
        cls = _NODE_CLASSES.get((op.name, name, saves))
        if cls is None:
            cls = type(name, (OpNode,), {"__slots__": (), "op": op, "saves": saves})
            _NODE_CLASSES[(op.name, name, saves)] = cls
        if len(_PROBES) > 4096:
            _PROBES.clear()
        _PROBES[key] = cls
    return cls


def function_node_class(function: type) -> type:
    cls = _NODE_CLASSES.get(function)
    if cls is None:
        cls = type(f"{function.__name__}Backward", (FunctionNode,), {"__slots__": (), "function": function})
        _NODE_CLASSES[function] = cls
    return cls


# --- recording -------------------------------------------------------------------------------


def infer(op: OpDef, values, attrs):
    """(shape, dtype) by the op's registry rule; None when the rule says it depends on values."""
    if op.infer is None:
        return None
    shapes_ = [v.shape for v in values]
    dtypes = [v.dtype for v in values]
    try:
        inferred = op.infer(shapes_, dtypes, attrs)
    except (EngineShapeError, ValueError, TypeError, IndexError) as err:
        described = ", ".join(str(list(s)) for s in shapes_)
        raise ShapeError(f"{op.name}(): {err} (input shapes: {described})") from None
    if inferred is None or isinstance(inferred[0], shapes.Bounded):  # a bound (a mask's result) is not a shape
        return None
    shape, dtype = inferred
    return tuple(shape), numpy.dtype(dtype)


def record(op: OpDef, args, attrs: dict, meta=None) -> Variable:
    """Record `op` on `args` with checked `attrs`; nothing is computed or sent, unless the op's
    result shape depends on values (its rule returns None): then it is computed right away."""
    values, variables = coerce(args)
    problem = op.arity_error(len(values), attrs)
    if problem:
        raise TypeError(f"{op.name}() {problem}")
    meta = meta or infer(op, values, attrs)
    phase = current_phase()
    if meta is None:
        if phase is not None:
            raise TracingError(f"{op.name}(): the shape of its result depends on values, which a trace can't know")
        from client.session import current_session

        value = Value(OP, (), values[0].dtype if values else numpy.float64, op=op, inputs=values, attrs=attrs)
        current_session().fetch_values([value])
        shape, dtype = value.shape, value.dtype
    else:
        shape, dtype = meta
        value = Value(OP, shape, dtype, op=op, inputs=values, attrs=attrs, phase=phase)
    if op.differentiable and is_grad_enabled() and dtype.kind == "f" and any(v.requires_grad for v in values):
        versions = tuple((var, 0 if var is None else var._version) for var in variables)
        node = value.node = node_class(op, values, attrs)([edge_of(v) for v in values], value, versions)
        value.requires_grad = True
        result = Variable._lazy(value)
        if op.uses_output:
            node.out_ref = weakref.ref(result)
        return result
    return Variable._lazy(value)


def _make_function(op: OpDef):
    if op.variadic:
        def fn(inputs, *rest, **kwargs):
            return record(op, list(inputs), _parse_call(op, rest, kwargs))
    else:
        arity = op.arity

        def fn(*args, **kwargs):
            if len(args) < arity:
                raise TypeError(f"{op.name}() takes {arity} input(s) but {len(args)} were given")
            return record(op, args[:arity], _parse_call(op, args[arity:], kwargs))

    fn.__name__ = op.name
    fn.__qualname__ = op.name
    fn.__doc__ = op.doc
    return fn


def _index_variable(a):
    return a if isinstance(a, Variable) else Variable._leaf(as_host_array(a))


def _masked_meta(x, spec, arrays):
    """The shape of x[key] when the key has boolean arrays: it depends on how many are true,
    so the masks' values are needed (fetched in one /forward when they are computed ones)."""
    from client.session import current_session

    lazy = [a for a in arrays if a.dtype == numpy.bool_ and not a._has_value]
    if lazy:
        current_session().fetch(*lazy)
    real = []
    for a in arrays:
        if a.dtype == numpy.bool_ or a._has_value:
            array = a._array()
        else:
            array = shapes.proxy(a.shape, a.dtype)
        real.append(array if array.dtype.kind in "biu" else array.astype(numpy.int64))
    try:
        out = shapes.proxy(x.shape, x.dtype)[to_key(spec, real)]
        return tuple(out.shape), numpy.dtype(out.dtype)
    except (IndexError, ValueError, TypeError) as err:
        raise ShapeError(f"getitem(): index {list(spec)} does not fit shape {list(x.shape)}: {err}") from None


def getitem(x, key):
    """x[key] with ints, slices (with steps), None, ..., and integer or boolean arrays."""
    op = OPS["getitem"]
    spec, arrays = from_key(key, _index_variable)
    attrs = op.check_attrs({"index": spec})
    meta = None
    if isinstance(x, Variable) and any(a.dtype == numpy.bool_ for a in arrays) and not any(
            a._data is None and a._value.phase is not None for a in arrays):
        meta = _masked_meta(x, spec, arrays)
    return record(op, [x, *arrays], attrs, meta=meta)


def setitem(x, value, key):
    """x with x[key] = value, out of place (Variable.__setitem__ builds in-place on it)."""
    op = OPS["setitem"]
    spec, arrays = from_key(key, _index_variable)
    return record(op, [x, value, *arrays], op.check_attrs({"index": spec}))


# Ops whose engine function is custom Python (`OpDef.function`): the client's own spelling.
CUSTOM = {"getitem": getitem, "setitem": setitem}


def _make_method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


# --- dunders: read off engine.Variable ---------------------------------------------------------

_FALLBACK_DUNDERS = {  # only used if the engine's dunders can't be introspected
    "__add__": ("add", "forward"), "__radd__": ("add", "reflected"), "__sub__": ("sub", "forward"),
    "__rsub__": ("sub", "reflected"), "__mul__": ("mul", "forward"), "__rmul__": ("mul", "reflected"),
    "__truediv__": ("div", "forward"), "__rtruediv__": ("div", "reflected"), "__pow__": ("pow", "forward"),
    "__rpow__": ("pow", "reflected"), "__matmul__": ("matmul", "forward"), "__rmatmul__": ("matmul", "reflected"),
    "__neg__": ("neg", "unary"), "__abs__": ("abs", "unary"), "__lt__": ("lt", "forward"), "__le__": ("le", "forward"),
    "__gt__": ("gt", "forward"), "__ge__": ("ge", "forward"), "__eq__": ("eq", "forward"), "__ne__": ("ne", "forward"),
}


def engine_dunders() -> dict:
    """{dunder name: (OpDef, "forward"|"reflected"|"unary")} as installed on engine.Variable by
    `engine.registry.binary_dunders`/`unary_dunder` (each closes over its OpDef)."""
    from engine.variable import Variable as EngineVariable

    found = {}
    for name, attr in vars(EngineVariable).items():
        if not (name.startswith("__") and name.endswith("__")) or not callable(attr):
            continue
        ops = []
        for cell in getattr(attr, "__closure__", None) or ():
            try:
                contents = cell.cell_contents
            except ValueError:
                continue
            if isinstance(contents, OpDef):
                ops.append(contents)
        if len(ops) != 1:
            continue
        code = attr.__code__
        if code.co_argcount == 1:
            kind = "unary"
        elif code.co_name == "reflected_op":
            kind = "reflected"
        else:
            kind = "forward"
        found[name] = (ops[0], kind)
    if not found:
        found = {name: (OPS[op], kind) for name, (op, kind) in _FALLBACK_DUNDERS.items() if op in OPS}
    return found


def _dunder(op, kind):
    empty = {}
    if kind == "unary":
        def unary(self):
            return record(op, [self], empty)

        return unary
    if kind == "reflected":
        def reflected(self, other):
            return record(op, [other, self], empty)

        return reflected

    def forward(self, other):
        return record(op, [self, other], empty)

    return forward


# --- what is not a registry op (mirrors engine.ops.reduction / shape and engine.variable) --------

MaxMin = namedtuple("MaxMin", "values indices")


def _extreme(name, reduce_name, arg_name, pairwise_name):
    def fn(x, dim=None, keepdim=False):
        if isinstance(dim, Variable) or (dim is not None and not isinstance(dim, int)):
            return FUNCTIONS[pairwise_name](x, dim)
        if dim is None:
            return FUNCTIONS[reduce_name](x)
        return MaxMin(FUNCTIONS[reduce_name](x, dim, keepdim=keepdim), FUNCTIONS[arg_name](x, dim, keepdim=keepdim))

    fn.__name__ = name
    fn.__doc__ = (f"PyTorch's {name}: {name}(x) reduces everything, {name}(x, dim) returns (values, indices), "
                  f"{name}(x, y) is elementwise.")
    return fn


max = _extreme("max", "amax", "argmax", "maximum")
min = _extreme("min", "amin", "argmin", "minimum")


def install() -> dict:
    """Build every op function and install methods and operators on client.Variable."""
    for name, op in OPS.items():
        fn = CUSTOM.get(name) or _make_function(op)
        FUNCTIONS[name] = fn
        for method in op.methods:
            setattr(Variable, method, _make_method(fn))
    for name, (op, kind) in engine_dunders().items():
        setattr(Variable, name, _dunder(op, kind))
    Variable.__getitem__ = getitem
    Variable.T = property(lambda self: self.permute(tuple(reversed(range(self.ndim)))), doc="all dimensions reversed")
    Variable.mT = property(lambda self: FUNCTIONS["transpose"](self, -2, -1), doc="the last two dimensions swapped")
    Variable.max = lambda self, dim=None, keepdim=False: max(self, dim, keepdim)
    Variable.min = lambda self, dim=None, keepdim=False: min(self, dim, keepdim)
    return FUNCTIONS
