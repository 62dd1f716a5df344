"""The graph format (version 1.1): parse and validate a serialized expression graph, then run it.

A graph is a list of nodes in topological order with single-assignment ids:

    {"version": 1,
     "nodes": [{"id": "x", "op": "input", "requires_grad": true, "shape": [2], "dtype": "FP32"},
               {"id": "c", "op": "constant", "attrs": {"value": 2.0}},
               {"id": "y", "op": "mul", "inputs": ["x", "c"]},
               {"id": "s", "op": "sum", "inputs": ["y"]}],
     "outputs": ["s"]}

Ops are the registry's (`engine.registry.OPS`) plus `input`, `constant`, `function` (a custom
Function traced into a forward and a backward subgraph; see docs/protocol.md) and, since 1.1,
`grad` (the gradient of one node with respect to another; `wire.grad_node`) and `jvp` (a
Jacobian-vector product, expanded into grad nodes as it is parsed; `wire.jvp_node`). Validation is
complete before anything is computed; every error names the node and the field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy

from engine.api import INT64, OPS, AttrError, as_array, shown, tensor_count
from wire import grad_node, jvp_node
from wire.codec import DATATYPES, NONFINITE
from wire.errors import GraphError
from wire.run import subgraph_function

Signature = (
    tuple  # an input signature: each input's (shape, dtype), in the plan's input order (`wire.infer.signature_of`)
)


class ProgramKey(NamedTuple):
    """What one compiled program of a signature is for (`wire.compile.run_compiled`)."""

    differentiate: bool  # a backward (else a forward)
    wrt: tuple | None  # the inputs differentiated, as the request named them (None: every one that requires grad)
    seeded: frozenset  # the outputs the request seeds with grad_outputs


class Signatures(dict[Signature, Any]):
    """A plan's checked input signatures: Signature -> `wire.infer.Shapes` (at most SIGNATURES_PER_PLAN)."""


class Programs(dict[ProgramKey, Any]):
    """A signature's compiled programs: ProgramKey -> `wire.program.Program`, the `Fallback` saying why not, or
    `wire.compile.SEEN` after its first request (recorded at its second)."""


VERSION = "1.1"  # "major.minor"; a graph's "version" is the oldest format it needs (VERSIONS)
VERSIONS = {"1.0": 0, "1.1": 1}  # accepted spellings -> minor version; the number 1 means "1.0"
SPECIAL_OPS = {
    "input": "a tensor from the request's inputs, matched by name = node id",
    "constant": "attrs.value (number or nested list), optional attrs.dtype (an OIP datatype)",
    "function": "a custom Function: attrs.name, attrs.forward and attrs.backward subgraphs",
    "grad": grad_node.DOC,
    "jvp": jvp_node.DOC,
}
SUBGRAPH_OPS = {
    "arg": "inside a function subgraph: the function's input attrs.index",
    "grad_output": "inside a backward subgraph: the gradient of the function's output",
    "forward_value": "inside a backward subgraph: the value of forward-subgraph node attrs.node",
}
NODE_KEYS = frozenset({"id", "op", "inputs", "attrs", "requires_grad", "shape", "dtype", "resident"})
INPUT_KEYS = frozenset({"requires_grad", "shape", "dtype", "resident"})  # fields of input nodes only
EMPTY: dict = {}  # a node's attrs when it sends none, and NO_INPUTS its inputs (never mutated)
NO_INPUTS: list = []


@dataclass(slots=True)  # ~100 bytes a step less than with a __dict__: a plan keeps one per node
class Step:
    id: str
    op: str
    inputs: tuple
    attrs: dict
    requires_grad: bool = False
    shape: tuple | None = None
    dtype: object = None
    function: type | None = None
    subgraphs: tuple | None = None  # a function node's (forward Plan, backward Plan)
    dynamic: bool = False  # its shape may be known only by running (see mark_dynamic)
    resident: str | None = None  # an input's: the handle of the resident array it reads (wire.residents)


INDEXING_OPS = ("getitem", "setitem", "index_add")
# the ops whose steps parse notes (`Plan.noted`): inputs, grad and function nodes, what may make a shape dynamic
NOTED_OPS = frozenset({"input", "grad", "function", *INDEXING_OPS, *SUBGRAPH_OPS})


