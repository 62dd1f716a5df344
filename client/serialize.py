"""Graph format v1 from the client's lazy graph (`client.graph`): `Builder` writes the values
reachable from some outputs as a request's nodes and input tensors, `SubgraphBuilder` as a custom
Function's subgraph. Both extend `wire.writer.GraphWriter`, which numbers nodes in order: the same
program sends the same graph text every time (the service caches planned graphs by their text).
A program recorded again (a training loop's step) is not written again: `builder_for` keys it by
`program_key` and gives a `Replay` of what its Builder wrote, with this step's values.
"""

from __future__ import annotations

from collections import OrderedDict

import orjson

from client.errors import TracingError
from client.graph import ARG, CONST, CUT, FUNCTION, GRAD, GRAD_OUTPUT, JVP, LEAF, OP, Value
from wire.codec import to_json
from wire.writer import GraphWriter

PROGRAMS = 64  # programs a session keeps what their Builder wrote for (`builder_for`)
_PLAIN = (int, bool, str, type(None))  # attribute values keyed as they are (with their type)


class NeedsGraph(Exception):
    """A forward-mode build met a grad node: the request must keep the autograd graph (build it
    in "backward" mode, where values that require grad are recomputed, not sent as inputs)."""


class Builder(GraphWriter):
    """The nodes of a request: mode "forward" (a /forward) or "backward" (a /backward: inputs carry
    requires_grad, and values that must not pass gradients are wrapped in a stop-gradient node).

    `ids`: node id by id(value); `rg`: whether a node requires grad, by node id; `leaf_ids`: the
    input node ids of each leaf Variable, by its id."""

    def __init__(self, mode="forward", keyed=None):
        super().__init__()
        self.backward = mode == "backward"
        self._keep = []
        self.ids, self.rg, self.leaf_ids = {}, {}, {}
        self.keyed, self.written = keyed, None  # (program key, its values, the cache): kept in `graph`

    def add(self, root: Value) -> str:
        """The node id of `root`, writing whatever it needs first (iteratively: graphs can be deep).
        Values form a DAG (a value's inputs exist before it): each is expanded once, written before it is met again."""
        ids = self.ids
        stack = [(root, False)]
        while stack:
            v, expanded = stack.pop()
            if expanded:
                self._emit(v)
            elif id(v) not in ids and not self._terminal(v):
                stack.append((v, True))
                for inp in reversed(v.inputs):
                    if id(inp) not in ids:
                        stack.append((inp, False))
        return ids[id(root)]

    def graph(self, outputs) -> dict:
        graph = super().graph(outputs)
        if self.keyed is not None:
            key, values, cache = self.keyed
            self.written = cache[key] = Written(self, values, graph)
            while len(cache) > PROGRAMS:
                cache.popitem(last=False)
        return graph

    def computed(self) -> list:
        """The values this graph computes (op, function, grad and jvp nodes; not inputs or constants)."""
        return [v for v in self._keep if v.kind in (OP, FUNCTION, GRAD, JVP) and v.array is None]

    def _name(self, v, node_id, rg=False):
        self.ids[id(v)] = node_id
        self._keep.append(v)
        self.rg[node_id] = rg

    def _scalar(self, v):
        value = to_json(v.attrs["value"])  # a non-finite float is spelled, so it needs its dtype
        self._name(v, self.scalar(value, v.dtype if isinstance(value, str) else v.attrs.get("dtype")))

    def _terminal(self, v) -> bool:
        """Write `v` when it needs none of its inputs; False when they must be written first."""
        kind = v.kind
        if kind == LEAF:
            rg = self.backward and v.requires_grad
            node_id = self.input(v.array, rg)
            if v.leaf is not None:
                self.leaf_ids.setdefault(id(v.leaf), []).append(node_id)
            self._name(v, node_id, rg)
        elif kind == CONST:
            self._scalar(v)
        elif v.phase is not None:  # (arg and grad_output values have one too)
            raise TracingError("a value computed while tracing a custom Function can't be used outside it")
        elif v.array is not None and not (self.backward and v.requires_grad and v.inputs):
            self._name(v, self.input(v.array))  # (no inputs: a sealed output, which no gradient can pass)
        else:
            return False
        return True

    def _emit(self, v):
        """Write `v`, whose inputs are written (`_terminal` wrote every kind but these)."""
        inputs = [self.ids[id(i)] for i in v.inputs]
        rg = self.backward and any(self.rg[i] for i in inputs)
        kind = v.kind
        if kind == OP:
            # the engine records a node only for a differentiable op with a floating result
            rg = rg and v.op.differentiable and v.dtype.kind == "f"
            kept = rg and v.node is not None and v.node.value is not v  # an assignment that kept its input's grad_fn
            node_id = (self.assignment if kept else self.node)(v.op.name, inputs, to_json(v.attrs) if v.attrs else None)
        elif kind == FUNCTION:
            node_id = self.node("function", inputs, v.attrs)
        elif kind == CUT:
            node_id = inputs[0]
        elif kind in (GRAD, JVP) and self.backward:
            node_id = self.node(kind, inputs)
        else:  # a grad or jvp node in a forward request
            raise NeedsGraph()
        if rg and not v.requires_grad:
            node_id = self.stop_gradient(node_id)
        self._name(v, node_id, rg)


