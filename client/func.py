"""`torch.func` on the client: `jvp`, `vjp`, `grad`, `grad_and_value`, `jacrev`, `jacfwd`, `hessian`,
as `engine.func` has them, recorded lazily: a jvp is `jvp` nodes (graph format 1.1), gradients are
`grad` nodes, so a transform's result, composed ones too (`jvp(grad(f), ...)`, a forward-over-reverse
Hessian-vector product), is computed by one request when it is read.

Inputs of a transform that do not require grad are made leaves that do (their values are needed:
a lazy one not computed yet is fetched first); results are detached unless an argument requires grad.
"""

from __future__ import annotations

import numpy

from client import autograd
from client.autograd import jvp_node
from client.ops import stacked
from client.state import enable_grad, is_grad_enabled
from client.variable import Variable
from engine.api import as_tuple, flatten_outputs, split_aux, tree_leaves, tree_rebuild, unflatten_outputs, vmap_with


def _any_rg(vs) -> bool:
    return any(isinstance(v, Variable) and v.requires_grad for v in vs)


def _zeros_like(v):
    return Variable._leaf(numpy.zeros(v.shape, v.dtype))


def differentiable(p):
    """A view of `p` when it requires grad (its gradient flows on, and is this use's alone), else a
    leaf copy that requires grad (see `engine.linearize.differentiable`)."""
    if p.requires_grad and is_grad_enabled():
        return p.view_as(p)
    copy = p.detach()
    copy.requires_grad_(True)
    return copy


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


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J·tangents), or with `has_aux` (output, jvp, aux): one request when read."""
    primals, tangents = as_tuple(primals, "jvp"), as_tuple(tangents, "jvp")
    if len(primals) != len(tangents):
        raise RuntimeError(
            f"jvp: Expected primals and tangents to have the same length, got {len(primals)} and {len(tangents)}"
        )
    for i, (p, t) in enumerate(zip(primals, tangents)):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(
                f"jvp: Expected primals and tangents to have the same shape: primal {i} has shape {list(p.shape)} "
                f"and its tangent {list(t.shape)}"
            )
    keep = is_grad_enabled() and (_any_rg(primals) or _any_rg(tangents))
    xs = [differentiable(p) for p in primals]
    with enable_grad():
        out, aux = split_aux(func(*xs), has_aux, "jvp")
    outs, is_tuple = flatten_outputs(out)
    result = linearized(outs, xs, list(tangents), keep)
    outs = [o if keep else o.detach() for o in outs]
    if has_aux:
        return unflatten_outputs(outs, is_tuple), unflatten_outputs(result, is_tuple), aux
    return unflatten_outputs(outs, is_tuple), unflatten_outputs(result, is_tuple)


def _prepared(args, argnums):
    keep = is_grad_enabled() and _any_rg(args)
    xs = list(args)
    for i in argnums:
        x = xs[i]
        xs[i] = x.view_as(x) if keep and x.requires_grad else differentiable(x.detach())
    return xs, keep


def _gradients(outputs, targets, seeds, keep):
    live = [i for i, o in enumerate(outputs) if o.requires_grad]
    found = [None] * len(targets)
    if live:
        found = autograd.grad(
            [outputs[i] for i in live],
            targets,
            None if seeds is None else [seeds[i] for i in live],
            retain_graph=True,
            create_graph=True,  # lazy grad nodes: nothing is sent until a value is read
            allow_unused=True,
        )
    return [_zeros_like(t) if g is None else g if keep else g.detach() for g, t in zip(found, targets)]


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn): vjp_fn(cotangents) is the tuple of vᵀ·J, one per primal."""
    xs, keep = _prepared(primals, range(len(primals)))
    with enable_grad():
        out, aux = split_aux(func(*xs), has_aux, "vjp")
    outs, is_tuple = flatten_outputs(out)

    def vjp_fn(*cotangents):
        seeds = list(cotangents[0]) if is_tuple and len(cotangents) == 1 else list(cotangents)
        if len(seeds) != len(outs):
            raise RuntimeError(f"Expected {len(outs)} cotangents, got {len(seeds)}")
        return tuple(_gradients(outs, xs, seeds, keep or is_grad_enabled() and _any_rg(seeds)))

    shown = unflatten_outputs([o if keep else o.detach() for o in outs], is_tuple)
    return (shown, vjp_fn, aux) if has_aux else (shown, vjp_fn)


def grad_and_value(func, argnums=0, has_aux=False):
    """A function returning (the gradient of func's one-element output for args[argnums], the output)."""

    def wrapper(*args, **kwargs):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        flat = [leaf for i in nums for leaf in tree_leaves(args[i])]  # an argument may be a pytree (a dict...)
        ready, keep = _prepared(flat + [a for j, a in enumerate(args) if j not in nums], range(len(flat)))
        xs, leaves = list(args), iter(ready)
        for i in nums:
            xs[i] = tree_rebuild(args[i], leaves)
        with enable_grad():
            out, aux = split_aux(func(*xs, **kwargs), has_aux, "grad_and_value")
        if not isinstance(out, Variable) or out.numel() != 1:
            raise RuntimeError(
                "grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor. Maybe you wanted to use the "
                "vjp or jacrev APIs instead?"
            )
        found = iter(_gradients([out], ready[: len(flat)], None, keep))
        grads = [tree_rebuild(args[i], found) for i in nums]
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        value = out if keep else out.detach()
        return (g, (value, aux)) if has_aux else (g, value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """A function returning the gradient of func's one-element output for args[argnums] (and aux)."""
    inner = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def jacrev(func, argnums=0):
    """A function returning the Jacobian of func for args[argnums] (shape out.shape + in.shape)."""

    def wrapper(*args):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

        def partial(*chosen):
            xs = list(args)
            for i, c in zip(nums, chosen):
                xs[i] = c
            return func(*xs)

        chosen = tuple(args[i] for i in nums)
        keep = is_grad_enabled() and _any_rg(args)
        return autograd.functional.jacobian(partial, chosen if not isinstance(argnums, int) else chosen[0], keep)

    return wrapper


jacfwd = jacrev  # the same values, computed row by row in reverse mode


def hessian(func, argnums=0):
    """The Hessian of func's one-element output for args[argnums]."""
    return jacrev(jacrev(func, argnums), argnums)


vmap = vmap_with(stacked)
