"""What the importer knows of each ONNX value, and the graph nodes it writes.

A `Value` is an ONNX tensor as the importer sees it: its shape (ints, or None for a dimension
known only when a request comes, e.g. a dynamic batch), its dtype, the graph node computing it
(once written) and, when it is known at import time (an initializer, a Constant, a folded Shape),
its array. Shape arithmetic on a partly known shape keeps None entries in an object array, so a
dynamic batch flows through Shape -> Gather -> Concat -> Reshape and reaches Reshape as the one
unknown dimension (-1). `Builder` writes the graph format's nodes, with ids that name the ONNX
node they come from.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy

from wire.codec import datatype_of, to_json


@dataclass
class Value:
    shape: tuple | None  # None: even the rank is unknown
    dtype: numpy.dtype | None
    node: str | None = None  # the graph node computing it, once written
    static: numpy.ndarray | None = None  # known at import (dtype object: partly, None where unknown)
    param: bool = False  # an initializer served as a parameter (an input that requires grad)
    held: str | None = None  # a floating initializer: the input node (of this name) the model fills
    fill: object = None  # a constant of a shape known only when running (a zero initial state): its value
    dims: tuple | None = None  # per dim: a Dim where the shape has None and the importer knows which size it is

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def foldable(self) -> bool:
        """Known at import, and not a parameter (whose gradient must flow through the graph)."""
        return self.static is not None and not self.param

    @property
    def known(self) -> bool:
        """Known at import in full (no unknown entry)."""
        return self.static is not None and not is_partial(self.static)


MAX_NAMES = 8  # factors a Dim may have; a longer product is unknown (None)


@dataclass(frozen=True)
class Dim:
    """A size known only when running, as a product: `coef` times the sizes of the graph inputs' dims
    named `names` (sorted, with repeats), so that a Reshape can tell which unknown dim is which."""

    coef: int
    names: tuple

    def __str__(self) -> str:
        return "*".join([str(self.coef), *self.names])

    def times(self, other):
        if isinstance(other, Dim):  # bounded: a Mul of a size by itself 30 times would be 2^30 names long
            names, coef = tuple(sorted(self.names + other.names)), self.coef * other.coef
            return Dim(coef, names) if len(names) <= MAX_NAMES and abs(coef) < 2**62 else None
        if int(other) != other or abs(self.coef * int(other)) >= 2**62:  # a size times 0.5 is no product of sizes
            return None
        return Dim(self.coef * int(other), self.names) if int(other) else 0

    def over(self, other):
        """self / other when it is a whole product (an int, or a Dim), else None."""
        if not isinstance(other, Dim) and int(other) != other:
            return None
        coef, names = (other.coef, Counter(other.names)) if isinstance(other, Dim) else (int(other), Counter())
        if coef == 0 or self.coef % coef or names - Counter(self.names):
            return None
        rest = tuple(sorted((Counter(self.names) - names).elements()))
        return Dim(self.coef // coef, rest) if rest else self.coef // coef


def unknown(v) -> bool:
    """An entry of a partly known array that only running can tell: None, or a Dim."""
    return v is None or isinstance(v, Dim)


def is_partial(array: numpy.ndarray) -> bool:
    return array.dtype == object and any(unknown(v) for v in array.flat)


def static_value(array: numpy.ndarray, dtype=None) -> Value:
    """A Value known at import; an object array with no unknown entry becomes a typed one."""
    if array.dtype == object and not is_partial(array):
        array = numpy.asarray(array.tolist(), dtype=dtype or numpy.int64)
    return Value(tuple(array.shape), dtype if array.dtype == object else array.dtype, static=array)


class Builder:
    """The nodes of the graph being written. `where` is the ONNX node being converted (its name
    or `#index`), which the ids of its nodes carry so that run-time errors point back to it."""

    def __init__(self, reserved=()):
        self.nodes: list = []
        self.outputs = set()  # the graph's output names: reserved until a node takes one
        self.where = "graph"
        self._count = 0
        self._used = set(reserved)
        self._scalars: dict = {}
        self.held: dict = {}  # input node -> the array the model holds for it (its initializer)
        self.max_nodes = 100_000  # what the graph may reach (OnnxLimits.max_graph_nodes)
        self.symbols: dict = {}  # value -> its dims as ONNX names them (a symbol like "batch" where dynamic)
        self.sources: dict = {}  # a graph input's symbol -> (input, axis, rank): where a request gives that size
        self.dims: dict = {}  # a graph input's symbol -> its Dim

    def fresh(self) -> str:
        while True:
            node_id = f"{self.where}~{self._count}"
            self._count += 1
            if node_id not in self._used:
                self._used.add(node_id)
                return node_id

    def op(self, op: str, inputs, attrs=None, node_id=None) -> str:
        node_id = node_id or self.fresh()
        self._used.add(node_id)
        node = {"id": node_id, "op": op, "inputs": list(inputs)}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        return node_id

    def rename(self, old: str, new: str, since: int) -> bool:
        """Give node `old`, written at or after index `since` and read by none, the id `new` (a
        graph output's name): True when done."""
        written = self.nodes[since:]
        target = next((n for n in written if n["id"] == old), None)
        if target is None or new not in self.outputs or any(old in n.get("inputs", ()) for n in written):
            return False
        target["id"] = new
        self.outputs.discard(new)
        return True

    def reserve_outputs(self, names) -> None:
        """The graph's output names: no fresh id takes one; `rename` gives each to its node."""
        self.outputs = set(names) - self._used
        self._used |= self.outputs

    def input(self, name: str, requires_grad: bool, shape=None, dtype=None) -> str:
        self._used.add(name)
        node = {"id": name, "op": "input"}
        if requires_grad:
            node["requires_grad"] = True
        if shape is not None:
            node["shape"] = list(shape)
        if dtype is not None:
            node["dtype"] = datatype_of(dtype)
        self.nodes.append(node)
        return name

    def held_input(self, value: Value) -> str:
        """The input node of a floating initializer, written when first used: the model holds its
        array (no weight travels through the graph's JSON) and fills it into every request."""
        self.input(value.held, value.param, value.static.shape, value.static.dtype)
        self.held[value.held] = value.static
        return value.held

    def constant(self, array: numpy.ndarray, node_id=None) -> str:
        array = numpy.asarray(array)
        node_id = node_id or self.fresh()
        self._used.add(node_id)
        attrs = {"value": to_json(array), "dtype": datatype_of(array.dtype)}
        self.nodes.append({"id": node_id, "op": "constant", "attrs": attrs})
        return node_id

    def scalar(self, value: float) -> str:
        """A scalar constant typed by the other operand (as a Python number is), written once."""
        key = (type(value), value)
        if key not in self._scalars:
            node_id = f"~scalar{len(self._scalars)}"
            while node_id in self._used:
                node_id += "~"
            self._used.add(node_id)
            self.nodes.append({"id": node_id, "op": "constant", "attrs": {"value": value}})
            self._scalars[key] = node_id
        return self._scalars[key]
