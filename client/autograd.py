"""Fetching values, `backward` and `grad`, as plans that a session runs (one request each).

A plan builds its request from the local graph and applies the answer: values cached on their
Values, gradients accumulated into `.grad` (backward) or returned (grad). Before a backward,
the engine walks the backward's course on the grad_fn nodes (`engine.autograd.walk`): the
client knows which Variables get a gradient and which nodes the backward frees, and raises the
engine's errors (a second backward through freed nodes, a saved input modified in place). With `create_graph`
nothing is sent: gradients are lazy Variables standing for `grad` nodes (format 1.1).

Stateless by default: every backward sends its graph and inputs. Sessions made with `tapes=True`
keep the tape of a `retain_graph=True` backward on the service and send only its id next time,
falling back to the stateless request when the tape is gone (404/409).
"""

from __future__ import annotations

import hashlib
import weakref

import numpy
import orjson

from client.errors import ProtocolError, TracingError
from client.function import Function  # noqa: F401  (torch.autograd.Function's spelling)
from client.graph import GRAD, LEAF, GradNode, Value, edge_of
from client.serialize import Builder, NeedsGraph
from client.state import current_phase, current_session, mode
from client.transports import Call
from client.variable import Variable, as_host_array
from engine.autograd import accumulate_grad, walk


class FetchPlan:
    """One /forward computing the given values, and every value a live Variable holds that the
    same graph computes (so that history whose value is known is never sent again)."""

    def __init__(self, values):
        self.todo = list({id(v): v for v in values if v.array is None}.values())
        phase = current_phase()
        if self.todo and phase is not None:
            raise TracingError(
                f"{phase.name}.{phase.kind} needs the value of a Variable while it is being traced into a graph "
                "(.item(), bool(), .data, printing...); data-dependent Python control flow can't run on the "
                "service: express it with ops (e.g. where, clamp, masks)")

    def prefetch(self):
        return None

    def call(self, session):
        if not self.todo:
            return None
        try:
            builder = Builder("forward")
            self.names = [builder.add(v) for v in self.todo]
        except NeedsGraph:  # grad nodes differentiate through values that require grad: keep those
            builder = Builder("backward")
            self.names = [builder.add(v) for v in self.todo]
        asked = {id(v) for v in self.todo}
        held = [v for v in builder.computed() if id(v) not in asked and _held(v)]
        self.names += [builder.ids[id(v)] for v in held]
        self.todo += held
        return Call("/forward", {"graph": builder.graph(list(dict.fromkeys(self.names)))}, builder.tensors)

    def finish(self, reply, session):
        for v, name in zip(self.todo, getattr(self, "names", ())):
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


def _may_update(grad) -> bool:
    """Whether `.grad` can take the next gradient in place: a writable leaf array (copied first
    when a recorded op reads it: `.data` is copy-on-write)."""
    if grad._data is None or not grad._data.flags.writeable:
        return False
    grad.data  # noqa: B018 - the copy-on-write happens on access
    return True


