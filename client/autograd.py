"""Fetching values, `backward` and `grad`, as plans that a session runs (one request each).

A plan builds its request from the local graph, and applies the answer: values cached on
their Values, gradients accumulated into `.grad` (backward) or returned (grad). Before a
backward is sent, the engine's traversal is replayed locally on the grad_fn nodes, so the
client knows (without asking) which leaves get a gradient, which nodes the backward frees, and
raises the engine's errors: a second backward through a freed node (`FREED_MESSAGE`), or a
saved input modified in place since it was recorded.

Gradients go stateless by default: every backward sends its graph and inputs again, which any
replica can answer. Sessions made with `tapes=True` keep the tape a `retain_graph=True`
backward leaves on the service and send only the tape id for the next backward through the
same outputs, falling back to the stateless request when the tape is gone (404/409).
"""

from __future__ import annotations

import hashlib
import weakref

import numpy
import orjson

from client.context import current_session
from client.errors import ProtocolError, TracingError
from client.function import Function  # noqa: F401  (torch.autograd.Function's spelling)
from client.grad_mode import current_phase, mode
from client.graph import GRAD, LEAF, GradNode, Node, Value, edge_of
from client.serialize import Builder, NeedsGraph
from client.variable import Variable, as_host_array
from client.wire import Call
from engine.autograd import (
    accumulate_grad,
    backward_arguments,
    check_unused,
    grad_arguments,
    nodes_reaching,
    reachable,
)

class FetchPlan:
    """One /forward computing the given values (those not cached yet)."""

    def __init__(self, values):
        todo, seen = [], set()
        for v in values:
            if v.array is None and id(v) not in seen:
                seen.add(id(v))
                todo.append(v)
        self.todo = todo
        if todo and current_phase() is not None:
            phase = current_phase()
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
        except NeedsGraph:
            builder = Builder("backward")
            self.names = [builder.add(v) for v in self.todo]
        asked = {id(v) for v in self.todo}
        held = [v for v in builder.computed() if id(v) not in asked and _held(v)]
        self.names += [builder.ids[id(v)] for v in held]
        self.todo += held
        return Call("/forward", {"graph": builder.graph(list(dict.fromkeys(self.names)))}, builder.tensors)

    def finish(self, reply, session):
        for v, name in zip(self.todo, getattr(self, "names", ())):
            array = _take(reply.outputs, name, "outputs")
            v.array = array
            v.shape, v.dtype = tuple(array.shape), array.dtype
        return None


def _held(value) -> bool:
    """Whether a lazy Variable still stands for `value` (so the program may read it later)."""
    holder = value.holder() if value.holder is not None else None
    return holder is not None and holder._value is value and holder._data is None


def _take(tensors, name, where):
    try:
        return tensors[name]
    except KeyError:
        raise ProtocolError(f"the answer has no {where} tensor named {name!r} (it has {sorted(tensors)})") from None


def simulate(outputs, targets=None):
    """Replay the engine's backward traversal on the grad_fn graph.

    Returns (processed nodes, {id: leaf Variable} that receive a gradient, set of nodes
    that receive one). Raises the engine's errors for freed or modified nodes.
    """
    roots = list(dict.fromkeys(o._node for o in outputs if o._node is not None))
    reached_leaves = {}
    capture = None if targets is None else {id(t) for t in targets}
    for o in outputs:
        if o._node is None and (capture is None or id(o) in capture):
            reached_leaves[id(o)] = o
    nodes, _ = reachable(roots)
    needed = None
    if targets is not None:
        target_nodes = {t._node for t in targets if t._node is not None}
        target_leaves = [id(t) for t in targets if t._node is None]
        needed = nodes_reaching(nodes, target_nodes, target_leaves)
    processed = []
    seen = set(roots)
    queue = list(roots)
    while queue:
        node = queue.pop()
        processed.append(node)
        if needed is None:
            needs = [e is not None for e in node.edges]
        else:
            needs = [e is not None and (id(e) in capture or e in needed) for e in node.edges]
        if any(needs):
            node.check()
        for i, edge in enumerate(node.edges):
            if not needs[i] or not node.produces(i):
                continue
            if isinstance(edge, Node):
                if edge not in seen:
                    seen.add(edge)
                    queue.append(edge)
            elif capture is None or id(edge) in capture:
                reached_leaves[id(edge)] = edge
    return processed, reached_leaves, seen


def _may_update(grad) -> bool:
    """Whether `.grad` can take the next gradient in place: a writable leaf array (copied first
    when a recorded op reads it: `.data` is copy-on-write)."""
    if grad._data is None or not grad._data.flags.writeable:
        return False
    grad.data  # noqa: B018 - the copy-on-write happens on access
    return True


