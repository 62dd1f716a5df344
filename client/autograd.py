"""`fetch`, `backward` and `grad` as steps a session runs: generators that send one request at most.

Before a backward, `engine.autograd.walk` follows its course on the grad_fn nodes, so the engine's
errors (a second backward through freed nodes, a saved input modified in place) are raised here and
the nodes it frees are known. With `create_graph` nothing is sent: gradients are lazy `grad` nodes.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy

from client.errors import NotFoundError, PayloadTooLargeError, ProtocolError, TracingError, _LinAlgError
from client.function import Function  # noqa: F401  (torch.autograd.Function's spelling)
from client.graph import GRAD, JVP, GradNode, JvpNode, Value, edge_of
from client.residents import Pending, cut_source, lost, placeholder
from client.serialize import Builder, NeedsGraph, builder_for
from client.state import current_phase, current_session, mode
from client.transports import Call
from client.variable import Variable, as_host_array
from engine.api import accumulate_grad, anomaly_mode, run_hooks, unused_rule, walk, watch_of

if TYPE_CHECKING:
    from engine.api import Operand

WORDED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # an inv Value `linalg.solve` recorded -> "solve"


def fetching(session, values):
    """Compute `values` in one /forward, with every value a live Variable holds that the same graph
    computes (so that history whose value is known is never sent again)."""
    if session._in_flight and any(v.array is None for v in values):  # (its answer may hold them)
        yield ("settle",)
    yield from flush(session)
    for v in values:  # a detached value whose source is known (fetched together with it earlier) is at hand
        source = cut_source(v)
        if v.array is None and source.array is not None:
            v.array = source.array
    asked = {id(v): v for v in values if v.array is None}
    if not asked:
        return
    check_not_consumed(session, asked.values())
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
    residents = getattr(session, "_residents", None)
    if residents is not None:  # a parameter stepped on the server is read: the others come along
        held += [v for v in residents.on_server_only(asked) if id(v) not in asked]
    names += [builder.add(v) if id(v) not in builder.ids else builder.ids[id(v)] for v in held]
    graph = builder.graph(list(dict.fromkeys(names)))
    reply = yield from _sending(session, Call("/forward", {"graph": graph}, builder.tensors), builder)
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


def backwarding(session, outputs, seeds, retain_graph, targets=None, create_graph=False, into_grad=False):
    """Gradients of `outputs` into the leaves' .grad (targets None), or returned for `targets` (into their
    `.grad` with `into_grad`: `backward(inputs=...)`)."""
    retain = bool(create_graph if retain_graph is None else retain_graph)
    yield from flush(session)
    processed, getting = walk(outputs, targets)
    observed = _observed(processed, getting)  # non-leaves whose hooks see their gradients (not kept in .grad)
    # (a Variable that gets a gradient, the Value it is the gradient of; None: the leaf's own)
    holders = [
        (v, None if node is None else node.value)
        for v in [*getting, *observed.values()]
        if (node := v._node) is None or node.value is not None
    ]
    if session._in_flight and any(v._grad is not None for v, _ in holders):
        yield ("settle",)  # a gradient accumulated onto may be one the step in flight uses (`check_not_consumed`)
    if create_graph:
        output_values = ()
        grads = {var: gradient_node(outputs, seeds, value or var._graph_value()) for var, value in holders}
    else:
        unknown = [g._graph_value() for g in seeds if isinstance(g, Variable) and not g._has_value]
        if unknown or getattr(session, "_residents", None) is not None:  # (else nothing to fetch, nothing to flush)
            yield from fetching(session, unknown)
        output_values = [o._graph_value() for o in outputs]
        grads = yield from _requesting(session, outputs, output_values, seeds, holders, retain)
    grads = _through_hooks(processed, grads, observed)
    if not retain:
        for node in processed:
            node.free()
        for value in output_values:
            _seal(value)
    if targets is None or into_grad:
        for holder, g in grads.items():
            accumulate_grad(holder, g, lambda g: g, _may_update, create_graph)
            watch = watch_of(holder, make=False) if holder._node is None else None
            for hook in list(watch.post.values()) if watch is not None else ():
                hook(holder)
        return None
    return tuple(grads.get(t) for t in targets)


def _hooked(node):
    """(its Watch, the non-leaf Variable it computed) of a node whose Variable carries hooks, else (None, None)."""
    watch = node.retained
    var = None if watch is None or not watch.hooks else watch()
    return (watch, var) if var is not None else (None, None)


# {node: what its gradient is kept under} of the nodes in `processed` whose Variables carry hooks and don't get a
# gradient already: the Variable, or a stand-in for the version a Variable changed in place since had (PyTorch's hook
# registered before an in-place op, as a Grad-CAM's before an inplace ReLU, reads that version's gradient).
def _observed(processed, getting) -> dict:
    got, found = {id(v) for v in getting}, {}
    for node in processed:
        var = None if node.retained is None else _hooked(node)[1]  # (no call for a node without hooks)
        if var is not None and (var._node is not node or id(var) not in got):
            found[node] = var if var._node is node else Variable._leaf(None, value=node.value)
    return found


def _through_hooks(processed, grads: dict, observed) -> dict:
    """A backward's gradients through the hooks (`register_hook`) of the Variables they belong to, as the engine's
    walk runs them: the non-leaves' in the walk's order, then the leaves'. The server computed the walk in one
    request, so a non-leaf's hook may read its gradient but not replace it (what it sends on was already sent):
    one that returns another value is refused before any `.grad` changes. The observed non-leaves are dropped."""
    if not observed and not any([watch_of(v, make=False) is not None for v in grads]):  # noqa: C419 - faster
        return grads
    for node in processed:
        watch, var = _hooked(node)
        var = observed.get(node, var)
        if var is None or var not in grads:
            continue
        g = grads[var]
        out = run_hooks(watch, g, Variable._leaf)
        if out is not g:
            raise NotImplementedError(
                f"a hook on a client Variable with a grad_fn ({node.name}) returned a new gradient: the server "
                "computed the whole backward in one request, so a non-leaf's hook can read its gradient but not "
                "replace it (a leaf's hook can; or take autograd.grad(outputs, [v]), change the gradient and "
                "continue with backward(v, changed))"
            )
    for var in observed.values():
        grads.pop(var, None)
    for var, g in grads.items():
        watch = watch_of(var, make=False) if var._node is None else None
        if watch is not None and watch.hooks:
            grads[var] = run_hooks(watch, g, Variable._leaf)
    return grads


def _requesting(session, outputs, output_values, seeds, holders, retain):
    """The /backward: {holder: its gradient}, nothing sent when no holder is in the graph."""
    residents = getattr(session, "_residents", None)
    builder = Builder("backward") if residents is not None else builder_for(session._written, output_values, "backward")
    names = [builder.add(value) for value in output_values]
    wanted = []  # (node id, the Variable that gets its gradient)
    for var, value in holders:
        if value is None:
            wanted.extend([(nid, var) for nid in builder.leaf_ids.get(id(var), ()) if builder.rg.get(nid)])
        elif id(value) in builder.ids:
            wanted.append((builder.ids[id(value)], var))
    if not wanted:
        return {}
    graph = builder.graph(list(dict.fromkeys(names)))
    header = {"graph": graph, "wrt": list(dict.fromkeys([nid for nid, _ in wanted]))}
    if retain and session.tapes:
        header["parameters"] = {"retain_graph": True}
    if anomaly_mode.nan_check_on():  # torch's anomaly mode: the server's walk checks each node's gradients
        header.setdefault("parameters", {})["detect_anomaly"] = True
    call = Call("/backward", header, builder.tensors, _seed_arrays(outputs, names, seeds))
    if builder.written is not None:
        call.written = builder.written
    if residents is not None and not retain and not session.tapes and residents.deferrable(wanted):
        grads = {holder: placeholder(holder.shape, _dtype(holder)) for _, holder in wanted}  # (client.residents)
        residents.pending = Pending(call, builder, output_values, names, wanted, grads)
        return {holder: Variable._lazy(value) for holder, value in grads.items()}
    reply = yield from _sending(session, call, builder, output_values if session.tapes else ())
    sums = _answered(reply, output_values, names, wanted)
    return {holder: Variable._leaf(array) for holder, array in sums.items()}


def _answered(reply, output_values, names, wanted, skip=frozenset()) -> dict:
    """{holder: its gradient array} of a backward's reply (its outputs' values cached); holders in `skip`
    (parameters a step updated on the server) get none."""
    for value, name in zip(output_values, names):
        if name in reply.outputs and value.array is None:
            value.array = reply.outputs[name]
    sums: dict = {}
    for nid, holder in wanted:
        if holder in skip:
            continue
        array = _take(reply.grads, nid, "grads")
        sums[holder] = sums[holder] + array if holder in sums else array
    return sums


def _dtype(variable):
    return (variable._data if variable._data is not None else variable._value).dtype


def _sending(session, call, builder, outputs=(), uploaded=None):
    """The reply to `call` built by `builder`, its registered parameters read by handle (client.residents)."""
    residents = getattr(session, "_residents", None)
    try:
        if residents is None:
            return (yield from session._exchanging(call, outputs))
        if uploaded is None:
            uploaded = residents.prepare(session, call, builder)
        if "update" in call.header:
            call.idempotent = False  # sent twice, it would step twice
        try:
            if "graph" in call.header:
                reply = yield from session._exchanging(call, outputs)
            else:  # only moves resident arrays
                reply = yield from session._calling(call)
        except NotFoundError as err:
            if "session" in call.header and err.field in ("resident", "update", "fetch"):
                for entry in (*residents.params.values(), *residents.held.values()):
                    entry.synced = False
                raise lost(err) from None
            raise
        except PayloadTooLargeError as err:  # a held input over the bound: sent inline (a parameter's 413 is raised)
            if err.field != "upload" or not residents.inline(call, uploaded):
                raise
            return (yield from _sending(session, call, builder, outputs, uploaded))
        residents.sent(uploaded)
        return reply
    except _LinAlgError as err:  # at an `inv` that `linalg.solve` recorded (`WORDED`): worded as PyTorch's solve
        ids = builder.ids if builder is not None else {}
        name = next((n for v, n in list(WORDED.items()) if ids.get(id(v)) == err.node), None)
        if name is not None:
            words = rf"torch.linalg.{name}: \1The solver failed because the input matrix is singular."
            err.message = re.sub(r"linalg\.inv: (\(Batch element \d+\): )?.*singular\.", words, err.message)
            err.args = (err.message,)
        raise


def worded(bound: dict) -> dict:
    """`bind_linalg`'s names, `linalg.solve` and `solve_ex` noting the `inv` Values they record (`WORDED`)."""

    def noting(fn, name):
        @functools.wraps(fn)
        def call(A, B, *args, **kwargs):
            result = fn(A, B, *args, **kwargs)
            stop = {id(v._value) for v in (A, B) if isinstance(v, Variable)}
            stack = [getattr(result[0] if isinstance(result, tuple) else result, "_value", None)]
            while stack:  # (the Values it recorded: between its result and its operands')
                v = stack.pop()
                if v is not None and id(v) not in stop:
                    if v.op is not None and v.op.name == "inv":
                        WORDED[v] = name
                    stack.extend(v.inputs)
            return result

        return call

    linalg = bound["linalg"]
    linalg.solve, linalg.solve_ex = noting(linalg.solve, "solve"), noting(linalg.solve_ex, "solve_ex")
    return bound


