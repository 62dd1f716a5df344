"""The op registry: every op is declared once, here or in `engine/ops/`, with its name, arity,
attributes, forward and vjps side by side. Everything else derives from it: the `engine.<op>`
functions, the graph validator, `GET /ops`, the gradient-check tests, and (through
`engine.surface`, which installs them on the engine's and the client's Variable) the methods
and operators.

A primitive's `forward(xp, *arrays, **attrs)` computes on raw arrays of module `xp` (an op declared
`takes_xp=False` has no attributes and its forward is `forward(*arrays)`: an operator such as
`operator.mul`, which the engine calls with no Python frame between it and the arrays); each of its
vjps, `vjp(g, ans, *inputs, **attrs)`, maps the output gradient `g` to one input's gradient using
differentiable ops only, so running backward with grad mode on (`create_graph=True`) records the
backward pass as a graph of its own. Gradients are summed back to their input's shape by the
engine (`sum_to`), never by a vjp. A composite's `forward(*variables, **attrs)` is written in
terms of other ops and has no vjp of its own.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy

from engine import backend, costs, grad_fn_names, promotion, shapes, views
from engine.attrs import REQUIRED, Attr, check, shown
from engine.dtypes import default as default_dtype
from engine.grad_mode import state as grad_state
from engine.node import ALONE, FORWARD, RECORDING, OpNode, apply_op, own, passes
from engine.recording import note_constant, tell
from engine.variable import Variable, as_array, host_array

OPS: dict[str, OpDef] = {}
F = SimpleNamespace()  # the engine.<op> functions, for vjps that need ops with no operator
# The same ops for engine code whose attributes are valid by construction (vjps, autograd):
# `trusted.expand(g, shape=s)` takes inputs positionally and attributes by keyword, and parses or
# checks nothing, so a backward pass doesn't pay for validating the shapes it computed itself.
trusted = SimpleNamespace()
_DATA = operator.attrgetter("_data")
NUMBERS = promotion.NUMBERS


@dataclass(frozen=True)
class Sample:
    """Example inputs for the registry-driven gradient checks.

    `shapes` gives one shape per input (floats drawn from `low..high`); `make(rng)`, when set,
    returns the input arrays itself (index arrays, masks). `attrs` are the call's attributes.
    """

    shapes: tuple = ()
    attrs: dict = field(default_factory=dict)
    low: float = -2.0
    high: float = 2.0
    make: Callable | None = None


@dataclass(eq=False)
class OpDef:
    name: str
    forward: Callable
    vjps: tuple = ()
    vjp: Callable | None = None
    arity: int | None = 1
    attrs: dict = field(default_factory=dict)
    saves: bool | slice = True  # whether the vjps read saved input values (a slice: only those inputs')
    uses_output: bool | tuple = False  # whether the vjps read the output (a tuple: the vjps of those inputs)
    reads: tuple | None = None  # per input, the inputs its vjp reads (None: those `saves` names), as PyTorch saves them
    differentiable: bool = True
    takes_xp: bool = True  # False: `forward(*arrays)`, no array module and no attributes (see the module docstring)
    composite: bool = False
    twice_differentiable: bool = True
    methods: tuple = ()
    doc: str = ""
    samples: tuple = ()
    infer: Callable | None = None  # (input shapes, input dtypes, attrs) -> (shape, dtype); see engine.shapes
    work: Callable = costs.one_pass  # (input shapes, output shape, attrs) -> flop-equivalents; see engine.costs
    kernel: str = "elementwise"  # what its work runs as, for the dtype's factor: "elementwise" or "blas"
    scratch: Callable = costs.default_scratch  # (input metas, output meta, attrs) -> costs.Scratch (bytes)
    check_arity: Callable | None = None
    # a variadic op's inputs by name, the trailing ones optional (None leaves them out): the function then takes
    # PyTorch's positional form, `conv2d(input, weight, bias=None, stride=1, ...)`, as well as a list of inputs
    named_inputs: tuple = ()
    optional_inputs: int = 0  # how many of the named inputs, from the last, may be left out
    function: Callable | None = None
    node_class: type | None = None
    view: bool = False  # whether a result may share its first input's memory: PyTorch's view (engine.views)
    ignores: tuple = ()  # keywords PyTorch takes that change nothing here (`clone(memory_format=...)`)

    def cost(self, in_shapes, out_shape, attrs, dtypes=()) -> tuple:
        """(elements allocated, work) of one call, from shapes: what the request budgets count. The
        work is scaled by the factor of this op's kernel in the slowest of `dtypes` (engine.costs)."""
        work = self.work(in_shapes, out_shape, attrs)
        return costs.numel(out_shape), math.ceil(work * costs.dtype_factor(self.kernel, dtypes))

    def temporaries(self, in_metas, out_meta, attrs) -> costs.Scratch:
        """The bytes one call holds beyond its inputs, output and returned gradients (engine.costs.Scratch)."""
        return self.scratch(in_metas, out_meta, attrs)

    @property
    def variadic(self) -> bool:
        return self.arity is None

    def arity_error(self, count: int, attrs: dict) -> str | None:
        """Why `count` inputs don't fit this op with these attributes (None when they do)."""
        if self.check_arity is not None:
            return self.check_arity(count, attrs)
        if self.variadic:
            return None if count >= 1 else "takes at least 1 input, got 0"
        return None if count == self.arity else f"takes {self.arity} input(s), got {count}"

    def __post_init__(self):
        if not self.takes_xp and self.attrs:
            raise ValueError(f"op {shown(self.name)}: a forward without the array module takes no attributes")
        required = any(spec.required for spec in self.attrs.values())
        self.parsed = {}  # `parse_call`'s checked attributes of keyword calls (shared, so never mutated)
        # the attributes of a call that gives none; shared, so never mutated
        self.default_attrs = None if required else {name: spec.default for name, spec in self.attrs.items()}
        # `call(inputs, attrs)`: apply to Variables with checked attributes (the trusted entry: no parsing), and
        # `operator`, `x * y`: copies of `engine.node.apply_op` with this op and its node class as defaults
        self.call, self.operator = self._call_composite, None
        self.torch_name = None if self.name in grad_fn_names.BY_CALL else grad_fn_names.static(self.name)
        if not self.composite:
            saves = self.saves
            freeing = "all" if saves is True else "none" if saves is False else "values" if self.vjp else "inputs"
            vjp = own(OpNode.passes_on if self.vjps and set(self.vjps) == {passes} else OpNode.vjp, self)
            fits = self.arity == 1 and self.infer in KEEPS_FIT
            body = {"__slots__": (), "op": self, "freeing": freeing, "vjp": vjp, "fits": fits}
            if self.name in grad_fn_names.BY_CALL:  # PyTorch's name depends on the call: read when asked
                body["name"] = grad_fn_names.by_call(self.name)
            cls = self.node_class = type(grad_fn_name(self.name), (OpNode,), body)
            kind = ALIKE_FITS.get(self.name)  # alike inputs: a node class of `fits` (`ALIKE_FITS`)
            alike = (type(cls.__name__, (OpNode,), {**body, "fits": True}), kind == "dtype") if kind else (None, False)
            # and how they cast input arrays of other dtypes (PyTorch's type promotion; `promotes`)
            tail = (PROMOTES.get(self.infer), gives_floats(self), *alike)
            self.call, self.operator = [own(apply_op, ALONE, self, c, cls, *tail) for c in (None, coerce)]
            if self.view:
                self.call = views.track(self)

    def _call_composite(self, inputs, attrs):  # its result's node named PyTorch's (SoftmaxBackward0), not its last op's
        try:
            out = self.forward(*inputs, **attrs)
        except shapes.ShapeError as refusal:  # (conv2d's channels) PyTorch's RuntimeError, as a primitive's
            raise shapes.as_raised(refusal) from None
        node = getattr(out, "_node", None)
        if node is not None and not any(getattr(v, "_node", None) is node for v in inputs):  # (not an input's node)
            grad_fn_names.swap(node, self.torch_name or grad_fn_names.call_name(self.name, attrs, (), None))
        return out

    def check_attrs(self, given: dict) -> dict:
        """Normalise a complete attribute dict (defaults filled in); raises AttrError/TypeError."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}() got unexpected attribute(s): {', '.join(sorted(unknown))}")
        out = {}
        for name, spec in self.attrs.items():
            if name in given:
                out[name] = check(spec.kind, given[name], name)
            elif spec.required:
                raise TypeError(f"{self.name}() is missing required attribute {shown(name)}")
            else:
                out[name] = spec.default
        return out

    def describe(self) -> dict:
        return {
            "name": self.name,
            "arity": "variadic" if self.variadic else self.arity,
            "attrs": {name: spec.describe() for name, spec in self.attrs.items()},
            "differentiable": self.differentiable,
            "composite": self.composite,
            "methods": list(self.methods),
            "doc": self.doc,
        }


# two-input ops whose vjps return their inputs' shapes and dtypes when the inputs have one dtype ("dtype": mm's
# 2-d products) or one dtype and one shape ("shape": elementwise, nothing broadcast), made with a node class of
# `fits` in those cases (`apply_op`'s `alike`), so the backward walk need not fit their gradients (`OpNode.fits`)
ALIKE_FITS = {"add": "shape", "sub": "shape", "mul": "shape", "mm": "dtype"}

# the shape rules of one-input ops whose vjps return their input's shape and dtype (a float input's: an
# unreduced, inverse-permuted or cast-back gradient), so the backward walk need not fit them (`OpNode.fits`)
KEEPS_FIT = frozenset(
    (
        shapes.same,
        shapes.floating,
        shapes.reduce,
        shapes.reduce_float,
        shapes.reduce_mean,
        shapes.reduce_norm,
        shapes.reduce_same_dtype,
        shapes.permute,
    )
)


def _astype(xp, x, dtype):
    return x.astype(dtype)


_CAST_ATTRS: dict = {}  # dtype -> the attributes of a recorded cast to it (one dict: recorded steps key on it)


def _cast(arrays, dtype) -> tuple:
    """`arrays` of `dtype`: those of another dtype cast (each cast a step of a recording, when one is made)."""
    out = []
    for a in arrays:
        if a.dtype != dtype:
            converted = a.astype(dtype)
            if RECORDING:
                attrs = _CAST_ATTRS.setdefault(dtype, {"dtype": dtype.name})
                tell("cast", _astype, (a,), attrs, converted, True)
            a = converted
        out.append(a)
    return tuple(out)


def operands(arrays) -> tuple:
    """An op's input arrays cast to their result type (add, mul, maximum, the comparisons...)."""
    return _cast(arrays, promotion.result_type([a.shape for a in arrays], [a.dtype for a in arrays]))


