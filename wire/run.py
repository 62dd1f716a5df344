"""Running a plan's steps on the engine: an `Execution` holds one run's values and, when it
recorded, the graph that `wire.differentiate` walks back. Runs are cooperatively cancellable."""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from functools import cached_property

import numpy

from engine import backend
from engine.api import (
    OPS,
    Function,
    ShapeError,
    Variable,
    array_of,
    coerce,
    held_arrays,
    no_grad,
    note_constant,
    note_input,
    note_where,
    recording_active,
    set_interrupt,
    shown,
    variable_of,
)
from wire import grad_node
from wire.errors import GraphError


class _ThreadState(threading.local):
    """Per thread: the cancel event (`cancel_scope`) and the element limit (`element_guard`).
    Class defaults, so that a thread that set neither reads None without an AttributeError
    raised and dropped on every lookup."""

    event = None
    max_elements = None


_cancel = _ThreadState()


def cancelled(node_id=None) -> GraphError:
    """The error of a run stopped by its cancel event (see cancel_scope), at `node_id` if given."""
    where = f"node {shown(node_id)}: " if node_id else ""
    return GraphError(
        f"{where}the computation was cancelled (compute timeout or client gone)", node=node_id, kind="cancelled"
    )


@contextmanager
def cancel_scope(event: threading.Event):
    """Run graphs in this thread cooperatively cancellable: once `event` is set, the next step
    (of the graph, of a function's subgraph, or of the backward walk) raises GraphError (kind
    "cancelled"). The service sets it when a request's compute timeout passes or its client leaves."""
    previous = _cancel.event
    _cancel.event = event

    def check():
        if event.is_set():
            raise cancelled()

    previous_hook = set_interrupt(check)
    try:
        yield
    finally:
        _cancel.event = previous
        set_interrupt(previous_hook)


def current_cancel():
    """This thread's cancel event (see cancel_scope), or None."""
    return _cancel.event


@contextmanager
def element_guard(max_elements: int | None):
    """Within it, a step whose shape was not known before running (downstream of a boolean mask,
    see `Step.dynamic`) is checked against `max_elements` from its inputs' actual shapes first."""
    previous = _cancel.max_elements
    _cancel.max_elements = max_elements
    try:
        yield
    finally:
        _cancel.max_elements = previous


def _check_dynamic(step, values, limit):
    metas = [values[i] for i in step.inputs]
    shapes = [tuple(getattr(v, "shape", ())) for v in metas]
    dtypes = [v.dtype if hasattr(v, "dtype") else numpy.result_type(v) for v in metas]
    try:
        shape, _ = OPS[step.op].infer(shapes, dtypes, step.attrs)
    except (ShapeError, ValueError, TypeError, IndexError, RuntimeError):
        return  # the op itself reports what is wrong
    count = math.prod(shape)
    if count > limit:
        raise GraphError(
            f"node {shown(step.id)} ({step.op}) would hold {count} elements (shape {list(shape)}), over the limit of {limit}",
            node=step.id,
            kind="too_large",
        )


RUN_SPECIAL = frozenset({"input", "constant", "arg", "grad_output", "forward_value", "function", "grad"})


def run_steps(steps, drops, values, inputs=None, args=(), forward=None, grad_output=None, keep=()):
    """Run `steps`, dropping each value after its last reader (`drops`, see `wire.graph.liveness`)
    unless it is in `keep`."""
    cancel = _cancel.event
    limit = _cancel.max_elements
    shared_backwards = None
    recording = recording_active()  # (a run's recording starts and ends around it, never inside)
    for step, drop in zip(steps, drops):
        if cancel is not None and cancel.is_set():
            raise cancelled(step.id)
        op = step.op
        if recording:
            note_where(f"node {step.id!r}")
        if op not in RUN_SPECIAL:  # an op (the common case first)
            if step.dynamic and limit is not None:
                _check_dynamic(step, values, limit)
            try:
                refs = step.inputs
                if len(refs) == 2:  # (two Variables, the common step, need no coercing)
                    operands = [values[refs[0]], values[refs[1]]]
                    if operands[0].__class__ is not Variable or operands[1].__class__ is not Variable:
                        operands = coerce(operands)
                else:
                    operands = coerce(list(map(values.__getitem__, refs)))
                values[step.id] = OPS[op].call(operands, step.attrs)
            except GraphError:
                raise
            except MemoryError:
                raise GraphError(
                    f"node {shown(step.id)} ({op}): out of memory", node=step.id, kind="out_of_memory"
                ) from None
            except Exception as err:  # noqa: BLE001 - any op failure is the graph's fault, reported with its node
                if _is_out_of_memory(err):
                    raise GraphError(
                        f"node {shown(step.id)} ({op}): out of device memory", node=step.id, kind="out_of_memory"
                    ) from None
                shapes = ", ".join(f"{i} {list(getattr(values[i], 'shape', ()))}" for i in step.inputs)
                raise GraphError(
                    f"node {shown(step.id)} ({op}) failed: {err} (inputs: {shapes})", node=step.id
                ) from None
        elif op == "input":
            values[step.id] = inputs[step.id]
        elif op == "constant":
            value = step.attrs["value"]
            if hasattr(value, "shape"):
                array = backend.to_active(value)
                if recording:
                    note_constant(array)
                value = variable_of(array)
            values[step.id] = value
        elif op == "arg":
            values[step.id] = args[step.attrs["index"]]
        elif op == "grad_output":
            values[step.id] = grad_output
        elif op == "forward_value":
            values[step.id] = forward[step.attrs["node"]]
        elif op == "function":
            values[step.id] = step.function.apply(*[as_variable(values[i]) for i in step.inputs])
        elif op == "grad":
            if shared_backwards is None:
                shared_backwards = {}
            values[step.id] = grad_node.value(step, values, shared_backwards)
        for name in drop:
            if name not in keep:
                del values[name]
    return values