class BackwardPlan:
    """One /backward: gradients of `outputs` into leaves' .grad (targets None) or for `targets`;
    with `create_graph`, grad nodes instead of a request."""

    def __init__(self, outputs, seeds, retain_graph, targets=None, create_graph=False):
        self.outputs, self.seeds, self.targets = outputs, seeds, targets
        self.retain = bool(create_graph if retain_graph is None else retain_graph)
        self.create_graph = create_graph
        self.processed, self.getting = walk(outputs, targets)
        self.wanted = []

    def prefetch(self):
        lazy = [g._graph_value() for g in self.seeds if isinstance(g, Variable) and not g._has_value]
        return FetchPlan(lazy) if lazy and not self.create_graph else None

    def _holders(self):
        """[(Variable that gets a gradient, the Value it is the gradient of; None: the leaf's own)]."""
        return [(v, None if v._node is None else v._node.value) for v in self.getting
                if v._node is None or v._node.value is not None]

    def call(self, session):
        if self.create_graph:
            return None
        builder = Builder("backward")
        self.names = [builder.add(o._graph_value()) for o in self.outputs]
        self.output_values = [o._graph_value() for o in self.outputs]
        for var, value in self._holders():
            if value is None:
                self.wanted.extend((nid, var) for nid in builder.leaf_ids.get(id(var), ()) if builder.rg.get(nid))
            elif id(value) in builder.ids:
                self.wanted.append((builder.ids[id(value)], var))
        if not self.wanted:
            return None
        seeds = {}
        for out, name, g in zip(self.outputs, self.names, self.seeds):
            if g is None and self.names.count(name) == 1:
                continue
            array = numpy.ones(out.shape, out.dtype) if g is None else as_host_array(g._array() if isinstance(g, Variable) else g, out.dtype)
            seeds[name] = seeds[name] + array if name in seeds else array
        wrt = list(dict.fromkeys(nid for nid, _ in self.wanted))
        graph = builder.graph(list(dict.fromkeys(self.names)))
        header = {"graph": graph, "wrt": wrt}
        if self.retain and getattr(session, "tapes", False):
            header["parameters"] = {"retain_graph": True}
        full = Call("/backward", header, builder.tensors, list(seeds.items()))
        return self._tape_call(session, full, graph) if getattr(session, "tapes", False) else full

    def _tape_call(self, session, full, graph):
        """The call through the tape a previous backward left for the same outputs and graph, if any."""
        self.tape_key = tuple(id(v) for v in self.output_values)
        self.fingerprint = hashlib.blake2b(orjson.dumps(graph), digest_size=16).digest()
        entry = session._tapes.get(self.tape_key)
        if entry is None or entry[1] != self.fingerprint or any(r() is not v for r, v in zip(entry[2], self.output_values)):
            return full
        header = {"tape": entry[0], "wrt": full.header["wrt"], **{k: v for k, v in full.header.items() if k == "parameters"}}
        return Call("/backward", header, [], full.grad_outputs, fallback=full, idempotent=False)

    def finish(self, reply, session):
        sums = {}
        if self.create_graph:
            sums = {id(var): (var, gradient_node(self.outputs, self.seeds, value or var._graph_value()))
                    for var, value in self._holders()}
        elif reply is not None:
            for value, name in zip(self.output_values, self.names):
                if name in reply.outputs and value.array is None:
                    value.array = reply.outputs[name]
            if getattr(session, "tapes", False):
                self._keep_tape(reply, session)
            for nid, holder in self.wanted:
                array = _take(reply.grads, nid, "grads")
                sums[id(holder)] = (holder, sums[id(holder)][1] + array if id(holder) in sums else array)
            sums = {key: (holder, Variable._leaf(array)) for key, (holder, array) in sums.items()}
        if not self.retain:
            for node in self.processed:
                node.free()
            for value in getattr(self, "output_values", ()):
                _seal(value)
        if self.targets is None:
            for holder, g in sums.values():
                accumulate_grad(holder, g, lambda g: g, _may_update, self.create_graph)
            return None
        return tuple(sums[id(t)][1] if id(t) in sums else None for t in self.targets)

    def _keep_tape(self, reply, session):
        key = getattr(self, "tape_key", None)
        if key is not None and reply.tape is not None:
            session._tapes[key] = (reply.tape, self.fingerprint, [weakref.ref(v) for v in self.output_values])
            while len(session._tapes) > 128:
                session._tapes.pop(next(iter(session._tapes)))
        elif key is not None:
            session._tapes.pop(key, None)


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
            if isinstance(seed, Variable):
                inputs.append(seed._graph_value())
            elif seed is not None:
                array = as_host_array(seed, out.dtype)
                inputs.append(Value(LEAF, array.shape, array.dtype, array=array))
            value = Value(GRAD, wrt.shape, wrt.dtype, inputs=inputs, requires_grad=True)
            value.node = GradNode([edge_of(i) for i in inputs], value)
            total = Variable._lazy(value) if total is None else total + Variable._lazy(value)
    return total


def backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False, session=None):
    """Gradients of `outputs` accumulated into the `.grad` of every leaf that requires grad."""
    (session or current_session()).backward(outputs, grad_outputs, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False, session=None):
    """Gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
    return (session or current_session()).grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused)
