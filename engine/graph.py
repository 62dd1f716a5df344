"""The graph format (v1): parse and validate a serialized expression graph, then run it.

A graph is a list of nodes in topological order with single-assignment ids:

    {"version": 1,
     "nodes": [{"id": "x", "op": "input", "requires_grad": true, "shape": [2], "dtype": "FP32"},
               {"id": "c", "op": "constant", "attrs": {"value": 2.0}},
               {"id": "y", "op": "mul", "inputs": ["x", "c"]},
               {"id": "s", "op": "sum", "inputs": ["y"]}],
     "outputs": ["s"]}

Ops are the registry's (`engine.registry.OPS`) plus `input`, `constant` and `function` (a custom
Function traced into a forward and a backward subgraph; see docs/protocol.md). Validation is
complete before anything is computed; every error names the node and the field at fault.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import numpy

from engine import backend
from engine.attrs import AttrError
from engine.autograd import grad as engine_grad
from engine.codec import DATATYPES, NONFINITE
from engine.function import Function
from engine.grad_mode import no_grad
from engine.registry import OPS, coerce
from engine.shapes import ShapeError
from engine.variable import Variable, as_array

VERSION = 1
SPECIAL_OPS = {
    "input": "a tensor from the request's inputs, matched by name = node id",
    "constant": "attrs.value (number or nested list), optional attrs.dtype (an OIP datatype)",
    "function": "a custom Function: attrs.name, attrs.forward and attrs.backward subgraphs",
}
SUBGRAPH_OPS = {
    "arg": "inside a function subgraph: the function's input attrs.index",
    "grad_output": "inside a backward subgraph: the gradient of the function's output",
    "forward_value": "inside a backward subgraph: the value of forward-subgraph node attrs.node",
}
NODE_KEYS = {"id", "op", "inputs", "attrs", "requires_grad", "shape", "dtype"}


class GraphError(ValueError):
    """An invalid graph or a failure while running it; `status` is the HTTP status it deserves."""

    def __init__(self, message, node=None, field=None, status=422):
        super().__init__(message)
        self.node = node
        self.field = field
        self.status = status


@dataclass
class Step:
    id: str
    op: str
    inputs: tuple
    attrs: dict
    requires_grad: bool = False
    shape: tuple | None = None
    dtype: object = None
    function: type | None = None


@dataclass
class Plan:
    steps: list
    outputs: tuple
    inputs: tuple
    requires_grad: frozenset
    depth: int
    checked: dict = field(default_factory=dict)  # input signature -> Shapes (see check_request_inputs)
    input_names: frozenset = field(init=False)

    def __post_init__(self):
        self.input_names = frozenset(self.inputs)


@dataclass(frozen=True)
class Shapes:
    """Every node's (shape, dtype), or None where it is known only by running, for one input
    signature; with the element counts that the limits and `Executor.is_light` compare."""

    known: dict
    total: int       # elements of all the values of known shape
    largest: int     # elements of the biggest of them
    all_known: bool

    @classmethod
    def of(cls, known: dict) -> Shapes:
        counts = [math.prod(meta[0]) for meta in known.values() if meta is not None]
        return cls(known, sum(counts), max(counts, default=0), len(counts) == len(known))


def _fail(message, node=None, field=None):
    raise GraphError(message, node=node, field=field)


def _check_subgraph(obj, where, node_id):
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list) or not isinstance(obj.get("outputs"), list):
        _fail(f"function node {node_id!r}: {where} must be an object with 'nodes' and 'outputs' lists", node_id, f"attrs.{where}")


def parse(graph, max_nodes=100_000, max_depth=100_000, _scope="graph", _budget=None) -> Plan:
    """Validate a graph completely and turn it into a Plan (no compute, no tensors needed)."""
    if not isinstance(graph, dict):
        _fail("'graph' must be an object with 'version', 'nodes' and 'outputs'", field="graph")
    if _scope == "graph":
        version = graph.get("version", VERSION)
        if version != VERSION:
            _fail(f"unsupported graph version {version!r}; this server speaks version {VERSION}", field="graph.version")
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        _fail("'graph.nodes' must be a non-empty list", field="graph.nodes")
    budget = _budget if _budget is not None else [max_nodes]
    budget[0] -= len(nodes)
    if budget[0] < 0:
        raise GraphError(f"the graph has more than the limit of {max_nodes} nodes", field="graph.nodes", status=413)
    steps, depth, seen = [], {}, set()
    inputs, requires = [], set()
    for index, node in enumerate(nodes):
        step = _parse_node(node, index, seen, _scope, max_nodes, max_depth, budget)
        d = 1 + max((depth[i] for i in step.inputs if isinstance(i, str)), default=0)
        if d > max_depth:
            raise GraphError(f"node {step.id!r}: the graph is deeper than the limit of {max_depth}", node=step.id, status=413)
        depth[step.id] = d
        seen.add(step.id)
        steps.append(step)
        if step.op == "input":
            inputs.append(step.id)
            if step.requires_grad:
                requires.add(step.id)
    outputs = graph.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        _fail("'graph.outputs' must be a non-empty list of node ids", field="graph.outputs")
    for out in outputs:
        if out is not None and out not in seen:
            _fail(f"output {out!r} is not a node of the graph", node=out if isinstance(out, str) else None, field="graph.outputs")
        if _scope != "backward" and out is None:
            _fail("outputs must be node ids", field="graph.outputs")
    if _scope == "graph" and len(set(outputs)) != len(outputs):
        _fail("'graph.outputs' names a node twice", field="graph.outputs")
    return Plan(steps, tuple(outputs), tuple(inputs), frozenset(requires), max(depth.values()))


def _parse_node(node, index, seen, scope, max_nodes, max_depth, budget) -> Step:
    where = f"graph.nodes[{index}]"
    if not isinstance(node, dict):
        _fail(f"{where} must be an object", field=where)
    node_id = node.get("id")
    if not isinstance(node_id, str) or not node_id:
        _fail(f"{where}: 'id' must be a non-empty string", field=f"{where}.id")
    if node_id in seen:
        _fail(f"node {node_id!r} is defined twice (ids are single-assignment)", node_id, "id")
    extra = set(node) - NODE_KEYS
    if extra:
        _fail(f"node {node_id!r}: unknown field(s) {', '.join(sorted(extra))}", node_id, sorted(extra)[0])
    op = node.get("op")
    if not isinstance(op, str):
        _fail(f"node {node_id!r}: 'op' must be a string", node_id, "op")
    raw_inputs = node.get("inputs", [])
    if not isinstance(raw_inputs, list) or not all(isinstance(i, str) for i in raw_inputs):
        _fail(f"node {node_id!r}: 'inputs' must be a list of node ids", node_id, "inputs")
    for ref in raw_inputs:
        if ref not in seen:
            _fail(f"node {node_id!r}: input {ref!r} is not defined before this node (nodes must be in topological order)",
                  node_id, "inputs")
    attrs = node.get("attrs", {})
    if not isinstance(attrs, dict):
        _fail(f"node {node_id!r}: 'attrs' must be an object", node_id, "attrs")
    requires_grad = node.get("requires_grad", False)
    if not isinstance(requires_grad, bool):
        _fail(f"node {node_id!r}: 'requires_grad' must be true or false", node_id, "requires_grad")
    if op != "input" and ({"requires_grad", "shape", "dtype"} & set(node)):
        _fail(f"node {node_id!r}: only input nodes take requires_grad, shape and dtype", node_id, "op")
    if op == "input":
        if scope != "graph":
            _fail(f"node {node_id!r}: input nodes are not allowed inside a function subgraph (use 'arg')", node_id, "op")
        return _input_step(node, node_id, raw_inputs, attrs, requires_grad)
    if op == "constant":
        return _constant_step(node_id, raw_inputs, attrs)
    if op in SUBGRAPH_OPS:
        return _subgraph_leaf(node_id, op, raw_inputs, attrs, scope)
    if op == "function":
        return _function_step(node_id, raw_inputs, attrs, max_nodes, max_depth, budget)
    spec = OPS.get(op)
    if spec is None:
        _fail(f"node {node_id!r}: unknown op {op!r} (GET /ops lists the known ones)", node_id, "op")
    try:
        checked = spec.check_attrs(_unspell_floats(spec, attrs))
    except (AttrError, TypeError) as err:
        _fail(f"node {node_id!r} ({op}): {err}", node_id, "attrs")
    problem = spec.arity_error(len(raw_inputs), checked)
    if problem:
        _fail(f"node {node_id!r} ({op}) {problem}", node_id, "inputs")
    return Step(node_id, op, tuple(raw_inputs), checked)


FLOAT_KINDS = ("float", "float?", "p")


def _unspell_floats(spec, attrs):
    """Float attributes may be spelled "Infinity", "-Infinity" or "NaN" (JSON has no such numbers),
    as tensor data may (engine.codec): e.g. norm's p = inf."""
    spelled = [name for name, value in attrs.items() if isinstance(value, str) and value in NONFINITE
               and name in spec.attrs and spec.attrs[name].kind in FLOAT_KINDS]
    if not spelled:
        return attrs
    return {**attrs, **{name: NONFINITE[attrs[name]] for name in spelled}}