DYNAMIC_SEEDS = frozenset({*INDEXING_OPS, *SUBGRAPH_OPS})  # the ops whose steps may start a dynamic shape


def mark_dynamic(steps, scope):
    """Flag the steps whose shapes may depend on values (downstream of an index array, which may
    be a boolean mask; in a subgraph, of any leaf), so a run checks their size before computing."""
    dynamic: set = set()
    for step in steps:
        if (
            (step.op in SUBGRAPH_OPS and scope != "graph")
            or (dynamic and not dynamic.isdisjoint(step.inputs))
            or (step.op in INDEXING_OPS and tensor_count(step.attrs["index"]))
        ):
            step.dynamic = True
            dynamic.add(step.id)


def liveness(steps, keep, inputs=None) -> list:
    """For each step, the values that no later step reads (to drop once it has run: its inputs in their
    order, then itself), except `keep` and inputs (the ids of its input steps, found when not given).
    Computed once per plan, in one walk back; what the backward needs, the engine's graph holds itself."""
    held = {*keep, *([s.id for s in steps if s.op == "input"] if inputs is None else inputs)}  # (and read later)
    drops = [()] * len(steps)  # (most steps drop one value or none: a tuple each, no list)
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        for ref in step.inputs:
            if ref not in held:  # its last reader
                held.add(ref)
                drops[index] += (ref,)
        if step.id not in held:  # read by none
            drops[index] += (step.id,)
    return drops


@dataclass
class Plan:
    steps: list
    outputs: tuple
    inputs: tuple
    requires_grad: frozenset
    grad_inputs: frozenset = frozenset()  # inputs that grad nodes differentiate with respect to
    has_grad_nodes: bool = False  # then every run records (the grad nodes differentiate it)
    jvps: frozenset = frozenset()  # the jvp nodes (each expanded into steps: see wire.jvp_node)
    noted: frozenset = NOTED_OPS  # the ops of NOTED_OPS that its steps have (all of them: not noted)
    residents: dict = field(default_factory=dict)  # input id -> the handle of the resident array it reads
    input_steps: tuple = ()  # the steps of `inputs`
    checked: Signatures = field(default_factory=Signatures)  # input signature -> Shapes (see check_request_inputs)
    input_names: frozenset = field(init=False)
    drops: list = field(init=False)  # liveness: per step, the values to drop after it (see liveness)

    def __post_init__(self):
        self.input_names = frozenset(self.inputs)
        self.drops = liveness(self.steps, self.outputs, self.inputs)

    def count_steps(self) -> int:
        """Steps of the plan, its function nodes' subgraphs' included."""
        return len(self.steps) + sum(sub.count_steps() for s in self.steps if s.subgraphs for sub in s.subgraphs)


def _fail(message, node=None, field=None):
    raise GraphError(message, node=node, field=field)


def _check_subgraph(obj, where, node_id):
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list) or not isinstance(obj.get("outputs"), list):
        _fail(
            f"function node {shown(node_id)}: {where} must be an object with 'nodes' and 'outputs' lists",
            node_id,
            f"attrs.{where}",
        )


