"""Gradients of an execution's outputs with respect to its inputs (the engine's `grad`)."""

from __future__ import annotations

from engine import backend
from engine.api import (
    GraphFreedError,
    Variable,
    array_of,
    derived,
    grad_of_every_leaf,
    note_constant,
    note_input,
    recording_active,
    shown,
    variable_of,
)
from engine.api import grad as engine_grad
from wire.errors import GraphError, TapeFreedError
from wire.run import Execution


def gradients(execution: Execution, grad_outputs: dict | None = None, wrt=None, retain_graph=False) -> dict:
    """Gradients of the outputs with respect to `wrt` (default: inputs that require grad)."""
    grad_outputs = grad_outputs or {}
    unknown = set(grad_outputs) - set(execution.outputs)
    if unknown:
        raise GraphError(
            f"grad_outputs names {shown(sorted(unknown))}, which are not outputs of the graph", field="grad_outputs"
        )
    wrt = [n for n in execution.plan.inputs if n in execution.plan.requires_grad] if wrt is None else list(wrt)
    if not wrt:
        raise GraphError("nothing to differentiate: no input has requires_grad and 'wrt' is empty", field="wrt")
    targets = []
    for name in wrt:
        v = execution.values.get(name)
        if not isinstance(v, Variable):
            if any(step.id == name for step in execution.plan.steps):
                raise GraphError(
                    f"wrt names {shown(name)}, an intermediate value the run did not keep: name intermediates in "
                    "wrt with the request that runs the graph",
                    node=name,
                    field="wrt",
                )
            raise GraphError(f"wrt names {shown(name)}, which is not a node of the graph", node=name, field="wrt")
        if not v.requires_grad:
            raise GraphError(f"wrt names {shown(name)}, which does not require grad", node=name, field="wrt")
        targets.append(v)
    outs, seeds = [], []
    for name, out in execution.outputs.items():
        if not out.requires_grad:
            continue
        seed = grad_outputs.get(name)
        if seed is None:
            if array_of(out).size != 1:
                raise GraphError(
                    f"output {shown(name)} has shape {list(out.shape)}: a gradient can be implied only for scalar outputs; "
                    f"pass grad_outputs with a tensor named {shown(name)}",
                    node=name,
                    field="grad_outputs",
                )
            seed = backend.array_module(array_of(out)).ones_like(array_of(out))
            if recording_active():
                note_constant(seed)
        else:
            if tuple(seed.shape) != tuple(out.shape):
                raise GraphError(
                    f"grad_outputs {shown(name)} has shape {list(seed.shape)} but the output has shape {list(out.shape)}",
                    node=name,
                    field="grad_outputs",
                )
            seed = backend.to_active(seed).astype(out.dtype, copy=False)
            if recording_active():
                note_input(("grad_outputs", name), seed)
        outs.append(out)
        seeds.append(variable_of(seed))
    if execution.freed:
        raise TapeFreedError()
    if not outs:
        grads = [None] * len(targets)
    else:
        try:
            # wrt names every leaf that requires grad (its inputs that do, and no grad or function node, whose walks and
            # subgraphs make values of their own, nor indexing op or subgraph leaf: `Plan.noted`): the walk need not check
            leaves = [name for name, v in execution.inputs.items() if v.requires_grad]
            if execution.plan.noted <= {"input"} and set(wrt).issuperset(leaves):
                grads = grad_of_every_leaf(outs, targets, seeds, retain_graph)
            else:
                grads = engine_grad(outs, targets, seeds, retain_graph=retain_graph, allow_unused=True)
        except GraphError:
            raise
        except (RuntimeError, TypeError, ValueError, ArithmeticError) as err:
            raise GraphError(
                f"backward failed: {err}", kind="conflict" if isinstance(err, GraphFreedError) else "invalid"
            ) from None
    execution.freed = not retain_graph
    return {name: array_of(g if g is not None else derived(_zeros_like, t)) for name, t, g in zip(wrt, targets, grads)}


def _zeros_like(a):
    return backend.array_module(a).zeros_like(a)
