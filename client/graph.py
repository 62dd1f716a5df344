"""The client's lazy graph: values, and the grad_fn nodes that mirror the engine's autograd rules.

* A `Value` says how a value is computed: a leaf's array, a constant, a registry op on other
  values, a traced custom Function, a cut (detach), a `grad` node (create_graph). Values are
  immutable (an in-place assignment re-points the Variable at a new Value), so what was
  recorded keeps its meaning; a fetched value caches its array.
* A `Node` is what `grad_fn` returns, with `edges` to the nodes (or leaf Variables) its gradient
  flows to; it tells locally which nodes a backward frees and whether one can be backpropagated again.

`client.serialize` writes values as a request's graph.
"""

from __future__ import annotations

import weakref
from collections import namedtuple

import numpy

from engine.api import FUNCTION_NAME, GraphFreedError, check_output, check_saved
from engine.api import Node as EngineNode

LEAF, CONST, OP, FUNCTION, CUT = "input", "constant", "op", "function", "cut"
ARG, GRAD_OUTPUT = "arg", "grad_output"  # inside a custom Function's trace
GRAD = "grad"  # inputs (output, wrt[, grad_output]), recorded by create_graph=True
JVP = "jvp"  # inputs (output, wrt, tangent): forward-mode AD (client.forward_ad, client.func.jvp)


# One phase (forward or backward) of tracing a custom Function: values made during it belong to it.
Phase = namedtuple("Phase", "name kind")


class Value:
    """How one value is computed (see the module docstring). `holder`: a weak reference to the
    lazy Variable that stands for it (a fetch also brings back the values Variables still hold)."""

    __slots__ = (
        "kind",
        "op",
        "inputs",
        "attrs",
        "shape",
        "dtype",
        "array",
        "node",
        "requires_grad",
        "leaf",
        "phase",
        "holder",
        "__weakref__",
    )

    def __init__(
        self, kind, shape, dtype, op=None, inputs=(), attrs=None, array=None, requires_grad=False, leaf=None, phase=None
    ):
        self.kind, self.op, self.inputs = kind, op, tuple(inputs)
        self.attrs = attrs if attrs is not None else {}
        self.shape, self.dtype, self.array = tuple(shape), numpy.dtype(dtype), array
        self.node, self.requires_grad, self.leaf, self.phase, self.holder = None, requires_grad, leaf, phase, None

    def __repr__(self):
        what = self.op.name if self.op is not None else self.kind
        return f"<Value {what} {list(self.shape)} {self.dtype}{' cached' if self.array is not None else ''}>"


class Node(EngineNode):
    """A recorded operation: the engine's Node (`name`, `edges`, `next_functions`, `retained`)
    with a weak reference to the value it computes. `saves` is True, False, or a slice of the
    inputs whose values its backward reads; `saved[i]` is input i's Variable (None for a
    constant), `versions[i]` its version when recorded (None once freed, as on the engine's
    nodes). `check()` raises as the engine's vjp would."""

    __slots__ = ("_value", "out_ref", "versions")
    saves = True
    saved_name = None  # how a version error names the node (None: by its grad_fn name)

    def __init__(self, edges, value, saved=()):
        self.edges = tuple(edges)
        self._value = weakref.ref(value)
        self.saved = saved
        self.versions = tuple([None if v is None else v._version for v in saved])
        self.retained = None
        self.out_ref = None  # uses_output ops: a weakref to the output Variable, whose version is checked too

    @property
    def value(self):
        return self._value()

    def check(self):
        if self.saves:
            check_saved(self, self.saves, self.saved, self.versions, self.saved_name)
        if self.versions is not None:
            check_output(self, self.out_ref)
        elif self.out_ref is not None:  # freed, and its backward reads its output (tan's: no saved input)
            raise GraphFreedError()

    def free(self):
        """What a backward without retain_graph does: the saved inputs can't be read again, nor are kept alive."""
        self.saved = (None,) * len(self.saved)
        self.versions = None


class FunctionNode(Node):
    """The node of one custom `Function.apply` call. `saved`: the input Variables that forward
    saved, whose versions are checked when backward reads them (as the engine's ctx does)."""

    __slots__ = ("saves", "trace", "owner", "output_nr")  # owner: output 0's node, for the other outputs' grad_fn
    saved_name = FUNCTION_NAME  # type: ignore[assignment]  # Node's is None: nodes named by their class

    def __init__(self, edges, value, trace, saved):
        super().__init__(edges, value, saved)
        self.trace = trace
        self.saves = trace.saves
        self.owner, self.output_nr = None, 0

    def produces(self, i) -> bool:
        return self.trace.produces[i]


# The node of a `grad` value: its gradient flows to the output, wrt and grad_output it was taken of.
GradNode = type("GradBackward", (Node,), {"__slots__": ()})
# The node of a `jvp` value: its gradient flows to the output, wrt and tangent it was taken of.
JvpNode = type("JvpBackward", (Node,), {"__slots__": ()})


def edge_of(value):
    """Where a gradient for `value` goes (the engine's `edge_of`)."""
    if value.node is not None:
        return value.node
    return value.leaf if value.kind == LEAF and value.requires_grad else None