def _input_step(node, node_id, raw_inputs, attrs, requires_grad):
    if raw_inputs or attrs:
        _fail(f"input node {node_id!r} takes no inputs or attrs", node_id, "inputs" if raw_inputs else "attrs")
    shape = node.get("shape")
    if shape is not None and (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        _fail(f"input node {node_id!r}: 'shape' must be a list of non-negative integers", node_id, "shape")
    dtype = node.get("dtype")
    if dtype is not None and dtype not in DATATYPES:
        _fail(f"input node {node_id!r}: unknown dtype {dtype!r}; expected one of {', '.join(DATATYPES)}", node_id, "dtype")
    if requires_grad and dtype is not None and DATATYPES[dtype].kind != "f":
        _fail(f"input node {node_id!r}: only floating point inputs can require grad (dtype {dtype})", node_id, "requires_grad")
    return Step(node_id, "input", (), {}, requires_grad, None if shape is None else tuple(shape),
                None if dtype is None else DATATYPES[dtype])


def _constant_step(node_id, raw_inputs, attrs):
    if raw_inputs:
        _fail(f"constant node {node_id!r} takes no inputs", node_id, "inputs")
    if set(attrs) - {"value", "dtype"} or "value" not in attrs:
        _fail(f"constant node {node_id!r}: attrs must be {{'value': ..., 'dtype': optional}}", node_id, "attrs")
    value, dtype = attrs["value"], attrs.get("dtype")
    if dtype is not None and dtype not in DATATYPES:
        _fail(f"constant node {node_id!r}: unknown dtype {dtype!r}", node_id, "attrs.dtype")
    if dtype is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return Step(node_id, "constant", (), {"value": value})
    try:
        array = as_array(value, None if dtype is None else DATATYPES[dtype])
    except (ValueError, TypeError) as err:
        _fail(f"constant node {node_id!r}: value is not a number or a rectangular nested list: {err}", node_id, "attrs.value")
    if array.dtype.kind not in "biuf":
        _fail(f"constant node {node_id!r}: value must be numbers or booleans", node_id, "attrs.value")
    return Step(node_id, "constant", (), {"value": array})


def _subgraph_leaf(node_id, op, raw_inputs, attrs, scope):
    allowed = {"forward": {"arg"}, "backward": {"arg", "grad_output", "forward_value"}}.get(scope, set())
    if op not in allowed:
        _fail(f"node {node_id!r}: op {op!r} is only allowed inside a function's {'backward' if op != 'arg' else ''} subgraph".replace("  ", " "),
              node_id, "op")
    if raw_inputs:
        _fail(f"node {node_id!r}: {op} takes no inputs", node_id, "inputs")
    if op == "arg":
        index = attrs.get("index")
        if set(attrs) != {"index"} or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            _fail(f"node {node_id!r}: arg needs attrs {{'index': non-negative integer}}", node_id, "attrs.index")
    elif op == "forward_value":
        if set(attrs) != {"node"} or not isinstance(attrs.get("node"), str):
            _fail(f"node {node_id!r}: forward_value needs attrs {{'node': forward node id}}", node_id, "attrs.node")
    elif attrs:
        _fail(f"node {node_id!r}: grad_output takes no attrs", node_id, "attrs")
    return Step(node_id, op, (), dict(attrs))


def _function_step(node_id, raw_inputs, attrs, max_nodes, max_depth, budget):
    name = attrs.get("name", "Function")
    if not isinstance(name, str) or not name.isidentifier():
        _fail(f"function node {node_id!r}: attrs.name must be an identifier", node_id, "attrs.name")
    if set(attrs) - {"name", "forward", "backward"}:
        _fail(f"function node {node_id!r}: attrs are name, forward and backward", node_id, "attrs")
    for part in ("forward", "backward"):
        _check_subgraph(attrs.get(part), part, node_id)
    try:
        forward = parse(attrs["forward"], max_nodes, max_depth, "forward", budget)
        backward = parse(attrs["backward"], max_nodes, max_depth, "backward", budget)
    except GraphError as err:
        raise GraphError(f"function node {node_id!r}: {err}", node=node_id, field=err.field, status=err.status) from None
    if len(forward.outputs) != 1:
        _fail(f"function node {node_id!r}: the forward subgraph must have exactly one output", node_id, "attrs.forward.outputs")
    if len(backward.outputs) != len(raw_inputs):
        _fail(f"function node {node_id!r}: the backward subgraph must have one output per input "
              f"({len(raw_inputs)}), got {len(backward.outputs)}", node_id, "attrs.backward.outputs")
    forward_ids = {s.id for s in forward.steps}
    for plan, part in ((forward, "forward"), (backward, "backward")):
        for s in plan.steps:
            if s.op == "arg" and s.attrs["index"] >= len(raw_inputs):
                _fail(f"function node {node_id!r}: {part} arg index {s.attrs['index']} but the node has {len(raw_inputs)} input(s)",
                      node_id, f"attrs.{part}")
            if s.op == "forward_value" and s.attrs["node"] not in forward_ids:
                _fail(f"function node {node_id!r}: forward_value {s.attrs['node']!r} is not a forward node", node_id, "attrs.backward")
    return Step(node_id, "function", tuple(raw_inputs), {}, function=_subgraph_function(name, forward, backward))


def _subgraph_function(name, forward, backward):
    def forward_fn(ctx, *args):
        values = _run_steps(forward.steps, {}, args=args)
        ctx.save_for_backward(*args)
        ctx.values = values
        return values[forward.outputs[0]]

    def backward_fn(ctx, grad_output):
        values = _run_steps(backward.steps, {}, args=ctx.saved_tensors, forward=ctx.values, grad_output=grad_output)
        return tuple(None if out is None else values[out] for out in backward.outputs)

    return type(name, (Function,), {"forward": staticmethod(forward_fn), "backward": staticmethod(backward_fn)})


def infer(steps, known: dict) -> dict:
    """(shape, dtype) of every node given the inputs', by the ops' shape rules."""
    for step in steps:
        if step.op == "input":
            continue
        if step.op == "constant":
            value = step.attrs["value"]
            known[step.id] = ((), value) if not hasattr(value, "shape") else (tuple(value.shape), value.dtype)
            continue
        if step.op in SUBGRAPH_OPS or step.op == "function" or any(known.get(i) is None for i in step.inputs):
            known[step.id] = None
            continue
        rule = OPS[step.op].infer
        if rule is None:
            known[step.id] = None
            continue
        shapes = [known[i][0] for i in step.inputs]
        dtypes = [known[i][1] for i in step.inputs]
        try:
            inferred = rule(shapes, dtypes, step.attrs)
        except (ShapeError, ValueError, TypeError, IndexError) as err:
            described = ", ".join(f"{i} {list(s)}" for i, s in zip(step.inputs, shapes))
            raise GraphError(f"node {step.id!r} ({step.op}): {err} (inputs: {described})", node=step.id, field="inputs") from None
        known[step.id] = None if inferred is None else (tuple(inferred[0]), numpy.dtype(inferred[1]))
    return known


_cancel = threading.local()


@contextmanager
def cancel_scope(event: threading.Event):
    """Run graphs in this thread cooperatively cancellable: once `event` is set, the next step
    raises GraphError (status 503). The service sets it when a request's compute timeout passes."""
    previous = getattr(_cancel, "event", None)
    _cancel.event = event
    try:
        yield
    finally:
        _cancel.event = previous


def _run_steps(steps, values, inputs=None, args=(), forward=None, grad_output=None):
    cancel = getattr(_cancel, "event", None)
    for step in steps:
        if cancel is not None and cancel.is_set():
            raise GraphError(f"node {step.id!r}: the computation was cancelled (compute timeout)", node=step.id, status=503)
        op = step.op
        if op == "input":
            values[step.id] = inputs[step.id]
        elif op == "constant":
            value = step.attrs["value"]
            values[step.id] = value if not hasattr(value, "shape") else Variable._result(backend.to_active(value), None)
        elif op == "arg":
            values[step.id] = args[step.attrs["index"]]
        elif op == "grad_output":
            values[step.id] = grad_output
        elif op == "forward_value":
            values[step.id] = forward[step.attrs["node"]]
        elif op == "function":
            values[step.id] = step.function.apply(*[_as_variable(values[i]) for i in step.inputs])
        else:
            try:
                values[step.id] = OPS[op].call(coerce([values[i] for i in step.inputs]), step.attrs)
            except GraphError:
                raise
            except MemoryError:
                raise GraphError(f"node {step.id!r} ({op}): out of memory", node=step.id, status=507) from None
            except Exception as err:  # noqa: BLE001 - any op failure is the graph's fault, reported with its node
                if _is_out_of_memory(err):
                    raise GraphError(f"node {step.id!r} ({op}): out of device memory", node=step.id, status=507) from None
                shapes = ", ".join(f"{i} {list(getattr(values[i], 'shape', ()))}" for i in step.inputs)
                raise GraphError(f"node {step.id!r} ({op}) failed: {err} (inputs: {shapes})", node=step.id) from None
    return values


def _is_out_of_memory(err) -> bool:
    return type(err).__name__ in ("OutOfMemoryError", "CUDARuntimeError") and "memory" in str(err).lower()


def _as_variable(value):
    return value if isinstance(value, Variable) else coerce([value])[0]


class Execution:
    """One run of a plan: its values, and (when recorded) the graph to differentiate."""

    def __init__(self, plan: Plan, tensors: dict, record: bool, wrt=()):
        self.plan = plan
        needs = plan.requires_grad | set(wrt)
        self.inputs = {}
        for name in plan.inputs:
            array = backend.to_active(tensors[name])
            v = Variable._result(array, None)
            if record and name in needs:
                if array.dtype.kind != "f":
                    raise GraphError(f"input {name!r} is {array.dtype.name}; only floating point inputs can require grad",
                                     node=name, field="requires_grad")
                v._requires_grad = True
            self.inputs[name] = v
        if record:
            values = _run_steps(plan.steps, {}, inputs=self.inputs)
        else:
            with no_grad():
                values = _run_steps(plan.steps, {}, inputs=self.inputs)
        self.values = values
        self.outputs = {name: _as_variable(values[name]) for name in plan.outputs}
        self.freed = False

    @cached_property
    def nbytes(self) -> int:
        """Bytes held by the run's values (what retaining it as a tape costs)."""
        return sum(v._data.nbytes for v in self.values.values() if isinstance(v, Variable))

    def output_arrays(self) -> dict:
        return {name: v._data for name, v in self.outputs.items()}

    def backward(self, grad_outputs: dict | None = None, wrt=None, retain_graph=False) -> dict:
        """Gradients of the outputs with respect to `wrt` (default: inputs that require grad)."""
        grad_outputs = grad_outputs or {}
        unknown = set(grad_outputs) - set(self.outputs)
        if unknown:
            raise GraphError(f"grad_outputs names {sorted(unknown)!r}, which are not outputs of the graph",
                             field="grad_outputs")
        wrt = [n for n in self.plan.inputs if n in self.plan.requires_grad] if wrt is None else list(wrt)
        if not wrt:
            raise GraphError("nothing to differentiate: no input has requires_grad and 'wrt' is empty", field="wrt")
        targets = []
        for name in wrt:
            v = self.values.get(name)
            if not isinstance(v, Variable):
                raise GraphError(f"wrt names {name!r}, which is not a node of the graph", node=name, field="wrt")
            if not v.requires_grad:
                raise GraphError(f"wrt names {name!r}, which does not require grad", node=name, field="wrt")
            targets.append(v)
        outs, seeds = [], []
        for name, out in self.outputs.items():
            if not out.requires_grad:
                continue
            seed = grad_outputs.get(name)
            if seed is None:
                if out._data.size != 1:
                    raise GraphError(
                        f"output {name!r} has shape {list(out.shape)}: a gradient can be implied only for scalar outputs; "
                        f"pass grad_outputs with a tensor named {name!r}", node=name, field="grad_outputs")
                seed = backend.array_module(out._data).ones_like(out._data)
            else:
                if tuple(seed.shape) != tuple(out.shape):
                    raise GraphError(f"grad_outputs {name!r} has shape {list(seed.shape)} but the output has shape {list(out.shape)}",
                                     node=name, field="grad_outputs")
                seed = backend.to_active(seed).astype(out.dtype, copy=False)
            outs.append(out)
            seeds.append(Variable._result(seed, None))
        if self.freed:
            raise TapeFreedError()
        if not outs:
            grads = [None] * len(targets)
        else:
            try:
                grads = engine_grad(outs, targets, seeds, retain_graph=retain_graph, allow_unused=True)
            except RuntimeError as err:
                raise GraphError(f"backward failed: {err}", status=409 if "second time" in str(err) else 422) from None
        self.freed = not retain_graph
        return {
            name: (g._data if g is not None else backend.array_module(t._data).zeros_like(t._data))
            for name, t, g in zip(wrt, targets, grads)
        }


class TapeFreedError(GraphError):
    def __init__(self):
        super().__init__(
            "Trying to backward through the tape a second time: its saved values were freed by the previous backward. "
            "Pass parameters.retain_graph=true with a backward that should keep the tape.",
            field="tape", status=409,
        )


SIGNATURES_PER_PLAN = 64


def check_request_inputs(plan: Plan, arrays: dict) -> Shapes:
    """The request's tensors against the plan's input nodes (names, declared shapes and dtypes),
    then every node's shape by inference. All but the name check depend only on the tensors'
    shapes and dtypes, so they run once per such signature of a plan; a later request with
    the same signature gets the same answer from the plan's cache, one with another reruns them."""
    if arrays.keys() != plan.input_names:
        _check_names(plan, arrays)
    key = tuple((arrays[name].shape, arrays[name].dtype) for name in plan.inputs)
    shapes = plan.checked.get(key)
    if shapes is None:
        _check_declared(plan, arrays)
        shapes = Shapes.of(infer(plan.steps, {name: (tuple(a.shape), numpy.dtype(a.dtype)) for name, a in arrays.items()}))
        if len(plan.checked) < SIGNATURES_PER_PLAN:
            plan.checked[key] = shapes
    return shapes


def _check_names(plan: Plan, arrays: dict):
    missing = [n for n in plan.inputs if n not in arrays]
    if missing:
        raise GraphError(f"no tensor given for input node(s) {', '.join(map(repr, missing))}", node=missing[0], field="inputs")
    extra = [n for n in arrays if n not in plan.input_names]
    if extra:
        raise GraphError(f"tensor(s) {', '.join(map(repr, extra))} match no input node of the graph", node=extra[0], field="inputs")


def _check_declared(plan: Plan, arrays: dict):
    for step in plan.steps:
        if step.op != "input":
            continue
        array = arrays[step.id]
        if step.shape is not None and tuple(array.shape) != step.shape:
            raise GraphError(f"input {step.id!r} is declared with shape {list(step.shape)} but the tensor has shape {list(array.shape)}",
                             node=step.id, field="shape")
        if step.dtype is not None and numpy.dtype(array.dtype) != step.dtype:
            raise GraphError(f"input {step.id!r} is declared {step.dtype.name} but the tensor is {numpy.dtype(array.dtype).name}",
                             node=step.id, field="dtype")
        if step.requires_grad and numpy.dtype(array.dtype).kind != "f":
            raise GraphError(f"input {step.id!r} requires grad but its tensor is {numpy.dtype(array.dtype).name}",
                             node=step.id, field="requires_grad")
