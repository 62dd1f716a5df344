"""Graph format v1 from the client's lazy graph (`client.graph`): `Builder` turns the values
reachable from some outputs into a node list plus the input tensors, for a `/forward`, a
`/backward`, or a custom Function's forward and backward subgraphs (the format is `wire.graph`'s;
its nodes are written by `wire.writer.GraphWriter`, which Builder extends with the walk).
"""

from __future__ import annotations

from client.errors import TracingError
from client.graph import ARG, CONST, CUT, FUNCTION, GRAD, GRAD_OUTPUT, LEAF, OP, Value
from wire.codec import to_json
from wire.writer import GraphWriter


class NeedsGraph(Exception):
    """A forward-mode build met a grad node: the request must keep the autograd graph (build it
    in "backward" mode, where values that require grad are recomputed, not sent as inputs)."""


class Builder(GraphWriter):
    """Serializes values into graph format v1 nodes.

    mode: "forward" (a /forward request), "backward" (a /backward request: inputs carry
    requires_grad, and values that must not pass gradients are wrapped in a stop-gradient
    function node), "fsub"/"bsub" (a custom Function's forward/backward subgraph, for `phase`).
    Node ids are assigned in a deterministic order, so the same program sends the same graph
    every time (the service caches planned graphs by their text).
    """

    def __init__(self, mode, phase=None, forward_ids=None):
        super().__init__()
        self.mode, self.phase, self.forward_ids = mode, phase, forward_ids or {}
        self._keep = []
        self.ids, self.rg, self.leaf_ids = {}, {}, {}  # by id(value); by node id; by id(leaf)

    # --- public ------------------------------------------------------------------------------
    def add(self, root: Value) -> str:
        """The node id of `root`, serializing whatever it needs first (iteratively)."""
        ids = self.ids
        if id(root) in ids:
            return ids[id(root)]
        stack = [(root, False)]
        pending = set()
        while stack:
            v, expanded = stack.pop()
            key = id(v)
            if key in ids:
                continue
            if expanded:
                self._emit(v)
                continue
            if key in pending or self._terminal(v):
                continue
            pending.add(key)
            stack.append((v, True))
            for inp in reversed(v.inputs):
                if id(inp) not in ids:
                    stack.append((inp, False))
        return ids[id(root)]

    def computed(self) -> list:
        """The values this graph computes (op, function and grad nodes; not inputs or constants)."""
        return [v for v in self._keep if v.kind in (OP, FUNCTION, GRAD) and v.array is None]

    # --- nodes -------------------------------------------------------------------------------
    def _name(self, v, node_id, rg=False):
        self.ids[id(v)] = node_id
        self._keep.append(v)
        self.rg[node_id] = rg

    def _input(self, v, array, rg):
        node_id = self.input(array, rg)
        if v.kind == LEAF and v.leaf is not None:
            self.leaf_ids.setdefault(id(v.leaf), []).append(node_id)
        self._name(v, node_id, rg)

    def _constant(self, v, array=None):
        if array is not None:
            return self._name(v, self.array(array))
        value = to_json(v.attrs["value"])  # a non-finite float is spelled, so it needs its dtype
        return self._name(v, self.scalar(value, v.dtype if isinstance(value, str) else v.attrs.get("dtype")))

    def _special(self, v, op, attrs=None):
        self._name(v, self.node(op, attrs=attrs))

    def _terminal(self, v) -> bool:
        """Serialize `v` when it needs none of its inputs; False when it must be expanded."""
        kind = v.kind
        mode = self.mode
        if mode in ("forward", "backward"):
            if kind == LEAF:
                self._input(v, v.array, mode == "backward" and v.requires_grad)
            elif kind == CONST:
                self._constant(v)
            elif v.phase is not None or kind in (ARG, GRAD_OUTPUT):
                raise TracingError("a value computed while tracing a custom Function can't be used outside it")
            elif v.array is not None and (mode == "forward" or not v.requires_grad or not v.inputs):
                self._input(v, v.array, False)  # (no inputs: a sealed output, which no gradient can pass)
            else:
                return False
            return True
        phase = self.phase
        name = phase.name
        if v.phase is phase:
            if kind == ARG:
                self._special(v, "arg", {"index": v.attrs["index"]})
            elif kind == GRAD_OUTPUT:
                self._special(v, "grad_output")
            else:
                return False
            return True
        if mode == "bsub" and v.phase is phase.forward:
            if kind == ARG:
                self._special(v, "arg", {"index": v.attrs["index"]})
            else:
                self._special(v, "forward_value", {"node": self.forward_ids[id(v)]})
            return True
        if v.phase is not None:
            raise TracingError(f"{name}: uses a value from another Function's trace; pass it to apply() as an input")
        if kind == CONST:
            self._constant(v)
        elif kind == LEAF:
            if v.requires_grad:
                raise TracingError(
                    f"{name}.{phase.kind} uses a Variable that requires grad but is not one of its inputs: "
                    f"pass it to {name}.apply() so that it gets a gradient")
            self._constant(v, v.array)
        elif v.array is not None:
            self._constant(v, v.array)
        else:
            raise TracingError(
                f"{name}.{phase.kind} uses a Variable computed outside it that is not one of its inputs: "
                f"pass it to {name}.apply()")
        return True

    def _emit(self, v):
        ids = self.ids
        backward = self.mode == "backward"
        inputs = [ids[id(i)] for i in v.inputs]
        if v.kind == CUT:
            source = inputs[0]
            if backward and self.rg.get(source):
                self._name(v, self.stop_gradient(source), True)
            else:
                self._name(v, source, self.rg.get(source, False))
            return
        if v.kind == OP:
            node_id = self.node(v.op.name, inputs, to_json(v.attrs) if v.attrs else None)
            # the engine records a node only for a differentiable op with a floating result
            rg = backward and v.op.differentiable and v.dtype.kind == "f" and any(self.rg[i] for i in inputs)
        elif v.kind == FUNCTION:
            node_id = self.node("function", inputs, v.attrs.attrs)
            rg = backward and any(self.rg[i] for i in inputs)
        elif v.kind == GRAD:
            if not backward:
                raise NeedsGraph()
            node_id = self.node("grad", inputs)
            rg = any(self.rg[i] for i in inputs)
        else:  # pragma: no cover - every other kind is terminal
            raise AssertionError(f"can't serialize a {v.kind} value here")
        if rg and not v.requires_grad:
            node_id = self.stop_gradient(node_id)
        self._name(v, node_id, rg)


def forward_references(roots, phase) -> list:
    """Forward-phase values (other than args) that a backward subgraph rooted at `roots` uses."""
    found, seen = [], set()
    stack = [r for r in roots if r is not None]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.phase is phase.forward:
            if v.kind != ARG:
                found.append(v)
            continue
        if v.phase is phase:
            stack.extend(v.inputs)
    return found