class SubgraphBuilder(Builder):
    """The subgraph of a custom Function traced in `phase`: its forward (`forward` None) or its
    backward, which reads the forward's values through `forward` (the forward's builder), except those in
    `recompute` (the ids of the Function's other outputs), computed again from the args with what they need,
    so that a double backward differentiates them as PyTorch does a Function's outputs."""

    def __init__(self, phase, forward=None, recompute=()):
        super().__init__()
        self.phase = phase
        self.forward = forward
        self.recompute = set(recompute)

    def _terminal(self, v) -> bool:
        phase = self.phase
        if v.phase is phase or self.forward is not None and v.phase is self.forward.phase:
            if v.kind == ARG:
                self._name(v, self.node("arg", attrs={"index": v.attrs["index"]}))
            elif v.kind == GRAD_OUTPUT:
                self._name(v, self.node("grad_output"))
            elif v.phase is phase:
                return False
            elif id(v) in self.recompute:
                self.recompute.update(id(i) for i in v.inputs)
                return False
            else:
                self._name(v, self.node("forward_value", attrs={"node": self.forward.add(v)}))
        elif v.phase is not None:
            raise TracingError(
                f"{phase.name}: uses a value from another Function's trace; pass it to apply() as an input"
            )
        elif v.kind == CONST:
            self._scalar(v)
        elif v.kind == LEAF and v.requires_grad:
            raise TracingError(
                f"{phase.name}.{phase.kind} uses a Variable that requires grad but is not one of its inputs: "
                f"pass it to {phase.name}.apply() so that it gets a gradient"
            )
        elif v.array is not None:
            self._name(v, self.array(v.array))
        else:
            raise TracingError(
                f"{phase.name}.{phase.kind} uses a Variable computed outside it that is not one of its inputs: "
                f"pass it to {phase.name}.apply()"
            )
        return True


class Written:
    """What a Builder wrote for a program (`program_key`): its graph, each of the key's values' node id (by
    position), which nodes require grad, the inputs' and leaves' positions; `layout`: how the embedded executor
    last admitted it (`wire.handler.run_arrays`)."""

    __slots__ = ("graph", "inputs", "layout", "leaves", "node_ids", "rg")

    def __init__(self, builder: Builder, values: list, graph: dict):
        self.graph, self.rg, self.layout = graph, builder.rg, None
        self.node_ids = [builder.ids[id(v)] for v in values]
        self.leaves = [p for p, v in enumerate(values) if v.kind == LEAF and v.leaf is not None]
        places = dict(zip(self.node_ids, range(len(values))))
        self.inputs = [(name, places[name]) for name, _ in builder.tensors]


class Replay:
    """A `Builder` that has written its program before (`Written`): the same nodes, this step's values."""

    def __init__(self, written: Written, values: list):
        self.written, node_ids = written, written.node_ids
        self.ids, self.rg = dict(zip(map(id, values), node_ids)), written.rg
        self.leaf_ids: dict = {}
        for p in written.leaves:
            self.leaf_ids.setdefault(id(values[p].leaf), []).append(node_ids[p])
        self.tensors = [(name, values[p].array) for name, p in written.inputs]

    def add(self, root: Value) -> str:
        return self.ids[id(root)]

    def graph(self, outputs) -> dict:
        return self.written.graph


def builder_for(cache: OrderedDict, roots, mode: str = "forward"):
    """A Builder for a request computing `roots`, or the `Replay` of the one that wrote the same program
    before (`cache`: program key -> Written)."""
    keyed = program_key(roots, mode == "backward")
    if keyed is None:
        return Builder(mode)
    written = cache.get(keyed[0])
    return Builder(mode, (*keyed, cache)) if written is None else Replay(written, keyed[1])


def program_key(roots, backward: bool):
    """(key, values): the values a Builder writes for `roots`, in its order, and a key that is equal for two
    programs exactly when it writes the same graph for both, with the same inputs; None where one is of a kind
    it does not key (a custom Function's, a detached or a grad value, or one being traced)."""
    places: dict = {}
    values: list = []
    key: list = []
    for root in roots:
        stack = [root]
        while stack:  # depth first: an op is met again, over a None, once its inputs are placed
            v = stack.pop()
            if id(v) in places:
                continue
            if v.kind == OP and v.array is None and v.phase is None:  # (the common case first)
                if not stack or stack[-1] is not None:
                    stack += (None, v, *reversed(v.inputs))
                    continue
                stack.pop()
                node, attrs = v.node, v.attrs
                kept = node is not None and node._value() is not v
                placed = tuple(map(places.__getitem__, map(id, v.inputs)))
                key.append((v.op.name, attrs_key(attrs) if attrs else (), placed, v.dtype, v.requires_grad, kept))
            elif v.kind == LEAF:
                key.append((LEAF, backward and v.requires_grad))
            elif v.kind == CONST:
                value = v.attrs["value"]
                if type(value) not in (int, float, bool):
                    return None
                key.append(
                    (CONST, type(value), value.hex() if type(value) is float else value, v.attrs["dtype"], v.dtype)
                )
            elif v.phase is not None:
                return None
            elif v.array is not None and not (backward and v.requires_grad and v.inputs):
                key.append(None)  # a value at hand, sent as an input
            else:
                return None
            places[id(v)] = len(values)
            values.append(v)
        key.append(places[id(root)])
    return tuple(key), values


def attrs_key(attrs: dict):
    """A key of an op's attributes, equal exactly when their JSON is (a float by its hex: -0.0 is not 0.0), and
    their types are (1 is not 1.0 nor True)."""
    key = []
    for name, value in attrs.items():
        kind = type(value)
        if kind is float:
            value = value.hex()
        elif kind not in _PLAIN:
            return orjson.dumps(to_json(attrs))
        key.append((name, kind, value))
    return tuple(key)