def flush(session, update=None, riders=(), uploaded=None):
    """Send the session's deferred backward (client.residents), with the optimizer step `update` if
    given and the values of Variables `riders` (computed before the update): its placeholder gradients
    get their values, or are consumed by the update; its reply. `uploaded`: its call is prepared already
    (`Residents.prepare`, which it returned)."""
    residents = getattr(session, "_residents", None)
    pending = None if residents is None else residents.pending
    if pending is None:
        return None
    residents.pending = None
    call, builder = pending.call, pending.builder
    if update is not None:
        call.header["update"] = update
    riding = [(v, builder.add(v._value)) for v in riders if not v._has_value]
    if riding:
        outputs = list(dict.fromkeys([*pending.names, *(name for _, name in riding)]))
        call.header["graph"], call.inputs = builder.graph(outputs), builder.tensors
        seeded = {name for name, _ in call.grad_outputs}  # riders pass no gradient: a zero seed says so
        call.grad_outputs = call.grad_outputs + [
            (name, numpy.zeros(v.shape, v._value.dtype)) for v, name in riding if name not in seeded
        ]
    reply = yield from _sending(session, call, builder, (), uploaded)
    for variable, name in riding:
        variable._value.array = _take(reply.outputs, name, "outputs")
    updated = {h for group in (update or {}).get("groups", ()) for h in group["handles"]}
    skip = {holder for holder in pending.grads if residents.of(holder).handle in updated}
    sums = _answered(reply, pending.output_values, pending.names, pending.wanted, skip)
    for holder, value in pending.grads.items():
        if holder in skip:
            residents.consumed.add(value)
        else:
            value.array = sums[holder]
    return reply