def _is_out_of_memory(err) -> bool:
    return type(err).__name__ in ("OutOfMemoryError", "CUDARuntimeError") and "memory" in str(err).lower()


def as_variable(value):
    return value if isinstance(value, Variable) else coerce([value])[0]


def subgraph_function(name, forward, backward, kept):
    """A Function class whose forward and backward run the subgraphs' plans (a traced custom
    Function). The forward keeps only `kept`: its output and the values the backward reads."""
    forward_output, backward_outputs = forward.outputs[0], backward.outputs

    def forward_fn(ctx, *args):
        values = run_steps(forward.steps, forward.drops, {}, args=args)
        output = as_variable(values[forward_output])
        # the output is saved as PyTorch saves a forward's result: backward reads it with its grad_fn, so a
        # backward recorded with create_graph (a grad node) differentiates through it; other forward
        # values are constants there, as values computed inside a PyTorch forward are
        ctx.save_for_backward(*args, output)
        ctx.values = {k: v for k, v in values.items() if k in kept and k != forward_output}
        return output

    def backward_fn(ctx, grad_output):
        *args, output = ctx.saved_tensors
        forward = {**ctx.values, forward_output: output}
        values = run_steps(backward.steps, backward.drops, {}, args=args, forward=forward, grad_output=grad_output)
        return tuple(None if out is None else values[out] for out in backward_outputs)

    return type(name, (Function,), {"forward": staticmethod(forward_fn), "backward": staticmethod(backward_fn)})


class Execution:
    """One run of a plan: its values, and (when recorded) the graph to differentiate."""

    def __init__(self, plan, tensors: dict, record: bool, wrt=()):
        self.plan = plan
        record = record or plan.has_grad_nodes
        needs = plan.requires_grad | plan.grad_inputs | set(wrt)
        self.inputs = {}
        for name in plan.inputs:
            array = backend.to_active(tensors[name])
            if recording_active():
                note_input(name, array)
            requires = record and name in needs
            if requires and array.dtype.kind != "f":
                raise GraphError(
                    f"input {shown(name)} is {array.dtype.name}; only floating point inputs can require grad",
                    node=name,
                    field="requires_grad",
                )
            self.inputs[name] = variable_of(array, requires_grad=requires)
        keep = frozenset(wrt)
        if record:
            values = run_steps(plan.steps, plan.drops, {}, inputs=self.inputs, keep=keep)
        else:
            with no_grad():
                values = run_steps(plan.steps, plan.drops, {}, inputs=self.inputs, keep=keep)
        self.values = values
        self.outputs = {name: as_variable(values[name]) for name in plan.outputs}
        self.freed = False

    @cached_property
    def nbytes(self) -> int:
        """Bytes a retained tape holds: its values and everything its recorded graph keeps for the
        backward (`engine.node.Node.holds`: ops' saved inputs and outputs, custom Functions' saved
        values), each array once, plus the Python objects around them (`TAPE_NODE_BYTES` per
        recorded node, `TAPE_ARRAY_BYTES` per array). Not the plan (see `wire.stores.TapeStore`)."""
        counted, total = set(), 0
        nodes = []
        for array in held_arrays(list(self.values.values()) + list(self.outputs.values()), nodes):
            owner = array if getattr(array, "base", None) is None else array.base
            if id(owner) not in counted:
                counted.add(id(owner))
                total += int(getattr(owner, "nbytes", 0)) + TAPE_ARRAY_BYTES
        return total + TAPE_NODE_BYTES * len(nodes)

    def output_arrays(self) -> dict:
        return {name: array_of(v) for name, v in self.outputs.items()}


# Measured with tracemalloc on a recorded 9,000-step chain of small values: ~560 bytes per step in
# all (its node, the Variables and array headers it keeps, the values dict's entry).
TAPE_NODE_BYTES = 450
TAPE_ARRAY_BYTES = 112  # a NumPy array's header
