"""`torch.func` on the client: `jvp`, `vjp`, `grad`, `grad_and_value`, `jacrev`, `jacfwd`, `hessian`, `vmap`,
`engine.func`'s transforms bound to the client's Variables and recorded lazily: a jvp is `jvp` nodes (graph
format 1.1), gradients are `grad` nodes, so a transform's result, composed ones too (`jvp(grad(f), ...)`, a
forward-over-reverse Hessian-vector product), is computed by one request when it is read.

Inputs of a transform that do not require grad are made leaves that do (their values are needed:
a lazy one not computed yet is fetched first); results are detached unless an argument, or a parameter the function closes over, requires grad.
"""

from __future__ import annotations

import sys

import numpy

from client.autograd import jvp_node
from client.ops import stacked
from client.variable import Variable
from engine.api import Transforms, vmap_with


def _zeros_like(v):
    return Variable._leaf(numpy.zeros(v.shape, v.dtype))


def linearized(outputs, inputs, tangents, keep):
    """J·v of each output along `tangents` (one per input, None for none), as lazy jvp nodes."""
    pairs = [(x, t) for x, t in zip(inputs, tangents) if t is not None]
    result = []
    for out in outputs:
        if out.dtype.kind != "f" or not pairs:
            result.append(_zeros_like(out))
            continue
        t = jvp_node(out, pairs)
        result.append(t if keep else t.detach())
    return result


_CLIENT = Transforms(sys.modules["client"], linearized, _zeros_like, lazy=True)
jvp, vjp, grad_and_value, grad = _CLIENT.jvp, _CLIENT.vjp, _CLIENT.grad_and_value, _CLIENT.grad
jacrev, jacfwd, hessian, linearize = _CLIENT.jacrev, _CLIENT.jacfwd, _CLIENT.hessian, _CLIENT.linearize
vmap = vmap_with(stacked)