def floating_operands(arrays) -> tuple:
    """The input arrays cast to their result type, the default dtype when that is not floating (div, atan2)."""
    dtype = promotion.result_type([a.shape for a in arrays], [a.dtype for a in arrays])
    return _cast(arrays, dtype if dtype.kind in "fc" else default_dtype())


def subtraction_operands(arrays) -> tuple:
    """Subtraction's: a bool operand refused (PyTorch's), the others cast to their result type."""
    promotion.check_subtraction([a.dtype for a in arrays])
    return operands(arrays)


def gives_floats(op) -> bool:
    """Whether `op` gives a floating result of integer inputs (true division, atan2, sqrt): in the default dtype."""
    return op.infer in (shapes.floating_broadcast, shapes.floating)


# the shape rules whose one- and two-input ops promote their inputs to one dtype (engine.promotion), and how
# (`apply_op` calls it when its inputs' dtypes differ, or when they are integers of an op that `gives_floats`;
# `where`, `cat` and `stack` promote in their forwards: `promotion.promoted`)
PROMOTES = {
    **dict.fromkeys((shapes.broadcast, shapes.compare, shapes.bitwise), operands),
    **dict.fromkeys((shapes.floating_broadcast, shapes.floating), floating_operands),
    **dict.fromkeys((shapes.mm, shapes.matmul), promotion.product_operands),  # (refused: PyTorch's products)
    shapes.subtract: subtraction_operands,
}