def check_not_consumed(session, values) -> None:
    residents = getattr(session, "_residents", None)
    if residents is not None and any(v in residents.consumed for v in values):
        raise RuntimeError(
            "this gradient of a parameter kept resident on the server was used there by optimizer.step() and "
            "not sent back: read .grad before step(), or make the optimizer with resident=False"
        )


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
        if node.versions is None and node.saves is True:  # freed, saving its inputs: what check() raises (no raise)
            continue
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
    grad_tensors: Operand | Sequence[Operand | None] | None = None,  # (PyTorch's name)
    retain_graph: bool | None = None,
    create_graph: bool = False,
    session: Any = None,
    inputs: Variable | Sequence[Variable] | None = None,
) -> None:
    """Gradients of `outputs` accumulated into the `.grad` of every leaf that requires grad (of `inputs` only)."""
    (session or current_session()).backward(outputs, grad_tensors, retain_graph, create_graph, inputs)


def grad(
    outputs: Variable | Sequence[Variable],
    inputs: Variable | Sequence[Variable],
    grad_outputs: Operand | Sequence[Operand | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    materialize_grads: bool = False,
    is_grads_batched: bool = False,
    session: Any = None,
    *,
    only_inputs: bool = True,
) -> tuple[Variable, ...]:
    """Gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
    unused_rule(allow_unused, materialize_grads, only_inputs)  # PyTorch's checks (and only_inputs' warning)
    return (session or current_session()).grad(  # type: ignore[no-any-return]
        outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused, materialize_grads, is_grads_batched
    )
