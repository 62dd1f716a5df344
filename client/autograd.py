"""`fetch`, `backward` and `grad` as steps a session runs: generators that send one request at most.

Before a backward, `engine.autograd.walk` follows its course on the grad_fn nodes, so the engine's
errors (a second backward through freed nodes, a saved input modified in place) are raised here and
the nodes it frees are known. With `create_graph` nothing is sent: gradients are lazy `grad` nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy

from client.errors import ProtocolError, TracingError
from client.function import Function  # noqa: F401  (torch.autograd.Function's spelling)
from client.graph import GRAD, JVP, GradNode, JvpNode, Value, edge_of
from client.serialize import Builder, NeedsGraph
from client.state import current_phase, current_session, mode
from client.transports import Call
from client.variable import Variable, as_host_array
from engine.api import accumulate_grad, walk

if TYPE_CHECKING:
    from engine.api import Operand


def fetching(session, values):
    """Compute `values` in one /forward, with every value a live Variable holds that the same graph
    computes (so that history whose value is known is never sent again)."""
    asked = {id(v): v for v in values if v.array is None}
    if not asked:
        return
    phase = current_phase()
    if phase is not None:
        raise TracingError(
            f"{phase.name}.{phase.kind} needs the value of a Variable while it is being traced into a graph "
            "(.item(), bool(), .data, printing...); data-dependent Python control flow can't run on the "
            "service: express it with ops (e.g. where, clamp, masks)"
        )
    try:
        builder = Builder("forward")
        names = [builder.add(v) for v in asked.values()]
    except NeedsGraph:  # grad nodes differentiate through values that require grad: keep those
        builder = Builder("backward")
        names = [builder.add(v) for v in asked.values()]
    held = [v for v in builder.computed() if id(v) not in asked and _held(v)]
    names += [builder.ids[id(v)] for v in held]
    graph = builder.graph(list(dict.fromkeys(names)))
    reply = yield from session._exchanging(Call("/forward", {"graph": graph}, builder.tensors))
    for v, name in zip([*asked.values(), *held], names):
        v.array = _take(reply.outputs, name, "outputs")
        v.shape, v.dtype = tuple(v.array.shape), v.array.dtype


def _held(value) -> bool:
    holder = value.holder() if value.holder is not None else None
    return holder is not None and holder._value is value and holder._data is None


def _take(tensors, name, where):
    try:
        return tensors[name]
    except KeyError:
        raise ProtocolError(f"the answer has no {where} tensor named {name!r} (it has {sorted(tensors)})") from None


def backwarding(session, outputs, seeds, retain_graph, targets=None, create_graph=False):
    """Gradients of `outputs` into the leaves' .grad (targets None), or returned for `targets`."""
    retain = bool(create_graph if retain_graph is None else retain_graph)
    processed, getting = walk(outputs, targets)
    # (a Variable that gets a gradient, the Value it is the gradient of; None: the leaf's own)
    holders = [
        (v, None if v._node is None else v._node.value) for v in getting if v._node is None or v._node.value is not None
    ]
    if create_graph:
        output_values = ()
        grads = {var: gradient_node(outputs, seeds, value or var._graph_value()) for var, value in holders}
    else:
        yield from fetching(session, [g._graph_value() for g in seeds if isinstance(g, Variable) and not g._has_value])
        output_values = [o._graph_value() for o in outputs]
        grads = yield from _requesting(session, outputs, output_values, seeds, holders, retain)
    if not retain:
        for node in processed:
            node.free()
        for value in output_values:
            _seal(value)
    if targets is None:
        for holder, g in grads.items():
            accumulate_grad(holder, g, lambda g: g, _may_update, create_graph)
        return None
    return tuple(grads.get(t) for t in targets)


def _requesting(session, outputs, output_values, seeds, holders, retain):
    """The /backward: {holder: its gradient}, nothing sent when no holder is in the graph."""
    builder = Builder("backward")
    names = [builder.add(value) for value in output_values]
    wanted = []  # (node id, the Variable that gets its gradient)
    for var, value in holders:
        if value is None:
            wanted.extend((nid, var) for nid in builder.leaf_ids.get(id(var), ()) if builder.rg.get(nid))
        elif id(value) in builder.ids:
            wanted.append((builder.ids[id(value)], var))
    if not wanted:
        return {}
    graph = builder.graph(list(dict.fromkeys(names)))
    header = {"graph": graph, "wrt": list(dict.fromkeys(nid for nid, _ in wanted))}
    if retain and session.tapes:
        header["parameters"] = {"retain_graph": True}
    call = Call("/backward", header, builder.tensors, _seed_arrays(outputs, names, seeds))
    reply = yield from session._exchanging(call, output_values if session.tapes else ())
    for value, name in zip(output_values, names):
        if name in reply.outputs and value.array is None:
            value.array = reply.outputs[name]
    sums = {}
    for nid, holder in wanted:
        array = _take(reply.grads, nid, "grads")
        sums[holder] = sums[holder] + array if holder in sums else array
    return {holder: Variable._leaf(array) for holder, array in sums.items()}


