"""The `jvp` node (graph format 1.1): the directional derivative of one node along a tangent,
recorded so that later nodes, `grad` nodes and a request-level backward differentiate through it.

    {"id": "t", "op": "jvp", "inputs": ["y", "x", "v"]}     # J·v, J = d y / d x

The value has `y`'s shape and dtype; `v` must have `x`'s shape. It is zeros where `y` does not
depend on `x`. `x` must be differentiable, as a grad node's wrt (an input node is made to require
grad for the run). Not allowed inside `function` subgraphs.

The parser expands it into grad nodes by the transpose trick (`engine.linearize`): with `u` a
dummy cotangent of `y`'s shape, g(u) = uᵀ·J is linear in u and the gradient of <g(u), v> for u
is J·v. So it is

    {"id": "t/jvp:zero",      "op": "constant", "attrs": {"value": 0.0}}
    {"id": "t/jvp:cotangent", "op": "mul",  "inputs": ["y", "t/jvp:zero"]}          # u (its value is never used)
    {"id": "t/jvp:vjp",       "op": "grad", "inputs": ["y", "x", "t/jvp:cotangent"]}
    {"id": "t",               "op": "grad", "inputs": ["t/jvp:vjp", "t/jvp:cotangent", "v"]}

and runs, infers, is priced (two grad nodes) and is cached like them. Errors name the jvp node.
A jvp of a grad node is forward-over-reverse: `jvp(grad(f, x), x, v)` is a Hessian-vector product.
"""

from __future__ import annotations

from engine.api import OPS, shown
from wire.errors import GraphError

DOC = (
    "the Jacobian-vector product of inputs[0] with respect to inputs[1] along inputs[2] (a tangent of inputs[1]'s "
    "shape): J·v, of inputs[0]'s shape, recorded so that later nodes and grad nodes differentiate through it (a jvp "
    "of a grad node is a Hessian-vector product); zeros where inputs[0] does not depend on inputs[1]; graph version 1.1"
)
SEPARATOR = "/jvp:"  # the steps a jvp node expands into are named "<id>/jvp:<part>"


def expand(step_class, node_id, raw_inputs, attrs, scope) -> list:
    """The steps a jvp node stands for (its references are checked by the caller); the last is `node_id`."""
    if scope != "graph":
        raise GraphError(
            f"node {shown(node_id)}: jvp nodes are not allowed inside a function subgraph", node=node_id, field="op"
        )
    if attrs:
        raise GraphError(f"jvp node {shown(node_id)} takes no attrs", node=node_id, field="attrs")
    if len(raw_inputs) != 3:
        raise GraphError(
            f"jvp node {shown(node_id)} takes 3 inputs (output, wrt, tangent), got {len(raw_inputs)}",
            node=node_id,
            field="inputs",
        )
    y, x, v = raw_inputs
    zero, u, vjp = (f"{node_id}{SEPARATOR}{part}" for part in ("zero", "cotangent", "vjp"))
    return [
        step_class(zero, "constant", (), {"value": 0.0}),
        step_class(u, "mul", (y, zero), OPS["mul"].check_attrs({})),
        step_class(vjp, "grad", (y, x, u), {}),
        step_class(node_id, "grad", (vjp, u, v), {}),
    ]


def owner(step_id, jvp_ids) -> str | None:
    """The jvp node that step `step_id` is part of (None for a step of its own)."""
    if step_id in jvp_ids:
        return step_id
    head, sep, _ = step_id.rpartition(SEPARATOR)
    return head if sep and head in jvp_ids else None


def is_cotangent(step_id, jvp_ids) -> bool:
    head, sep, part = step_id.rpartition(SEPARATOR)
    return bool(sep) and part == "cotangent" and head in jvp_ids
