"""Shapes and dtypes of every node, from the inputs' and the ops' shape rules, before anything runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from engine.registry import OPS
from engine.shapes import ShapeError
from wire import grad_node
from wire.errors import GraphError
from wire.graph import SUBGRAPH_OPS, Plan


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


def infer(steps, known: dict) -> dict:
    """(shape, dtype) of every node given the inputs', by the ops' shape rules."""
    for step in steps:
        if step.op == "input":
            continue
        if step.op == "constant":
            value = step.attrs["value"]
            known[step.id] = ((), value) if not hasattr(value, "shape") else (tuple(value.shape), value.dtype)
            continue
        if step.op == "grad":
            known[step.id] = grad_node.infer(step, known)
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