def parse(graph, max_nodes=100_000, max_depth=100_000, _scope="graph", _budget=None) -> Plan:
    """Validate a graph completely and turn it into a Plan (no compute, no tensors needed)."""
    if not isinstance(graph, dict):
        _fail("'graph' must be an object with 'version', 'nodes' and 'outputs'", field="graph")
    minor = _minor_version(graph.get("version", VERSION)) if _scope == "graph" else None
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        _fail("'graph.nodes' must be a non-empty list", field="graph.nodes")
    budget = _budget if _budget is not None else [max_nodes]
    budget[0] -= len(nodes)
    if budget[0] < 0:
        raise GraphError(
            f"the graph has more than the limit of {max_nodes} nodes", field="graph.nodes", kind="too_large"
        )
    steps, depth, seen = [], {}, {}
    inputs, requires, jvps, noted, residents = [], set(), set(), set(), {}
    attrs_memo: dict = {}
    deep = 4 * len(nodes) > max_depth  # (a node is at most 4 steps, a jvp's: a depth past the limit needs more)
    for index, node in enumerate(nodes):
        parsed = None
        if node.__class__ is dict:  # an op node of a kind checked before, with no field but these: its Step at once
            node_id, op, raw_inputs = node.get("id"), node.get("op"), node.get("inputs")
            attrs = node.get("attrs", EMPTY) if len(node) == 4 else EMPTY if len(node) == 3 else None
            if (
                op.__class__ is str
                and node_id.__class__ is str
                and raw_inputs.__class__ is list
                and attrs.__class__ is dict
                and (attrs is not EMPTY or len(node) == 3)
                and node_id
                and node_id not in seen
            ):
                try:  # (its inputs: the ids seen, or None)
                    count, get = len(raw_inputs), seen.get
                    refs = (get(raw_inputs[0]), get(raw_inputs[1])) if count == 2 else tuple(map(get, raw_inputs))
                    found = attrs_memo.get(
                        (op, count, *[(k, v.__class__, v) for k, v in attrs.items()]) if attrs else (op, count)
                    )
                except TypeError:  # an input or attribute that is not hashable: checked by _parse_node
                    found = None
                if found is not None and (refs[0] is not None is not refs[1] if count == 2 else None not in refs):
                    parsed = Step(node_id, found[0], refs, found[1])
                    if not deep and parsed.op not in NOTED_OPS:  # the common step, alone
                        seen[node_id] = node_id
                        steps.append(parsed)
                        continue
        if parsed is None:
            parsed = _parse_node(node, index, seen, _scope, max_nodes, max_depth, budget, attrs_memo)
        expanded = parsed.__class__ is list  # a jvp node, expanded into the steps it stands for
        if expanded:
            jvps.add(parsed[-1].id)
        else:
            parsed = (parsed,)
        for step in parsed:
            if expanded and step.id in seen:
                _fail(f"node {shown(step.id)} is defined twice (ids are single-assignment)", step.id, "id")
            if deep:
                d = 0
                for i in step.inputs:
                    if isinstance(i, str) and depth[i] > d:
                        d = depth[i]
                d += 1
                if d > max_depth:
                    raise GraphError(
                        f"node {shown(step.id)}: the graph is deeper than the limit of {max_depth}",
                        node=step.id,
                        kind="too_large",
                    )
                depth[step.id] = d
            seen[step.id] = step.id
            steps.append(step)
            if step.op in NOTED_OPS:
                noted.add(step.op)
                if step.op == "input":
                    inputs.append(step)
                    if step.requires_grad:
                        requires.add(step.id)
                    if step.resident is not None:
                        residents[step.id] = step.resident
    outputs = graph.get("outputs")
    if not isinstance(outputs, list) or not outputs:
        _fail("'graph.outputs' must be a non-empty list of node ids", field="graph.outputs")
    for out in outputs:
        if out is not None and (not isinstance(out, str) or out not in seen):
            _fail(
                f"output {shown(out)} is not a node of the graph",
                node=out if isinstance(out, str) else None,
                field="graph.outputs",
            )
        if _scope != "backward" and out is None:
            _fail("outputs must be node ids", field="graph.outputs")
    if _scope == "graph" and len(set(outputs)) != len(outputs):
        _fail("'graph.outputs' names a node twice", field="graph.outputs")
    if not noted.isdisjoint(DYNAMIC_SEEDS):  # (else no step is dynamic)
        mark_dynamic(steps, _scope)
    graded = _scope == "graph" and "grad" in noted  # (a graph without grad nodes has no grad inputs)
    grad_inputs = grad_node.plan_grad_steps(steps, requires, minor, jvps) if graded else frozenset()
    return Plan(
        steps,
        tuple(outputs),
        tuple(s.id for s in inputs),
        frozenset(requires),
        grad_inputs,
        "grad" in noted,
        frozenset(jvps),
        frozenset(noted),
        residents,
        tuple(inputs),
    )


def _unknown_input(node_id, raw_inputs, seen):
    """Fail for the first of a node's inputs that is not the id of a node before it (a str subclass's
    that is one passes)."""
    if not all(isinstance(i, str) for i in raw_inputs):
        _fail(f"node {shown(node_id)}: 'inputs' must be a list of node ids", node_id, "inputs")
    for ref in raw_inputs:
        if ref not in seen:
            break
    else:
        return
    _fail(
        f"node {shown(node_id)}: input {shown(ref)} is not defined before this node (nodes must be in topological order)",
        node_id,
        "inputs",
    )


