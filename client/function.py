"""Custom differentiable functions, PyTorch style, traced into graph-format `function` nodes.

`MyOp.apply(*args)` runs `MyOp.forward` and `MyOp.backward` once on symbolic Variables (shapes
and dtypes only) and records one `function` node carrying both as subgraphs (`wire/graph.py`):
the backward subgraph reads the inputs with `arg`, the output's gradient with `grad_output` and
forward intermediates with `forward_value`. No user Python runs on the service. Tracing can't
look at values (`.item()`, `bool()`, `.data` raise `TracingError`); traces are cached per
(class, input shapes/dtypes/requires_grad, other arguments), so a training loop traces once.
Plain data used from outside is baked in as constants; a leaf that requires grad, or an
uncomputed value from outside, must be passed to `apply()`. A forward that returns a tuple becomes
one `function` node per output (see `Traced`); a `mark_dirty` input is re-pointed at its output.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy

from client.errors import TracingError
from client.graph import ARG, FUNCTION, GRAD_OUTPUT, FunctionNode, Phase, Value, edge_of
from client.serialize import SubgraphBuilder
from client.state import current_phase, is_grad_enabled, tracing
from client.variable import Variable, as_host_array
from engine.api import (
    INFERENCE_MADE,
    LEAF_DIRTY,
    FunctionBase,
    FunctionCtx,
    function_node_class,
    once_differentiable,
    refuse_saved_inference,
)

MAX_TRACES_PER_FUNCTION = 64


@dataclass(eq=False)
class Trace:
    """One output's `function` node, as the graph has it."""

    attrs: dict  # the function node's attrs: {"name", "forward", "backward"}
    shape: tuple
    dtype: numpy.dtype
    produces: tuple  # per Variable input: whether backward returns a gradient for it
    saves: bool  # whether backward uses saved values (so a freed node can't run again)
    saved_args: tuple  # indices (among Variable inputs) of the inputs forward saved


@dataclass(eq=False)
class Traced:
    """A traced Function: per forward output a `Trace`, or the Python value returned as it is. An
    output is a `function` node of its own, whose backward subgraph is `backward`'s with that output's
    gradient and the other outputs' zeros (None without `materialize_grads`): the gradients the nodes
    send sum to `backward`'s of all the outputs' gradients, as `backward` is linear in them."""

    outputs: tuple
    many: bool  # forward returned a tuple
    differentiable: tuple  # per output: whether it gets a grad_fn (a float one, not marked non-differentiable)
    dirty: tuple  # per output: (the Variable input it is, its version increment) for a `mark_dirty` one, or None


_TRACES: weakref.WeakKeyDictionary[type, dict] = weakref.WeakKeyDictionary()


def _traced_value(out) -> Value:
    return (out if isinstance(out, Variable) else Variable._leaf(as_host_array(out)))._graph_value()


def trace(cls, args, kwargs, needs) -> Traced:
    name = cls.__name__
    forward_phase = Phase(name, "forward")
    positions = [i for i, a in enumerate(args) if isinstance(a, Variable)]  # the forward's `arg` 0, 1...
    symbolic = list(args)
    for index, i in enumerate(positions):
        value = Value(ARG, args[i].shape, args[i].dtype, attrs={"index": index}, phase=forward_phase)
        symbolic[i] = Variable._lazy(value)
    ctx = FunctionCtx()
    ctx.needs_input_grad = needs
    try:
        with tracing(forward_phase):
            out = cls.run_forward(ctx, symbolic, kwargs)
        many = type(out) is tuple
        outs = out if many else (out,)
        values = [_traced_value(o) if isinstance(o, Variable) or not many else None for o in outs]
        differentiable = tuple(
            v is not None and v.dtype.kind == "f" and not any(o is p for p in ctx.non_differentiable)
            for o, v in zip(outs, values)
        )
        dirty = tuple(
            next(((k, o._version + 1) for k, i in enumerate(positions) if symbolic[i] is o), None)
            if any(o is d for d in ctx.dirty)
            else None
            for o in outs
        )
        traces = tuple(
            o if v is None else _output_trace(cls, ctx, args, positions, values, k, differentiable[k])
            for k, (o, v) in enumerate(zip(outs, values))
        )
    except TracingError as err:
        raise TracingError(f"while tracing {name}: {err}") from None
    return Traced(traces, many, differentiable, dirty)