grad_fn_name = grad_fn_names.static  # the class name of an op's nodes: `mm` -> `MmBackward0`


def coerce(inputs):
    """Variables from a mix of Variables, arrays and Python numbers: a number becomes an array of the
    operands' result type (`engine.promotion`), alone one of its own (`host_array`'s)."""
    for v in inputs:
        if not isinstance(v, Variable):
            break
    else:
        return inputs  # the common case: nothing to convert
    if len(inputs) == 2:  # `x * 2`, `1 - x`: a Python number beside a floating Variable takes its dtype
        a, b = inputs
        if (type(b) is float or type(b) is int) and isinstance(a, Variable) and a._data.dtype.kind == "f":
            array = backend.constant(numpy.asarray(b, a._data.dtype))
            if RECORDING:
                note_constant(array)
            return (a, Variable._result(array, None))
        if (type(a) is float or type(a) is int) and isinstance(b, Variable) and b._data.dtype.kind == "f":
            array = backend.constant(numpy.asarray(a, b._data.dtype))
            if RECORDING:
                note_constant(array)
            return (Variable._result(array, None), b)
    out, arrays = [], []
    for v in inputs:
        if type(v) in NUMBERS:
            arrays.append(v)
        else:
            if not isinstance(v, Variable):
                v = Variable._result(as_array(v), None)
            arrays.append(v._data)
        out.append(v)
    dtype = promotion.of_operands(arrays)
    for i, v in enumerate(out):
        if type(v) in NUMBERS:  # a Python number's array: the same whatever the inputs' values
            array = backend.constant(host_array(v) if dtype is None else promotion.number_array(v, dtype))
            if RECORDING:
                note_constant(array)
            out[i] = Variable._result(array, None)
    return out