def _minor_version(version) -> int:
    """The minor version a graph declares: "1.0" or "1.1" (the JSON number 1 is "1.0")."""
    if isinstance(version, str):
        minor = VERSIONS.get(version)
    else:
        minor = 0 if version == 1 else None
    if minor is None:
        _fail(
            f"unsupported graph version {shown(version)}; this server speaks {', '.join(map(repr, VERSIONS))} "
            f'(or the number 1, meaning "1.0")',
            field="graph.version",
        )
    return minor


def _parse_node(node, index, seen, scope, max_nodes, max_depth, budget, attrs_memo) -> Step | list:
    """A node's Step (a jvp node's: the list it expands into), checked field by field (parse finds the common
    one first). `seen` maps the ids defined so far to themselves: a step's inputs are those very
    strings, not the request's copies of them. `attrs_memo` shares the checked attrs of the plan's op nodes
    with equal (hashable) attrs: (op, arity, attrs) -> (the op's name, checked attrs)."""
    if not isinstance(node, dict):
        _fail(f"graph.nodes[{index}] must be an object", field=f"graph.nodes[{index}]")
    node_id = node.get("id")
    if not isinstance(node_id, str) or not node_id:
        _fail(f"graph.nodes[{index}]: 'id' must be a non-empty string", field=f"graph.nodes[{index}].id")
    if node_id in seen:
        _fail(f"node {shown(node_id)} is defined twice (ids are single-assignment)", node_id, "id")
    if not NODE_KEYS.issuperset(node):
        extra = set(node) - NODE_KEYS
        _fail(f"node {shown(node_id)}: unknown field(s) {', '.join(sorted(extra))}", node_id, sorted(extra)[0])
    op = node.get("op")
    if not isinstance(op, str):
        _fail(f"node {shown(node_id)}: 'op' must be a string", node_id, "op")
    raw_inputs = node.get("inputs", NO_INPUTS)
    if not isinstance(raw_inputs, list):
        _fail(f"node {shown(node_id)}: 'inputs' must be a list of node ids", node_id, "inputs")
    for ref in raw_inputs:
        if ref.__class__ is not str or ref not in seen:
            _unknown_input(node_id, raw_inputs, seen)
            break
    attrs = node.get("attrs", EMPTY)
    if not isinstance(attrs, dict):
        _fail(f"node {shown(node_id)}: 'attrs' must be an object", node_id, "attrs")
    requires_grad = node.get("requires_grad", False)
    if not isinstance(requires_grad, bool):
        _fail(f"node {shown(node_id)}: 'requires_grad' must be true or false", node_id, "requires_grad")
    if op != "input" and not INPUT_KEYS.isdisjoint(node):
        _fail(f"node {shown(node_id)}: only input nodes take requires_grad, shape, dtype and resident", node_id, "op")
    spec = OPS.get(op)
    if spec is None:  # not a registry op (those, the common case, have no name below)
        return _special_step(node, node_id, op, raw_inputs, attrs, requires_grad, scope, max_nodes, max_depth, budget)
    # the checked attrs of equal (hashable) attrs, and whether an arity fits them, are found once
    try:
        key = (
            (op, len(raw_inputs), *[(k, v.__class__, v) for k, v in attrs.items()]) if attrs else (op, len(raw_inputs))
        )
        checked = attrs_memo.get(key)
        checked = None if checked is None else checked[1]
    except TypeError:  # an unhashable value (a list): checked on its own
        key, checked = None, None
    if checked is None:
        try:
            checked = spec.check_attrs(_unspell_floats(spec, attrs))
        except (AttrError, TypeError) as err:
            _fail(f"node {shown(node_id)} ({op}): {err}", node_id, "attrs")
        problem = spec.arity_error(len(raw_inputs), checked)
        if problem:
            _fail(f"node {shown(node_id)} ({op}) {problem}", node_id, "inputs")
        if key is not None:
            checked = attrs_memo.setdefault(key, (spec.name, checked))[1]
    return Step(node_id, spec.name, tuple(map(seen.__getitem__, raw_inputs)), checked)


