"""The `grad` node (graph format 1.1): a node whose value is the gradient of one node of the
graph with respect to another, recorded with `create_graph=True` so that later nodes, further
`grad` nodes and a request-level backward differentiate through it.

    {"id": "g", "op": "grad", "inputs": ["y", "x"]}          # d y / d x, y a scalar
    {"id": "g", "op": "grad", "inputs": ["y", "x", "v"]}     # vector-Jacobian product v^T dy/dx

The value has the shape and dtype of `x` (the wrt). When `y` does not depend on `x` the value
is zeros (`allow_unused` semantics). `x` must be differentiable: an input node (made to require
grad for the run, as a request-level `wrt` does) or a node that depends through differentiable
ops on an input with `requires_grad`. The optional third input (the grad_output) must have `y`'s
shape; without it `y` must have one element. Not allowed inside `function` subgraphs.

Grad nodes with the same `y` and grad_output share one backward pass per run: the first of them
computes the gradients for every wrt of the group that exists at that point.
"""

from __future__ import annotations

from engine import backend
from engine.api import OPS, Variable, array_of, coerce, shown, trusted, variable_of
from engine.api import grad as engine_grad
from wire import jvp_node
from wire.errors import GraphError

DOC = (
    "the gradient of inputs[0] with respect to inputs[1] (optional inputs[2]: the grad_output, default 1 for a "
    "one-element inputs[0]), recorded so that later nodes and a backward differentiate through it; zeros where "
    "inputs[0] does not depend on inputs[1]; graph version 1.1"
)
MINOR_VERSION = 1  # the graph format's minor version that introduced the node
# The most grad nodes nested in one another (the order of derivative). Each level records a
# graph a few times the size of the one it differentiates, so cost grows exponentially with
# the order, inside single backward passes that a compute timeout cannot interrupt.
MAX_ORDER = 4


def parse_step(step_class, node_id, raw_inputs, attrs, scope):
    """The Step of a grad node (its references are checked by the caller)."""
    if scope != "graph":
        raise GraphError(
            f"node {shown(node_id)}: grad nodes are not allowed inside a function subgraph", node=node_id, field="op"
        )
    if attrs:
        raise GraphError(f"grad node {shown(node_id)} takes no attrs", node=node_id, field="attrs")
    if len(raw_inputs) not in (2, 3):
        raise GraphError(
            f"grad node {shown(node_id)} takes 2 or 3 inputs (output, wrt[, grad_output]), got {len(raw_inputs)}",
            node=node_id,
            field="inputs",
        )
    return step_class(node_id, "grad", tuple(raw_inputs), {})


def _named(step_id, jvp_ids=()):
    """(how an error names the node of a grad step, its id): a jvp node's for the steps it expands into."""
    head = jvp_node.owner(step_id, jvp_ids) if jvp_ids else None
    if head is None and jvp_node.SEPARATOR in step_id:  # at run time, without the plan's jvp ids
        head = step_id.rpartition(jvp_node.SEPARATOR)[0] if not step_id.endswith("/jvp:zero") else None
    return (f"jvp node {shown(head)}", head) if head is not None else (f"grad node {shown(step_id)}", step_id)


def plan_grad_steps(steps, declared_requires_grad, minor_version, jvp_ids=frozenset()) -> frozenset:
    """Check a graph's grad nodes (those of jvp nodes, `jvp_ids`, included) and prepare their groups;
    returns the input nodes that must require grad for them (their wrts that are inputs)."""
    grad_steps = [s for s in steps if s.op == "grad"]
    if not grad_steps:
        return frozenset()
    if minor_version < MINOR_VERSION:
        name, node = _named(grad_steps[0].id, jvp_ids)
        raise GraphError(
            f'{name} needs graph version "1.1" (the graph declares 1.{minor_version})',
            node=node,
            field="graph.version",
        )
    _check_order(steps, jvp_ids)
    input_ids = {s.id for s in steps if s.op == "input"}
    wrt_inputs = frozenset(s.inputs[1] for s in grad_steps if s.inputs[1] in input_ids)
    differentiable = _differentiable(steps, declared_requires_grad | wrt_inputs)
    groups = {}
    for s in grad_steps:
        wrt = s.inputs[1]
        # a jvp's dummy cotangent is not differentiable when its output is not: the jvp is zeros then
        if wrt not in differentiable and not jvp_node.is_cotangent(wrt, jvp_ids):
            name, node = _named(s.id, jvp_ids)
            raise GraphError(
                f"{name}: cannot differentiate with respect to {shown(wrt)}: it depends on no input "
                "that requires grad (or only through non-differentiable ops)",
                node=node,
                field="inputs",
            )
        groups.setdefault(_group_key(s), []).append(wrt)
    shared = {key: {"group": tuple(dict.fromkeys(wrts))} for key, wrts in groups.items()}
    for s in grad_steps:
        s.attrs = shared[_group_key(s)]  # one tuple per group, not one per node: linear in the nodes
    return wrt_inputs


