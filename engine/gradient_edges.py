"""torch.autograd.graph's `GradientEdge` and `get_gradient_edge`, and `as_inputs`: the edges given as `inputs=` of
`grad`/`backward` turned into the Variables a walk captures (for both sides: `engine.autograd`'s argument checks)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

from engine.node import AccumulateGrad, Node
from engine.variable import Variable

NO_EDGE = "It is not possible to get the gradient edge for a Tensor that does not require gradients"


class GradientEdge(NamedTuple):
    """Where a tensor's gradient is computed: its grad_fn (an `AccumulateGrad` for a leaf) and its output_nr.
    `ownership_token` (PyTorch's keeps the graph alive) holds here what a walk captures for the edge: the leaf, or a
    Variable standing for the node's output (the engine's; the client's Variable itself)."""

    node: Any
    output_nr: int
    ownership_token: Any = None


def get_gradient_edge(tensor) -> GradientEdge:
    """The edge where `tensor`'s gradient is computed: `grad(loss, get_gradient_edge(x))` is `grad(loss, x)`, and
    stays so after `tensor` is gone or changed in place (the edge keeps its node)."""
    if not tensor.requires_grad:
        raise RuntimeError(NO_EDGE)
    node = tensor.grad_fn
    if node is None:
        return GradientEdge(AccumulateGrad(tensor), 0, tensor)
    kept = Variable._result(tensor._data, tensor._node) if type(tensor) is Variable else tensor
    return GradientEdge(node, tensor.output_nr, kept)


def as_inputs(inputs):
    """`inputs` (one Variable or edge, or a sequence) with each GradientEdge replaced by what a walk captures for it."""
    if type(inputs) is GradientEdge:
        return [_captured(inputs)]
    if type(inputs) in (list, tuple) and GradientEdge in map(type, inputs):
        return [_captured(e) if type(e) is GradientEdge else e for e in inputs]
    return inputs


def _captured(edge):
    if edge.ownership_token is not None:
        return edge.ownership_token
    if isinstance(edge.node, AccumulateGrad):
        return edge.node.variable
    if not isinstance(edge.node, Node) or edge.output_nr != 0 or getattr(edge.node, "owner", None) is not None:
        raise NotImplementedError("a GradientEdge made by hand: take it from autograd.graph.get_gradient_edge(t)")
    return Variable._result(numpy.empty(0), edge.node)  # (a node's output of a shape the walk does not read)