def _special_step(node, node_id, op, raw_inputs, attrs, requires_grad, scope, max_nodes, max_depth, budget):
    """The Step of an input, constant, subgraph leaf, grad, jvp (its list) or function node."""
    if op == "input":
        if scope != "graph":
            _fail(
                f"node {shown(node_id)}: input nodes are not allowed inside a function subgraph (use 'arg')",
                node_id,
                "op",
            )
        return _input_step(node, node_id, raw_inputs, attrs, requires_grad)
    if op == "constant":
        return _constant_step(node_id, raw_inputs, attrs)
    if op in SUBGRAPH_OPS:
        return _subgraph_leaf(node_id, op, raw_inputs, attrs, scope)
    if op == "grad":
        return grad_node.parse_step(Step, node_id, raw_inputs, attrs, scope)
    if op == "jvp":
        return jvp_node.expand(Step, node_id, raw_inputs, attrs, scope)
    if op == "function":
        return _function_step(node_id, raw_inputs, attrs, max_nodes, max_depth, budget)
    _fail(f"node {shown(node_id)}: unknown op {shown(op)} (GET /ops lists the known ones)", node_id, "op")


FLOAT_KINDS = ("float", "float?", "p")


def _unspell_floats(spec, attrs):
    """Float attributes may be spelled "Infinity", "-Infinity" or "NaN" (JSON has no such numbers),
    as tensor data may (engine.codec): e.g. norm's p = inf."""
    spelled = [
        name
        for name, value in attrs.items()
        if isinstance(value, str) and value in NONFINITE and name in spec.attrs and spec.attrs[name].kind in FLOAT_KINDS
    ]
    if not spelled:
        return attrs
    return {**attrs, **{name: NONFINITE[attrs[name]] for name in spelled}}


def _input_step(node, node_id, raw_inputs, attrs, requires_grad):
    if raw_inputs or attrs:
        _fail(f"input node {shown(node_id)} takes no inputs or attrs", node_id, "inputs" if raw_inputs else "attrs")
    shape = node.get("shape")
    if shape is not None and (
        not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        _fail(f"input node {shown(node_id)}: 'shape' must be a list of non-negative integers", node_id, "shape")
    dtype = node.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype not in DATATYPES):
        _fail(
            f"input node {shown(node_id)}: unknown dtype {shown(dtype)}; expected one of {', '.join(DATATYPES)}",
            node_id,
            "dtype",
        )
    if requires_grad and dtype is not None and DATATYPES[dtype].kind != "f":
        _fail(
            f"input node {shown(node_id)}: only floating point inputs can require grad (dtype {dtype})",
            node_id,
            "requires_grad",
        )
    resident = node.get("resident")
    if resident is not None and (not isinstance(resident, str) or not resident):
        _fail(f"input node {shown(node_id)}: 'resident' must be a non-empty string (a handle)", node_id, "resident")
    step = Step(
        node_id,
        "input",
        (),
        {},
        requires_grad,
        None if shape is None else tuple(shape),
        None if dtype is None else DATATYPES[dtype],
    )
    step.resident = resident
    return step