def _check_order(steps, jvp_ids):
    order = {}
    for s in steps:  # a grad node differentiates its output's graph, one order more; its seed is a value read as is
        below = max((order.get(i, 0) for i in (s.inputs[:2] if s.op == "grad" else s.inputs)), default=0)
        seed = order.get(s.inputs[2], 0) if s.op == "grad" and len(s.inputs) == 3 else 0
        order[s.id] = max(below + 1, seed) if s.op == "grad" else below
        if order[s.id] > MAX_ORDER:
            name, node = _named(s.id, jvp_ids)
            raise GraphError(
                f"{name} is a derivative of order {order[s.id]}, over the limit of {MAX_ORDER} "
                "(grad nodes nested in one another; a jvp node counts as two)",
                node=node,
                field="inputs",
                kind="too_large",
            )


def _group_key(step):
    return step.inputs[0], step.inputs[2] if len(step.inputs) == 3 else None


def _differentiable(steps, requiring) -> set:
    """Node ids whose values may require grad: the inputs `requiring`, and nodes computed from
    them by differentiable ops, function nodes and grad nodes."""
    out = set(requiring)
    for s in steps:
        if s.op in ("input", "constant"):
            continue
        if (s.op in ("function", "grad") or OPS[s.op].differentiable) and any(i in out for i in s.inputs):
            out.add(s.id)
    return out


def infer(step, known):
    """(shape, dtype) of a grad node: its wrt's; checks the grad_output against the output."""
    y, x = known.get(step.inputs[0]), known.get(step.inputs[1])
    if len(step.inputs) == 3:
        v = known.get(step.inputs[2])
        if y is not None and v is not None and tuple(v[0]) != tuple(y[0]) and step.inputs[0] == step.id + "/jvp:vjp":
            raise GraphError(
                f"jvp node {shown(step.id)}: tangent {shown(step.inputs[2])} has shape {list(v[0])} but the node it "
                f"differentiates with respect to has shape {list(y[0])}",
                node=_named(step.id)[1],
                field="inputs",
            )
        if y is not None and v is not None and tuple(v[0]) != tuple(y[0]):
            raise GraphError(
                f"{_named(step.id)[0]}: grad_output {shown(step.inputs[2])} has shape {list(v[0])} but "
                f"{shown(step.inputs[0])} has shape {list(y[0])}",
                node=_named(step.id)[1],
                field="inputs",
            )
    elif y is not None and _size(y[0]) != 1:
        raise GraphError(
            f"{_named(step.id)[0]}: {shown(step.inputs[0])} has shape {list(y[0])}: a gradient can be implied only "
            "for one-element outputs; give a grad_output as the third input",
            node=_named(step.id)[1],
            field="inputs",
        )
    if x is not None and getattr(x[1], "kind", "f") != "f":
        raise GraphError(
            f"{_named(step.id)[0]}: {shown(step.inputs[1])} is {x[1]}; only floating point values have gradients",
            node=_named(step.id)[1],
            field="inputs",
        )
    return x


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def value(step, values, memo):
    """The grad node's value in a run; `memo` (one dict per run) shares backward passes."""
    key = _group_key(step)
    wrt = step.inputs[1]
    grads = memo.get(key)
    if grads is None or wrt not in grads:
        grads = _gradients(step, values, [w for w in step.attrs["group"] if w in values])
        memo[key] = grads
    return grads[wrt]


def _gradients(step, values, wrts) -> dict:
    out = values[step.inputs[0]]
    targets = {w: values[w] for w in wrts}
    live = [w for w, t in targets.items() if isinstance(t, Variable) and t.requires_grad]
    found = {}
    if isinstance(out, Variable) and out.requires_grad and live:
        seed = _seed(step, out, values)
        try:
            grads = engine_grad(
                [out], [targets[w] for w in live], [seed], retain_graph=True, create_graph=True, allow_unused=True
            )
        except RuntimeError as err:
            name, node = _named(step.id)
            raise GraphError(f"{name} failed: {err}", node=node) from None
        found = {w: g for w, g in zip(live, grads) if g is not None}
    return {w: found[w] if w in found else _zeros(targets[w]) for w in wrts}


def _seed(step, out, values):
    if len(step.inputs) == 2:
        if array_of(out).size != 1:
            raise GraphError(
                f"{_named(step.id)[0]}: {shown(step.inputs[0])} has shape {list(out.shape)}: give a grad_output",
                node=_named(step.id)[1],
                field="inputs",
            )
        return variable_of(backend.array_module(array_of(out)).ones_like(array_of(out)))
    seed = coerce([out, values[step.inputs[2]]])[1]
    if tuple(seed.shape) != tuple(out.shape):
        raise GraphError(
            f"{_named(step.id)[0]}: grad_output {shown(step.inputs[2])} has shape {list(seed.shape)} but "
            f"{shown(step.inputs[0])} has shape {list(out.shape)}",
            node=_named(step.id)[1],
            field="inputs",
        )
    return seed if seed.dtype == out.dtype else trusted.cast(seed, dtype=out.dtype.name)


def _zeros(target):
    data = array_of(target if isinstance(target, Variable) else coerce([target])[0])
    return variable_of(backend.array_module(data).zeros_like(data))
