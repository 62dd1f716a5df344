"""Writing the graph format that `wire.graph` parses, for a request's sender (the client).

`GraphWriter` appends nodes with ids given in order (`x0`, `c1`, `n2`...), so that the same
program writes the same graph text every time (the service caches planned graphs by their
text), writes each distinct scalar constant once, and collects a request's input tensors.
"""

from __future__ import annotations

import numpy

from wire.codec import datatype_of, to_json

PREFIXES = {"input": "x", "constant": "c", "arg": "a", "grad_output": "g", "forward_value": "f"}  # others: "n"

# How a value that must not pass gradients on (detach(), a no_grad result) is said in the format:
# a function node computing the identity whose backward returns no gradient.
STOP_GRADIENT = {
    "name": "Detach",
    "forward": {"nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}], "outputs": ["a"]},
    "backward": {"nodes": [{"id": "g", "op": "grad_output"}], "outputs": [None]},
}


class GraphWriter:
    """The nodes of one graph (or function subgraph) being written, and its input tensors."""

    def __init__(self):
        self.nodes, self.tensors = [], []  # tensors: [(input node id, array)]
        self.has_grad = False  # a `grad` or `jvp` node: the graph needs format 1.1
        self._count, self._scalars = 0, {}

    def node(self, op, inputs=None, attrs=None, requires_grad=False, prefix=None) -> str:
        """Append a node; its id."""
        node_id = f"{prefix or PREFIXES.get(op, 'n')}{self._count}"
        self._count += 1
        node = {"id": node_id, "op": op}
        if inputs is not None:
            node["inputs"] = inputs
        if attrs:
            node["attrs"] = attrs
        if requires_grad:
            node["requires_grad"] = True
        self.has_grad = self.has_grad or op in ("grad", "jvp")
        self.nodes.append(node)
        return node_id

    def input(self, array, requires_grad=False) -> str:
        node_id = self.node("input", requires_grad=requires_grad)
        self.tensors.append((node_id, array))
        return node_id

    def scalar(self, value, dtype=None) -> str:
        """A constant node for a JSON scalar, written once per distinct value and dtype (None: typed
        by the other operands, as a Python scalar is)."""
        key = (type(value), value, None if dtype is None else numpy.dtype(dtype).str)
        if key not in self._scalars:
            attrs = {"value": value} if dtype is None else {"value": value, "dtype": datatype_of(dtype)}
            self._scalars[key] = self.node("constant", attrs=attrs)
        return self._scalars[key]

    def array(self, array) -> str:
        """A constant node holding an array's values."""
        return self.node("constant", attrs={"value": to_json(array), "dtype": datatype_of(array.dtype)})

    def stop_gradient(self, source: str) -> str:
        """A node with `source`'s value through which no gradient flows."""
        return self.node("function", [source], STOP_GRADIENT, prefix="s")

    def assignment(self, op, inputs, attrs=None) -> str:
        """A node computing `op` (an assignment such as `setitem`) whose gradient passes to its first
        input unchanged: what `x[k] = v` under no_grad() does to a value that keeps its grad_fn."""
        args = [{"id": f"a{i}", "op": "arg", "attrs": {"index": i}} for i in range(len(inputs))]
        result = {"id": "r", "op": op, "inputs": [a["id"] for a in args], **({"attrs": attrs} if attrs else {})}
        backward = {"nodes": [{"id": "g", "op": "grad_output"}], "outputs": ["g"] + [None] * (len(inputs) - 1)}
        function = {
            "name": "AssignWithoutGrad",
            "forward": {"nodes": [*args, result], "outputs": ["r"]},
            "backward": backward,
        }
        return self.node("function", inputs, function)

    def graph(self, outputs) -> dict:
        return {
            "version": "1.1" if self.has_grad else 1,  # the grad node came with format 1.1
            "nodes": self.nodes,
            "outputs": list(outputs),
        }

    def subgraph(self, outputs) -> dict:
        return {"nodes": self.nodes, "outputs": list(outputs)}