# NumPy's keyword names that PyTorch accepts too: `x.sum(axis=1, keepdims=True)`
ALIASES = {"axis": "dim", "keepdims": "keepdim"}


def parse_call(op: OpDef, rest: tuple, kwargs: dict) -> dict:
    """The checked attributes of a call `fn(*inputs, *rest, **kwargs)` (positional ones in declared order)."""
    if not op.attrs and not rest and not kwargs:
        return {}  # the common case: an op without attributes, called without any
    types = tuple(map(type, kwargs.values()))
    if not rest and PLAIN.issuperset(types) and (float not in types or 0.0 not in kwargs.values()):
        key = (*kwargs.items(), *types)  # `x.clamp(min=0)`: checked once; by type too (`min=0`, `min=False`)
        checked = op.parsed.get(key)  # (a float zero is not kept: 0.0 and -0.0 are equal keys)
        if checked is None:
            checked = _parse(op, rest, kwargs)
            if len(op.parsed) < PARSED:
                op.parsed[key] = checked
        return checked
    return _parse(op, rest, kwargs)


# the keyword values whose checked attributes `parse_call` keeps per op (at most PARSED calls): immutable ones
PLAIN = frozenset((int, float, bool, str, type(None)))
PARSED = 64


def _parse(op: OpDef, rest: tuple, kwargs: dict) -> dict:
    if op.ignores:
        kwargs = {k: v for k, v in kwargs.items() if k not in op.ignores}
    names = list(op.attrs)
    if (
        rest
        and names
        and op.attrs[names[0]].kind in ("shape", "ints")
        and all(isinstance(r, int) and not isinstance(r, bool) for r in rest)
    ):
        rest = (tuple(rest),)
    if len(rest) > len(names):
        raise TypeError(f"{op.name}() takes {len(names)} attribute argument(s) but {len(rest)} were given")
    given = dict(zip(names, rest))
    for key, value in kwargs.items():
        key = ALIASES.get(key, key) if key not in op.attrs else key
        if key in given:
            raise TypeError(f"{op.name}() got multiple values for argument {shown(key)}")
        given[key] = value
    return op.check_attrs(given)


# PyTorch's keyword names of ops' inputs (`torch.matmul(input=a, other=b)`), where not `input, other`
INPUT_NAMES = {"pow": ("input", "exponent"), "mm": ("input", "mat2"), "where": ("condition", "input", "other")}
_DEFAULT_INPUT_NAMES = ("input", "other")


def input_names(op: OpDef) -> tuple:
    """The keyword names of `op`'s inputs, in order (a variadic op's list is `tensors`)."""
    if op.variadic:
        return ("tensors",)
    return op.named_inputs or INPUT_NAMES.get(op.name, _DEFAULT_INPUT_NAMES[: op.arity])


def _keyword_inputs(op, args, kwargs):
    """args with the inputs given by keyword appended (taken out of kwargs), in their order."""
    missing = input_names(op)[len(args) :]
    taken = [kwargs.pop(name) for name in missing if name in kwargs]
    if len(taken) != len(missing):
        wanted = "a sequence of inputs" if op.variadic else f"{op.arity} input(s)"
        raise TypeError(
            f"{op.name}() takes {wanted} ({', '.join(input_names(op))}) but {len(args) + len(taken)} were given"
        )
    return (*args, *taken)


