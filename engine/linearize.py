"""Jacobian-vector products without per-op jvp rules: the transpose trick, shared by forward-mode AD.

With `u` a dummy cotangent that requires grad, g(u) = uᵀ·J (a vjp recorded with create_graph) is
linear in u, so the gradient of <g(u), v> for u is J·v. The engine's vjps are written with
differentiable ops, so this holds for every registry op and for any function of them
(`engine.forward_ad` runs it op by op on dual Variables; `engine.func.jvp` on a whole function).
The result keeps its graph (it is differentiable for the primals and the tangents, so
forward-over-reverse works) when grad mode is on and one of them requires grad.
"""

from __future__ import annotations

from engine.autograd import grad
from engine.backend import array_module
from engine.grad_mode import enable_grad, is_grad_enabled
from engine.variable import Variable


def differentiable(p):
    """A Variable of `p`'s value whose gradient is this use's alone: a view of `p` when grad mode
    is on and `p` requires grad (so the result stays differentiable for `p`), else a leaf alias
    that requires grad. Never `p` itself: a gradient for `p` would also count its paths through
    other inputs computed from it (`sin(x) * x`)."""
    if p.requires_grad and is_grad_enabled():
        return p.view_as(p)
    alias = p.detach()
    alias.requires_grad_(True)
    return alias


def zeros_like(v):
    """Zeros of `v`'s shape and dtype, in no graph."""
    return Variable._result(array_module(v._data).zeros_like(v._data), None)


def transpose_jvp(outputs, inputs, tangents, keep_graph):
    """J·v of each output (a list of Variables computed from `inputs` with grad recording) along
    `tangents` (one per input, None for none); zeros for an output with no tangent."""
    # one pair per Variable: x * x passes x twice, and grad() gives each the whole gradient
    pairs = list({id(x): (x, t) for x, t in zip(inputs, tangents) if t is not None and x.requires_grad}.values())
    live = [i for i, o in enumerate(outputs) if o.requires_grad and o.dtype.kind == "f"]
    result = [zeros_like(o) if o.dtype.kind == "f" else None for o in outputs]
    if not pairs or not live:
        return result
    with enable_grad():
        dummies = [zeros_like(outputs[i]) for i in live]
        for u in dummies:
            u.requires_grad_(True)
        firsts = grad(
            [outputs[i] for i in live],
            [x for x, _ in pairs],
            dummies,
            retain_graph=True,
            create_graph=True,
            allow_unused=True,
        )
        products = [(g * t.type_as(g)).sum() for g, (_, t) in zip(firsts, pairs) if g is not None and g.requires_grad]
        if not products:
            return result
        total = products[0]
        for p in products[1:]:
            total = total + p
        found = grad(total, dummies, retain_graph=True, create_graph=keep_graph, allow_unused=True)
    for i, g in zip(live, found):
        if g is not None:
            result[i] = g if keep_graph else g.detach()
    return result


def keeps_graph(primals, tangents) -> bool:
    """Whether a jvp's result must stay differentiable: grad mode is on and a primal or tangent requires grad."""
    return is_grad_enabled() and any(
        isinstance(v, Variable) and v.requires_grad for v in (*primals, *[t for t in tangents if t is not None])
    )
