"""Running a plan's steps on the engine: an `Execution` holds one run's values and, when it
recorded, the graph that `wire.differentiate` walks back. Runs are cooperatively cancellable."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import cached_property

from engine import backend
from engine.function import Function
from engine.grad_mode import no_grad
from engine.registry import OPS, coerce
from engine.variable import Variable
from wire import grad_node
from wire.errors import GraphError

_cancel = threading.local()


@contextmanager
def cancel_scope(event: threading.Event):
    """Run graphs in this thread cooperatively cancellable: once `event` is set, the next step
    raises GraphError (kind "cancelled"). The service sets it when a request's compute timeout passes."""
    previous = getattr(_cancel, "event", None)
    _cancel.event = event
    try:
        yield
    finally:
        _cancel.event = previous


def run_steps(steps, values, inputs=None, args=(), forward=None, grad_output=None):
    cancel = getattr(_cancel, "event", None)
    shared_backwards = None
    for step in steps:
        if cancel is not None and cancel.is_set():
            raise GraphError(f"node {step.id!r}: the computation was cancelled (compute timeout)", node=step.id, kind="cancelled")
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
            values[step.id] = step.function.apply(*[as_variable(values[i]) for i in step.inputs])
        elif op == "grad":
            if shared_backwards is None:
                shared_backwards = {}
            values[step.id] = grad_node.value(step, values, shared_backwards)
        else:
            try:
                values[step.id] = OPS[op].call(coerce([values[i] for i in step.inputs]), step.attrs)
            except GraphError:
                raise
            except MemoryError:
                raise GraphError(f"node {step.id!r} ({op}): out of memory", node=step.id, kind="out_of_memory") from None
            except Exception as err:  # noqa: BLE001 - any op failure is the graph's fault, reported with its node
                if _is_out_of_memory(err):
                    raise GraphError(f"node {step.id!r} ({op}): out of device memory", node=step.id, kind="out_of_memory") from None
                shapes = ", ".join(f"{i} {list(getattr(values[i], 'shape', ()))}" for i in step.inputs)
                raise GraphError(f"node {step.id!r} ({op}) failed: {err} (inputs: {shapes})", node=step.id) from None
    return values


def _is_out_of_memory(err) -> bool:
    return type(err).__name__ in ("OutOfMemoryError", "CUDARuntimeError") and "memory" in str(err).lower()


def as_variable(value):
    return value if isinstance(value, Variable) else coerce([value])[0]


def subgraph_function(name, forward_steps, forward_output, backward_steps, backward_outputs):
    """A Function class whose forward and backward run the subgraphs' steps (a traced custom Function)."""

    def forward_fn(ctx, *args):
        values = run_steps(forward_steps, {}, args=args)
        ctx.save_for_backward(*args)
        ctx.values = values
        return values[forward_output]

    def backward_fn(ctx, grad_output):
        values = run_steps(backward_steps, {}, args=ctx.saved_tensors, forward=ctx.values, grad_output=grad_output)
        return tuple(None if out is None else values[out] for out in backward_outputs)

    return type(name, (Function,), {"forward": staticmethod(forward_fn), "backward": staticmethod(backward_fn)})


class Execution:
    """One run of a plan: its values, and (when recorded) the graph to differentiate."""

    def __init__(self, plan: Plan, tensors: dict, record: bool, wrt=()):
        self.plan = plan
        record = record or plan.has_grad_nodes
        needs = plan.requires_grad | plan.grad_inputs | set(wrt)
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
            values = run_steps(plan.steps, {}, inputs=self.inputs)
        else:
            with no_grad():
                values = run_steps(plan.steps, {}, inputs=self.inputs)
        self.values = values
        self.outputs = {name: as_variable(values[name]) for name in plan.outputs}
        self.freed = False

    @cached_property
    def nbytes(self) -> int:
        """Bytes held by the run's values (what retaining it as a tape costs)."""
        return sum(v._data.nbytes for v in self.values.values() if isinstance(v, Variable))

    def output_arrays(self) -> dict:
        return {name: v._data for name, v in self.outputs.items()}