def _constant_step(node_id, raw_inputs, attrs):
    if raw_inputs:
        _fail(f"constant node {shown(node_id)} takes no inputs", node_id, "inputs")
    if set(attrs) - {"value", "dtype"} or "value" not in attrs:
        _fail(f"constant node {shown(node_id)}: attrs must be {{'value': ..., 'dtype': optional}}", node_id, "attrs")
    value, dtype = attrs["value"], attrs.get("dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype not in DATATYPES):
        _fail(f"constant node {shown(node_id)}: unknown dtype {shown(dtype)}", node_id, "attrs.dtype")
    if dtype is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            _fail(f"constant node {shown(node_id)}: {value} is out of the range of INT64", node_id, "attrs.value")
        return Step(node_id, "constant", (), {"value": value})
    try:
        _check_range(value, None if dtype is None else DATATYPES[dtype], dtype)
        array = as_array(value, None if dtype is None else DATATYPES[dtype])
    except (ValueError, TypeError, OverflowError) as err:
        _fail(
            f"constant node {shown(node_id)}: value is not a number or a rectangular nested list of them: {err}",
            node_id,
            "attrs.value",
        )
    if array.dtype.kind not in "biuf":
        _fail(f"constant node {shown(node_id)}: value must be numbers or booleans", node_id, "attrs.value")
    return Step(node_id, "constant", (), {"value": array})


def _check_range(value, dtype, name):
    """Refuse integers that the constant's datatype cannot hold (they would wrap), as for inputs."""
    raw = numpy.asarray(value)
    if raw.dtype.kind == "O":
        raise ValueError("values must be numbers within the range of a 64-bit integer or a float")
    if dtype is None or dtype.kind not in "iu" or not raw.size:
        return
    if raw.dtype.kind == "f":
        raise ValueError(f"non-integer values for a {name} constant")
    info = numpy.iinfo(dtype)
    if raw.min() < info.min or raw.max() > info.max:
        raise ValueError(f"values outside the range of {name} [{info.min}, {info.max}]")


def _subgraph_leaf(node_id, op, raw_inputs, attrs, scope):
    allowed = {"forward": {"arg"}, "backward": {"arg", "grad_output", "forward_value"}}.get(scope, set())
    if op not in allowed:
        _fail(
            f"node {shown(node_id)}: op {shown(op)} is only allowed inside a function's {'backward' if op != 'arg' else ''} subgraph".replace(
                "  ", " "
            ),
            node_id,
            "op",
        )
    if raw_inputs:
        _fail(f"node {shown(node_id)}: {op} takes no inputs", node_id, "inputs")
    if op == "arg":
        index = attrs.get("index")
        if set(attrs) != {"index"} or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            _fail(f"node {shown(node_id)}: arg needs attrs {{'index': non-negative integer}}", node_id, "attrs.index")
    elif op == "forward_value":
        if set(attrs) != {"node"} or not isinstance(attrs.get("node"), str):
            _fail(
                f"node {shown(node_id)}: forward_value needs attrs {{'node': forward node id}}", node_id, "attrs.node"
            )
    elif attrs:
        _fail(f"node {shown(node_id)}: grad_output takes no attrs", node_id, "attrs")
    return Step(node_id, op, (), dict(attrs))


def _function_step(node_id, raw_inputs, attrs, max_nodes, max_depth, budget):
    name = attrs.get("name", "Function")
    if not isinstance(name, str) or not name.isidentifier():
        _fail(f"function node {shown(node_id)}: attrs.name must be an identifier", node_id, "attrs.name")
    if set(attrs) - {"name", "forward", "backward"}:
        _fail(f"function node {shown(node_id)}: attrs are name, forward and backward", node_id, "attrs")
    for part in ("forward", "backward"):
        _check_subgraph(attrs.get(part), part, node_id)
    try:
        forward = parse(attrs["forward"], max_nodes, max_depth, "forward", budget)
        backward = parse(attrs["backward"], max_nodes, max_depth, "backward", budget)
    except GraphError as err:
        raise GraphError(
            f"function node {shown(node_id)}: {err}", node=node_id, field=err.field, kind=err.kind
        ) from None
    if len(forward.outputs) != 1:
        _fail(
            f"function node {shown(node_id)}: the forward subgraph must have exactly one output",
            node_id,
            "attrs.forward.outputs",
        )
    if len(backward.outputs) != len(raw_inputs):
        _fail(
            f"function node {shown(node_id)}: the backward subgraph must have one output per input "
            f"({len(raw_inputs)}), got {len(backward.outputs)}",
            node_id,
            "attrs.backward.outputs",
        )
    forward_ids = {s.id for s in forward.steps}
    kept = {s.attrs["node"] for s in backward.steps if s.op == "forward_value"} | {forward.outputs[0]}
    forward.drops = liveness(forward.steps, kept)
    for plan, part in ((forward, "forward"), (backward, "backward")):
        for s in plan.steps:
            if s.op == "arg" and s.attrs["index"] >= len(raw_inputs):
                _fail(
                    f"function node {shown(node_id)}: {part} arg index {s.attrs['index']} but the node has {len(raw_inputs)} input(s)",
                    node_id,
                    f"attrs.{part}",
                )
            if s.op == "forward_value" and s.attrs["node"] not in forward_ids:
                _fail(
                    f"function node {shown(node_id)}: forward_value {shown(s.attrs['node'])} is not a forward node",
                    node_id,
                    "attrs.backward",
                )
    return Step(
        node_id,
        "function",
        tuple(raw_inputs),
        {},
        function=subgraph_function(name, forward, backward, kept),
        subgraphs=(forward, backward),
    )