def _output_trace(cls, ctx, args, positions, values, k, differentiable) -> Trace:
    """Output k's function node: its forward subgraph computes it, its backward is `backward`'s with its
    gradient (none for an output that is not differentiable)."""
    name = cls.__name__
    backward_phase = Phase(name, "backward")
    out_value = values[k]
    grad_output = Variable._lazy(Value(GRAD_OUTPUT, out_value.shape, out_value.dtype, phase=backward_phase))
    ctx.saved_read = False
    grad_values: list = [None] * len(positions)
    with tracing(backward_phase):
        if differentiable:
            if cls.backward is FunctionBase.backward and cls.jvp is not FunctionBase.jvp:
                raise NotImplementedError(
                    f"{name} defines jvp but no backward: a custom Function's jvp is not used on the client (its "
                    "tangents, as its gradients, come from its traced backward): define backward too"
                )
            given = [
                grad_output if j == k else None if v is None or not ctx.materialize_grads else _zeros(v)
                for j, v in enumerate(values)
            ]
            grads = cls.backward_result(cls.backward(ctx, *given), len(args))
            grad_values = [None if grads[i] is None else _traced_value(grads[i]) for i in positions]
    fwd = SubgraphBuilder(values[k].phase)
    out_id = fwd.add(out_value)
    bwd = SubgraphBuilder(
        backward_phase, forward=fwd, recompute=(id(v) for j, v in enumerate(values) if j != k and v is not None)
    )
    outputs = [None if g is None else bwd.add(g) for g in grad_values]
    if not bwd.nodes:  # a subgraph needs at least one node
        bwd.add(grad_output._graph_value())
    attrs = {"name": name, "forward": fwd.subgraph([out_id]), "backward": bwd.subgraph(outputs)}
    saves = ctx.saved_read or any(node["op"] in ("arg", "forward_value") for node in bwd.nodes)
    saved_args = tuple(
        dict.fromkeys(
            v._value.attrs["index"]
            for v in ctx.to_save
            if isinstance(v, Variable)
            and v._data is None
            and v._value.kind == ARG
            and v._value.phase is values[k].phase
        )
    )
    return Trace(attrs, out_value.shape, out_value.dtype, tuple(g is not None for g in grad_values), saves, saved_args)


def _zeros(value):
    """The zeros `backward` gets for an output without a gradient: a scalar, expanded (no array sent)."""
    return Variable._leaf(numpy.zeros((), value.dtype)).expand(*value.shape)


def _cached_trace(cls, args, kwargs, needs) -> Traced:
    key = tuple(
        ("v", a.shape, a.dtype.str, need) if isinstance(a, Variable) else ("py", type(a), a)
        for a, need in zip(args, needs)
    ) + tuple(sorted(kwargs.items()))
    cache = _TRACES.setdefault(cls, {})
    try:
        found = cache.get(key)
    except TypeError:  # an unhashable argument: traced every time
        return trace(cls, args, kwargs, needs)
    if found is None:
        if len(cache) >= MAX_TRACES_PER_FUNCTION:
            cache.pop(next(iter(cache)))
        found = cache[key] = trace(cls, args, kwargs, needs)
    return found


class Function(FunctionBase):
    """Base class of custom differentiable operations (see the module docstring)."""

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = cls.arguments(args, kwargs)
        needs = tuple(isinstance(a, Variable) and a.requires_grad for a in args)
        traced = _cached_trace(cls, args, kwargs, needs)
        variables = [a for a in args if isinstance(a, Variable)]
        inputs = [a._graph_value() for a in variables]
        record = is_grad_enabled() and any(needs)
        if record and any(
            d is not None and variables[d[0]].is_leaf and variables[d[0]].requires_grad for d in traced.dirty
        ):
            raise RuntimeError(LEAF_DIRTY)
        results, owner = [], None
        for k, result in enumerate(traced.outputs):
            if isinstance(result, Trace):
                value = Value(
                    FUNCTION, result.shape, result.dtype, inputs=inputs, attrs=result.attrs, phase=current_phase()
                )
                if record and traced.differentiable[k]:
                    saved = tuple(variables[i] for i in result.saved_args)
                    if INFERENCE_MADE:
                        refuse_saved_inference(saved, True)
                    node = value.node = function_node_class(cls, FunctionNode, function=cls)(
                        [edge_of(v) for v in inputs], value, result, saved
                    )
                    node.owner, node.output_nr, owner = owner, k, owner or node
                    value.requires_grad = True
                result = Variable._lazy(value)
                if traced.dirty[k] is not None:  # the input itself now stands for the output, as PyTorch's mark_dirty
                    index, bump = traced.dirty[k]
                    result = _dirtied(variables[index], result, bump, record)
            results.append(result)
        return tuple(results) if traced.many else results[0]


def _dirtied(variable, out, bump, record):
    """`mark_dirty`'s output: the input, now standing for `out`, its version `bump`ed; a leaf that requires grad,
    not recorded (under no_grad), gets the new values and returns `out` detached, as PyTorch's."""
    version = variable._version
    if record or not variable.requires_grad:
        variable._assign_recorded(out)
        out = variable
    else:
        variable._assign_values(Ellipsis, out, None)
    variable._version = version + bump
    return out


__all__ = ["Function", "FunctionCtx", "Trace", "once_differentiable"]