class BackwardPlan:
    """One /backward: gradients of `outputs` into leaves' .grad (targets None) or for `targets`.
    With `create_graph` nothing is sent: the gradients are lazy Variables standing for `grad`
    nodes of the recorded graph (format 1.1), which later ops and backwards use as any value."""

    def __init__(self, outputs, seeds, retain_graph, targets=None, create_graph=False):
        self.outputs = outputs
        self.seeds = seeds
        self.retain = bool(retain_graph)
        self.targets = targets
        self.create_graph = create_graph
        self.processed, self.leaves, self.reached = simulate(outputs, targets)
        self.wanted = []

    def prefetch(self):
        lazy = [g._graph_value() for g in self.seeds if isinstance(g, Variable) and not g._has_value]
        return FetchPlan(lazy) if lazy and not self.create_graph else None

    def _holders(self):
        """[(Variable that gets a gradient, the Value it is the gradient of; None: the leaf's own)]."""
        if self.targets is None:
            found = [(var, None) for var in self.leaves.values()]
            for node in self.processed:
                holder = node.retained() if node.retained is not None else None
                if holder is not None and holder._node is node and node.value is not None:
                    found.append((holder, node.value))
            return found
        found = []
        for t in dict.fromkeys(self.targets):
            node = t._node
            if node is None and id(t) in self.leaves:
                found.append((t, None))
            elif node is not None and node in self.reached and node.value is not None:
                found.append((t, node.value))
        return found

    def call(self, session):
        if self.create_graph:
            return None
        builder = Builder("backward")
        names = [builder.add(o._graph_value()) for o in self.outputs]
        self.names = names
        self.output_values = [o._graph_value() for o in self.outputs]
        for var, value in self._holders():
            if value is None:
                self.wanted.extend((nid, var) for nid in builder.leaf_ids.get(id(var), ()) if builder.rg.get(nid))
            elif id(value) in builder.ids:
                self.wanted.append((builder.ids[id(value)], var))
        if not self.wanted:
            return None
        seeds = {}
        for out, name, g in zip(self.outputs, names, self.seeds):
            if g is None and names.count(name) == 1:
                continue
            array = numpy.ones(out.shape, out.dtype) if g is None else as_host_array(g._array() if isinstance(g, Variable) else g, out.dtype)
            seeds[name] = seeds[name] + array if name in seeds else array
        wrt = list(dict.fromkeys(nid for nid, _ in self.wanted))
        graph = builder.graph(list(dict.fromkeys(names)))
        header = {"graph": graph, "wrt": wrt}
        tapes = getattr(session, "tapes", False)
        if tapes and self.retain:
            header["parameters"] = {"retain_graph": True}
        full = Call("/backward", header, builder.tensors, list(seeds.items()))
        if not tapes:
            return full
        self.tape_key = tuple(id(v) for v in self.output_values)
        self.fingerprint = hashlib.blake2b(orjson.dumps(graph), digest_size=16).digest()
        entry = session._tapes.get(self.tape_key)
        if entry is not None and entry[1] == self.fingerprint and all(r() is v for r, v in zip(entry[2], self.output_values)):
            tape_header = {"tape": entry[0], "wrt": wrt}
            if self.retain:
                tape_header["parameters"] = {"retain_graph": True}
            return Call("/backward", tape_header, [], list(seeds.items()), fallback=full, idempotent=False)
        return full

    def finish(self, reply, session):
        sums = {}
        if self.create_graph:
            for var, value in self._holders():
                sums[id(var)] = (var, gradient_node(self.outputs, self.seeds, value or var._graph_value()))
        elif reply is not None:
            for value, name in zip(self.output_values, self.names):
                if name in reply.outputs and value.array is None:
                    value.array = reply.outputs[name]
            if getattr(session, "tapes", False):
                self._keep_tape(reply, session)
            arrays = {}
            for nid, holder in self.wanted:
                array = _take(reply.grads, nid, "grads")
                arrays[id(holder)] = (holder, arrays[id(holder)][1] + array if id(holder) in arrays else array)
            sums = {key: (holder, Variable._leaf(array)) for key, (holder, array) in arrays.items()}
        if not self.retain:
            for node in self.processed:
                node.freed = True
        if self.targets is None:
            for holder, g in sums.values():
                accumulate_grad(holder, g, lambda g: g, _may_update, self.create_graph)
            return None
        return tuple(sums[id(t)][1] if id(t) in sums else None for t in self.targets)

    def _keep_tape(self, reply, session):
        key = getattr(self, "tape_key", None)
        if key is None:
            return
        if reply.tape is not None:
            session._tapes[key] = (reply.tape, self.fingerprint, [weakref.ref(v) for v in self.output_values])
            while len(session._tapes) > 128:
                session._tapes.pop(next(iter(session._tapes)))
        else:
            session._tapes.pop(key, None)


def gradient_node(outputs, seeds, wrt: Value) -> Variable:
    """A lazy Variable for the sum over outputs of seedᵀ·d output / d wrt: one `grad` node per
    output (the seed, when given, as its third input), added by recorded ops."""
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
            g = Variable._lazy(value)
            total = g if total is None else total + g
    return total


def prepare_backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False):
    outputs, seeds = backward_arguments(outputs, grad_outputs, Variable)
    return BackwardPlan(outputs, seeds, create_graph if retain_graph is None else retain_graph, None, create_graph)


def backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False, session=None):
    """Gradients of `outputs` accumulated into the `.grad` of every leaf that requires grad."""
    plan = prepare_backward(outputs, grad_outputs, retain_graph, create_graph)
    (session or current_session()).run(plan)


def prepare_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False):
    outputs, inputs, seeds = grad_arguments(outputs, inputs, grad_outputs, Variable)
    return BackwardPlan(outputs, seeds, create_graph if retain_graph is None else retain_graph, inputs, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False, session=None):
    """Gradients of `outputs` with respect to `inputs`, as a tuple; `.grad` is not touched."""
    plan = prepare_grad(outputs, inputs, grad_outputs, retain_graph, create_graph)
    return check_unused((session or current_session()).run(plan), allow_unused)
