"""The client's lazy graph: values, grad_fn nodes, and their serialization to graph format v1.

Two graphs live side by side, as in the engine:

* `Value`s say how a value is computed: a leaf's array, a constant, an op of the registry on
  other values, a traced custom Function, a cut (detach). Values are immutable once made (a
  Variable that is assigned into in place is re-pointed at a new Value), so a value recorded
  earlier keeps meaning what it meant when it was recorded. A fetched value caches its array.
* `Node`s are what `grad_fn` returns: one per value recorded with grad mode on and an input
  that requires grad, with `edges` to the nodes (or leaf Variables) its gradient flows to.
  They carry what the client must know locally to mirror the engine's autograd rules: which
  nodes a backward frees, and whether a freed node can be backpropagated again.

`client.serialize` turns them into graph format v1 for a request.
"""

from __future__ import annotations

import weakref

import numpy

from engine.node import INPLACE_MESSAGE, GraphFreedError
from engine.node import Node as EngineNode

LEAF = "input"
CONST = "constant"
OP = "op"
FUNCTION = "function"
CUT = "cut"
ARG = "arg"
GRAD_OUTPUT = "grad_output"
GRAD = "grad"  # a grad node (format 1.1): inputs (output, wrt[, grad_output]), recorded by create_graph=True


class Phase:
    """One phase (forward or backward) of tracing a custom Function; values made during it belong to it."""

    __slots__ = ("name", "kind", "forward")

    def __init__(self, name, kind, forward=None):
        self.name = name
        self.kind = kind
        self.forward = forward

    def __repr__(self):
        return f"<{self.name}.{self.kind} trace>"


class Value:
    """How one value is computed (see the module docstring)."""

    __slots__ = ("kind", "op", "inputs", "attrs", "shape", "dtype", "array", "node", "requires_grad", "leaf", "phase",
                 "holder", "__weakref__")

    def __init__(self, kind, shape, dtype, op=None, inputs=(), attrs=None, array=None, requires_grad=False, leaf=None,
                 phase=None):
        self.kind = kind
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = attrs if attrs is not None else {}
        self.shape = tuple(shape)
        self.dtype = numpy.dtype(dtype)
        self.array = array
        self.node = None
        self.requires_grad = requires_grad
        self.leaf = leaf
        self.phase = phase
        self.holder = None  # a weakref to the lazy Variable made for it (a fetch brings back held values too)

    def __repr__(self):
        what = self.op.name if self.op is not None else self.kind
        return f"<Value {what} {list(self.shape)} {self.dtype}{' cached' if self.array is not None else ''}>"


# --- grad_fn nodes ---------------------------------------------------------------------------


class Node(EngineNode):
    """A recorded operation (what `grad_fn` returns): the engine's Node (`name`, `edges`,
    `next_functions`, `retained`) with the client's bookkeeping: a weak reference to the value it
    computes and whether a backward freed it. `check()` raises as the engine's vjp would."""

    __slots__ = ("_value", "freed")
    saves = True

    def __init__(self, edges, value):
        self.edges = tuple(edges)
        self._value = weakref.ref(value)
        self.freed = False
        self.retained = None

    @property
    def value(self):
        return self._value()

    def produces(self, i) -> bool:
        """Whether the gradient of input i can be non-None."""
        return True

    def check(self):
        if self.freed and self.saves:
            raise GraphFreedError()


class OpNode(Node):
    """A node of a registry op. `saves` is the op's (True, False, or a slice of the inputs whose
    values its vjps read); `versions[i]` is (input Variable or None, its version when recorded)."""

    __slots__ = ("versions", "out_ref")
    op = None

    def __init__(self, edges, value, versions):
        super().__init__(edges, value)
        self.versions = versions
        self.out_ref = None  # uses_output ops: a weakref to the output Variable, whose version is checked too

    def check(self):
        saves = self.saves
        if self.freed:
            if saves is True or (saves and self.versions[saves]):
                raise GraphFreedError()
            return
        if saves:
            for variable, then in (self.versions if saves is True else self.versions[saves]):
                if variable is not None and variable._version != then:
                    raise RuntimeError(INPLACE_MESSAGE.format(node=self.name, now=variable._version, then=then))
        out = self.out_ref() if self.out_ref is not None else None
        if out is not None and out._version:
            raise RuntimeError(INPLACE_MESSAGE.format(node=self.name + "'s output", now=out._version, then=0))


class FunctionNode(Node):
    """The node of one custom `Function.apply` call. `versions`: (input Variable, version) of the
    inputs that forward saved, checked when backward reads them (as the engine's ctx does)."""

    __slots__ = ("trace", "versions")
    function = None

    def __init__(self, edges, value, trace, versions=()):
        super().__init__(edges, value)
        self.trace = trace
        self.versions = versions

    @property
    def saves(self):
        return self.trace.saves

    def produces(self, i) -> bool:
        return self.trace.produces[i]

    def check(self):
        if not self.saves:
            return
        if self.freed:
            raise GraphFreedError()
        for variable, then in self.versions:
            if variable._version != then:
                raise RuntimeError(INPLACE_MESSAGE.format(node="a custom Function", now=variable._version, then=then))


class GradNode(Node):
    """The node of a `grad` value (create_graph=True): its gradient flows to the output, the
    wrt and the grad_output it was taken of."""

    __slots__ = ()


GradNode.__name__ = GradNode.__qualname__ = "GradBackward"


def edge_of(value):
    """Where a gradient for `value` goes (the engine's `edge_of`)."""
    if value.node is not None:
        return value.node
    if value.kind == LEAF and value.requires_grad:
        return value.leaf
    return None