def make_function(op: OpDef, coerce, run):
    """`<op>(*inputs, *attrs, **attrs)` in PyTorch's spelling, inputs also by keyword
    (`input=`, `other=`...): `run(coerce(inputs), checked attrs)`.

    The one template of every op function, the engine's (`run` computes) and the client's
    (`run` records)."""
    if op.named_inputs:
        names = op.named_inputs

        def fn(*args, **kwargs):
            if args and isinstance(args[0], (list, tuple)):
                return run(coerce(list(args[0])), parse_call(op, args[1:], kwargs))
            given = [*args[: len(names)], *(kwargs.pop(name, None) for name in names[len(args) :])]
            return run(coerce([v for v in given if v is not None]), parse_call(op, args[len(names) :], kwargs))
    elif op.variadic:

        def fn(tensors=None, *rest, **kwargs):
            if tensors is None:
                (tensors,) = _keyword_inputs(op, (), kwargs)
            if not tensors:  # PyTorch's ValueError for cat, RuntimeError for the others: both
                why = f"torch.{op.name}(): expected a non-empty list of Tensors"
                raise shapes.ShapeMismatch("stack expects a non-empty TensorList" if op.name == "stack" else why)
            return run(coerce(list(tensors)), parse_call(op, rest, kwargs))
    else:
        arity, defaults = op.arity, op.default_attrs

        def fn(*args, **kwargs):
            if len(args) == arity and not kwargs and defaults is not None:
                return run(coerce(args), defaults)  # the common case: no attribute given
            if len(args) < arity:
                args = _keyword_inputs(op, args, kwargs)
            return run(coerce(args[:arity]), parse_call(op, args[arity:], kwargs))

    fn.__name__ = op.name
    fn.__qualname__ = op.name
    fn.__doc__ = op.doc
    return fn


def local(fn, *variables):
    """`fn(*variables)` for a vjp's local derivative, written with operators only: computed
    directly on the arrays when nothing records a graph (a backward without create_graph), as
    recorded ops otherwise, so one formula serves both and costs one dispatch, not several."""
    if grad_state.enabled or FORWARD:  # (a forward-AD level: the recorded ops carry the tangents)
        return fn(*variables)
    if len(variables) == 2:  # unrolled: a comprehension is a frame of its own
        a, b = arrays = (variables[0]._data, variables[1]._data)
        out = fn(a, b)
    else:
        arrays = tuple(map(_DATA, variables))
        a = arrays[0]
        out = fn(*arrays)
    if type(out) is not type(a):
        out = backend.array_module(a).asarray(out)
    if RECORDING:
        tell("local", fn, arrays, None, out)  # recorded as a step of its own (engine.recording)
    return Variable._result(out, None)


def _make_trusted(op: OpDef):
    base = {name: spec.default for name, spec in op.attrs.items()}
    run = getattr(op, "untracked", op.call)  # an engine-internal view is no view a program sees (engine.views)

    def fn(*inputs, **attrs):
        return run(coerce(inputs), {**base, **attrs} if attrs else base)

    fn.__name__ = fn.__qualname__ = op.name
    return fn


def defop(name, forward, *vjps, vjp=None, arity=None, attrs=None, methods=None, **options) -> OpDef:
    """Declare an op. `arity` defaults to the number of vjps (1 when there are none)."""
    if name in OPS:
        raise ValueError(f"op {shown(name)} is declared twice")
    if arity is None and not options.get("variadic"):
        arity = len(vjps) or 1
    options.pop("variadic", None)
    op = OpDef(
        name=name,
        forward=forward,
        vjps=vjps,
        vjp=vjp,
        arity=arity,
        attrs=dict(attrs or {}),
        methods=tuple((name,) if methods is None else methods),
        **options,
    )
    OPS[name] = op
    setattr(F, name, op.function or make_function(op, coerce, op.call))
    setattr(trusted, name, _make_trusted(op))
    return op


__all__ = [
    "OPS",
    "F",
    "trusted",
    "local",
    "Attr",
    "REQUIRED",
    "Sample",
    "OpDef",
    "defop",
    "coerce",
    "make_function",
    "parse_call",
    "grad_fn_name",
    "gives_floats",
]