def _seed_arrays(outputs, names, seeds) -> list:
    """The grad_outputs: [(output name, seed)], summed over outputs that are one node; the service
    seeds an output given once without a gradient with ones itself."""
    arrays: dict = {}
    for out, name, g in zip(outputs, names, seeds):
        if g is None and names.count(name) == 1:
            continue
        if g is None:
            array = numpy.ones(out.shape, out.dtype)
        else:
            array = as_host_array(g._array() if isinstance(g, Variable) else g, out.dtype)
        arrays[name] = arrays[name] + array if name in arrays else array
    return list(arrays.items())


def _may_update(grad) -> bool:
    """Whether `.grad` can take the next gradient in place: a writable leaf array (copied first
    when a recorded op reads it: `.data` is copy-on-write)."""
    if grad._data is None or not grad._data.flags.writeable:
        return False
    grad.data  # noqa: B018 - the copy-on-write happens on access
    return True


def _seal(value):
    """Forget how a computed output was computed when nothing can use it again: it has its value
    and no backward can pass it (every path to a leaf crosses a freed node that saved values).
    Its history can then be collected, and leaves it read need no copy-on-write snapshot."""
    if value.array is None or value.node is None or not value.inputs:
        return
    stack, seen = [value.node], set()
    while stack:
        node = stack.pop()
        try:
            node.check()
        except RuntimeError:  # GraphFreedError, or a saved input modified in place
            continue  # a backward stops here
        for edge in node.edges:
            if isinstance(edge, Variable):
                return  # a leaf that a second backward would reach
            if edge is not None and edge not in seen:
                seen.add(edge)
                stack.append(edge)
    value.inputs = ()


def gradient_node(outputs, seeds, wrt: Value) -> Variable:
    """A lazy Variable for the sum over outputs of seedᵀ·d output / d wrt: one `grad` node per
    output (the seed, when given, its third input), added by recorded ops."""
    if current_phase() is not None:
        raise TracingError("create_graph=True can't be used while tracing a custom Function")
    total = None
    with mode.enabled_as(True):
        for out, seed in zip(outputs, seeds):
            inputs = [out._graph_value(), wrt]
            if seed is not None:
                seed = seed if isinstance(seed, Variable) else Variable._leaf(as_host_array(seed, out.dtype))
                inputs.append(seed._graph_value())
            value = Value(GRAD, wrt.shape, wrt.dtype, inputs=inputs, requires_grad=True)
            value.node = GradNode([edge_of(i) for i in inputs], value)
            total = Variable._lazy(value) if total is None else total + Variable._lazy(value)
    return total  # type: ignore[return-value]  # wrt has at least one output reaching it


def jvp_node(output, pairs) -> Variable:
    """A lazy Variable for the sum of J·v over the (wrt, tangent) `pairs`, J = d output / d wrt:
    one `jvp` node per pair, added by recorded ops (forward-mode AD; nothing is sent)."""
    if current_phase() is not None:
        raise TracingError("forward-mode AD can't be used while tracing a custom Function")
    total = None
    with mode.enabled_as(True):
        for wrt, tangent in pairs:
            if not isinstance(tangent, Variable):
                tangent = Variable._leaf(as_host_array(tangent, wrt.dtype))
            inputs = [output._graph_value(), wrt._graph_value(), tangent._graph_value()]
            value = Value(JVP, output.shape, output.dtype, inputs=inputs, requires_grad=True)
            value.node = JvpNode([edge_of(i) for i in inputs], value)
            total = Variable._lazy(value) if total is None else total + Variable._lazy(value)
    assert total is not None, "jvp_node needs at least one (wrt, tangent) pair"
    return total


def backward(
    outputs: Variable | Sequence[Variable],
    grad_outputs: Operand | Sequence[Operand | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    session: Any = None,
) -> None:
    """Gradients of `outputs` accumulated into the `.grad` of every leaf that requires grad."""
    (session or current_session()).backward(outputs, grad_outputs, retain_graph, create_graph)


def grad(
    outputs: Variable | Sequence[Variable],
    inputs: Variable | Sequence[Variable],
    grad_outputs: Operand | Sequence[Operand | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
    session: Any = None,
) -> tuple[Variable, ...]:
    """Gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
    return (session or current_session()).grad(  # type: ignore[no-any-return]
        outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused
    )
