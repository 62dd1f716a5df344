"""Graph nodes: what `grad_fn` points at, and the one place an op is applied."""

from __future__ import annotations

import numpy

from engine import backend
from engine.grad_mode import is_grad_enabled

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)
INPLACE_MESSAGE = (
    "one of the variables needed for gradient computation has been modified by an inplace operation: "
    "an input of {node} is at version {now}; expected version {then} instead."
)


class Meta:
    """Shape and dtype of a freed input: all that linear ops' vjps need."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self):
        return len(self.shape)


class Node:
    """A recorded operation. Subclasses are named `<Op>Backward`.

    `edges[i]` says where the gradient of input i goes: a Node (a non-leaf input), the leaf
    Variable itself, or None when that input needs no gradient.
    """

    __slots__ = ("edges", "saved", "retained", "__weakref__")

    def input_meta(self, i):
        return self.saved[i]

    def vjp(self, grad, needs):
        raise NotImplementedError

    def free(self):
        raise NotImplementedError

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self):
        return tuple((e if isinstance(e, Node) else None, 0) for e in self.edges)

    def __repr__(self):
        return f"<{type(self).__name__} object at {id(self):#x}>"


def edge_of(v):
    node = v._node
    if node is not None:
        return node
    return v if v._requires_grad else None


class OpNode(Node):
    """A node of a registry op; the op's vjps turn the output gradient into input gradients."""

    __slots__ = ("attrs", "out_data", "versions")
    op = None  # set on each generated subclass

    def __init__(self, inputs, attrs, out_data):
        self.edges = tuple([edge_of(v) for v in inputs])
        self.saved = inputs
        self.attrs = attrs
        self.out_data = out_data
        self.versions = tuple([v._version for v in inputs])
        self.retained = None

    @property
    def freed(self) -> bool:
        return self.versions is None

    def vjp(self, grad, needs):
        from engine.variable import Variable

        op = self.op
        if self.versions is None:
            if op.saves:
                raise RuntimeError(FREED_MESSAGE)
        else:
            for v, then in zip(self.saved, self.versions):
                if v._version != then:
                    raise RuntimeError(INPLACE_MESSAGE.format(node=self.name, now=v._version, then=then))
        ans = Variable._result(self.out_data, self) if op.uses_output else None
        if op.vjp is not None:
            return op.vjp(grad, ans, self.saved, needs, **self.attrs)
        return [
            fn(grad, ans, *self.saved, **self.attrs) if need and fn is not None else None
            for fn, need in zip(op.vjps, needs)
        ]

    def free(self):
        if self.versions is not None:
            self.saved = tuple([Meta(v.shape, v.dtype) for v in self.saved])
            self.out_data = None
            self.versions = None


def _wrap(out, xp):
    if type(out) is numpy.ndarray or isinstance(out, xp.ndarray):
        return out
    return xp.asarray(out)


def apply_op(op, inputs, attrs):
    """Run `op` forward on Variables `inputs`, recording a node when a gradient may be needed."""
    from engine.variable import Variable

    datas = [v.data for v in inputs]
    xp = backend.array_module(datas[0])
    out = _wrap(op.forward(xp, *datas, **attrs), xp)
    if op.differentiable and is_grad_enabled():
        for v in inputs:
            if v._requires_grad:
                node = op.node_class(inputs, attrs, out if op.uses_output else None)
                return Variable._result(out, node)
    return Variable._result(out, None)
