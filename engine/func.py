"""`torch.func` for functions of Variables: `jvp`, `vjp`, `grad`, `grad_and_value`, `jacrev`, `jacfwd`, `hessian`,
`vmap`, `linearize`, written once for both Variables (`Transforms`, bound to `engine`'s names here and to `client`'s in
`client.func`).

They compose (`jvp(grad(f), ...)` is a forward-over-reverse Hessian-vector product): each keeps
the graph of its result when an argument requires grad, so an outer transform differentiates it.
`jvp` is the transpose trick of `engine.linearize` on the whole function.
"""

from __future__ import annotations

import sys

from engine.linearize import transpose_jvp, zeros_like
from engine.registry import F


def _tuple(x, what):
    if not isinstance(x, (tuple, list)):
        raise RuntimeError(f"{what}: Expected primals and tangents to be tuples, got {type(x).__name__}")
    return tuple(x)


def _split(out, has_aux, what):
    if not has_aux:
        return out, None
    if not isinstance(out, tuple) or len(out) != 2:
        raise RuntimeError(f"{what}(f, ...): output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


def _unwrapped(tree, keep, variable):
    """An aux output as PyTorch returns it, at the caller's level: detached unless the result keeps its graph."""
    return (
        tree if keep else tree_rebuild(tree, (v.detach() if isinstance(v, variable) else v for v in tree_leaves(tree)))
    )


def tree_leaves(tree) -> list:
    """The Variables of a pytree (nested dicts, lists and tuples), in order."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in tree_leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [leaf for v in tree for leaf in tree_leaves(v)]
    return [tree]


def tree_rebuild(tree, leaves):
    """`tree`'s structure holding the next items of the iterator `leaves`."""
    if isinstance(tree, dict):
        return {k: tree_rebuild(v, leaves) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_rebuild(v, leaves) for v in tree)
    return next(leaves)


class Transforms:
    """torch.func's transforms over one package's Variables: `ns` gives its `Variable`, `grad`,
    `enable_grad`, `is_grad_enabled` and `autograd.functional`; `linearized(outputs, inputs, tangents,
    keep)` is its J·v, `zeros_like(v)` zeros in no graph. On a lazy package (the client) gradients are
    recorded as lazy `grad` nodes whatever is kept, so a transform's result is one request when read."""

    def __init__(self, ns, linearized, zeros_like, lazy=False):
        self.ns, self.linearized, self.zeros_like, self.lazy = ns, linearized, zeros_like, lazy

    def _any_rg(self, vs) -> bool:
        return any(isinstance(v, self.ns.Variable) and v.requires_grad for v in vs)

    def _closes_over(self, outputs, xs) -> bool:
        """Whether `outputs`' graph reaches a leaf that requires grad other than `xs` (a parameter of a module the
        function uses): PyTorch's results then keep their graph to it (a gradient penalty trains the module)."""
        if not self.ns.is_grad_enabled():
            return False
        mine, seen = {id(x) for x in xs}, set()
        stack = [o.grad_fn for o in outputs if isinstance(o, self.ns.Variable) and o.grad_fn is not None]
        while stack:
            node = stack.pop()
            if id(node) not in seen:
                seen.add(id(node))
                for after, _ in node.next_functions:
                    leaf = getattr(after, "variable", None)
                    if leaf is not None and id(leaf) not in mine:
                        return True
                    if after is not None and leaf is None:
                        stack.append(after)
        return False

    def _differentiable(self, p, keep):
        """A view of `p` when it requires grad and the result keeps its graph (its gradient flows on and
        is this use's alone), else a leaf alias of it that requires grad."""
        return p.view_as(p) if keep and p.requires_grad else p.detach().requires_grad_(True)

    def jvp(self, func, primals, tangents, *, strict=False, has_aux=False):
        """(func(*primals), J·tangents), or with `has_aux` (output, jvp, aux)."""
        trees = _tuple(primals, "jvp"), _tuple(tangents, "jvp")
        if len(trees[0]) != len(trees[1]):
            raise RuntimeError(
                f"jvp: Expected primals and tangents to have the same length, got {len(trees[0])} and {len(trees[1])}"
            )
        primals, tangents = tree_leaves(trees[0]), tree_leaves(trees[1])  # a primal may be a pytree (a dict...)
        for i, (p, t) in enumerate(zip(primals, tangents)):
            if tuple(p.shape) != tuple(t.shape):
                raise RuntimeError(
                    f"jvp: Expected primals and tangents to have the same shape: primal {i} has shape "
                    f"{list(p.shape)} and its tangent {list(t.shape)}"
                )
        keep = self.ns.is_grad_enabled() and (self._any_rg(primals) or self._any_rg(tangents))
        xs = [self._differentiable(p, self.ns.is_grad_enabled()) for p in primals]
        with self.ns.enable_grad():
            out, aux = _split(func(*tree_rebuild(trees[0], iter(xs))), has_aux, "jvp")
        outs = tree_leaves(out)
        keep = keep or self._closes_over(outs, xs)
        result = tree_rebuild(out, iter(self.linearized(outs, xs, tangents, keep)))
        shown = tree_rebuild(out, (o if keep else o.detach() for o in outs))
        return (shown, result, _unwrapped(aux, keep, self.ns.Variable)) if has_aux else (shown, result)

    def linearize(self, func, *primals):
        """(func(*primals), jvp_fn): `jvp_fn(*tangents)` is J·tangents at `primals` (each call runs `jvp`)."""
        output = func(*primals)

        def jvp_fn(*tangents):
            return self.jvp(func, primals, tangents)[1]

        return output, jvp_fn

    def _prepared(self, args, argnums):
        keep = self.ns.is_grad_enabled() and self._any_rg(args)
        xs = list(args)
        for i in argnums:
            xs[i] = self._differentiable(xs[i], keep)
        return xs, keep

    def _gradients(self, outputs, targets, seeds, keep):
        live = [i for i, o in enumerate(outputs) if o.requires_grad]
        found = [None] * len(targets)
        if live:
            found = self.ns.grad(
                [outputs[i] for i in live],
                targets,
                None if seeds is None else [seeds[i] for i in live],
                retain_graph=True,
                create_graph=keep or self.lazy,
                allow_unused=True,
            )
        return [self.zeros_like(t) if g is None else g if keep else g.detach() for g, t in zip(found, targets)]

    def vjp(self, func, *primals, has_aux=False):
        """(func(*primals), vjp_fn): vjp_fn(cotangents) is the tuple of vᵀ·J, one per primal."""
        leaves = tree_leaves(primals)  # a primal may be a pytree (a dict of parameters...)
        xs, keep = self._prepared(leaves, range(len(leaves)))
        with self.ns.enable_grad():
            out, aux = _split(func(*tree_rebuild(primals, iter(xs))), has_aux, "vjp")
        outs = tree_leaves(out)
        keep = keep or self._closes_over(outs, xs)

        def vjp_fn(*cotangents):
            seeds = tree_leaves(cotangents[0] if len(cotangents) == 1 else cotangents)
            if len(seeds) != len(outs):
                raise RuntimeError(f"Expected {len(outs)} cotangents, got {len(seeds)}")
            kept = keep or self.ns.is_grad_enabled() and self._any_rg(seeds)
            return tree_rebuild(tuple(primals), iter(self._gradients(outs, xs, seeds, kept)))

        shown = tree_rebuild(out, (o if keep else o.detach() for o in outs))
        return (shown, vjp_fn, _unwrapped(aux, keep, self.ns.Variable)) if has_aux else (shown, vjp_fn)

    def grad_and_value(self, func, argnums=0, has_aux=False):
        """A function returning (the gradient of func's one-element output for args[argnums], the output)."""

        def wrapper(*args, **kwargs):
            nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
            flat = [leaf for i in nums for leaf in tree_leaves(args[i])]  # an argument may be a pytree (a dict...)
            ready, keep = self._prepared(flat + [a for j, a in enumerate(args) if j not in nums], range(len(flat)))
            xs, leaves = list(args), iter(ready)
            for i in nums:
                xs[i] = tree_rebuild(args[i], leaves)
            with self.ns.enable_grad():
                out, aux = _split(func(*xs, **kwargs), has_aux, "grad_and_value")
            if not isinstance(out, self.ns.Variable):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got {type(out)}")
            if out.numel() != 1:
                raise RuntimeError(
                    "grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got tensor with "
                    f"{len(getattr(out, 'shape', ()))} dims. Maybe you wanted to use the vjp or jacrev APIs instead?"
                )
            keep = keep or self._closes_over([out], ready[: len(flat)])
            found = iter(self._gradients([out], ready[: len(flat)], None, keep))
            grads = [tree_rebuild(args[i], found) for i in nums]
            g = grads[0] if isinstance(argnums, int) else tuple(grads)
            value = out if keep else out.detach()
            return (g, (value, _unwrapped(aux, keep, self.ns.Variable))) if has_aux else (g, value)

        return wrapper

    def grad(self, func, argnums=0, has_aux=False):
        """A function returning the gradient of func's one-element output for args[argnums] (and aux)."""
        inner = self.grad_and_value(func, argnums, has_aux)

        def wrapper(*args, **kwargs):
            g, value = inner(*args, **kwargs)
            return (g, value[1]) if has_aux else g

        return wrapper

    def jacrev(self, func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
        """func's Jacobian for args[argnums] (out.shape + in.shape, pytrees kept), row by row, and aux with has_aux."""
        if not (chunk_size is None or chunk_size > 0):
            raise ValueError("jacrev: `chunk_size` should be greater than 0.")

        def wrapper(*args):
            nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
            chosen = [args[i] for i in nums]  # each may be a pytree (a dict of parameters...), as func's output
            structure, seen = [], []

            def partial(*leaves):
                seen.extend(leaves)
                xs, it = list(args), iter(leaves)
                for i, c in zip(nums, chosen):
                    xs[i] = tree_rebuild(c, it)
                structure.append(_split(func(*xs), has_aux, "vjp"))
                return tuple(tree_leaves(structure[0][0]))

            keep = self.ns.is_grad_enabled() and self._any_rg(tree_leaves(args))
            graph = self.ns.is_grad_enabled()  # (func may close over parameters)
            blocks = self.ns.autograd.functional.jacobian(partial, tuple(tree_leaves(chosen)), create_graph=graph)
            keep = keep or self._closes_over(tree_leaves(structure[0][0]), seen)
            blocks = blocks if keep else [[b.detach() for b in row] for row in blocks]
            per_output = [tree_rebuild(chosen, iter(block)) for block in blocks]
            per_output = [rows[0] if isinstance(argnums, int) else tuple(rows) for rows in per_output]
            jacobian = tree_rebuild(structure[0][0], iter(per_output))
            return (jacobian, _unwrapped(structure[0][1], keep, self.ns.Variable)) if has_aux else jacobian

        return wrapper

    def jacfwd(self, func, argnums=0, has_aux=False, *, randomness="error"):
        """jacrev's values (PyTorch computes them in forward mode)."""
        return self.jacrev(func, argnums, has_aux=has_aux)

    def hessian(self, func, argnums=0):
        """The Hessian of func's one-element output for args[argnums]."""
        return self.jacrev(self.jacrev(func, argnums), argnums)


def vmap_with(stack):
    """`torch.func.vmap` for the Variables that `stack` stacks: func mapped over a dimension of its inputs
    (`in_dims`: an int or None for all, or one per argument, nested as the argument is), its outputs stacked
    at `out_dims`. PyTorch batches the ops; here func runs once a row, with the same values."""

    def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
        def mapped(*args, **kwargs):
            if not isinstance(in_dims, (int, tuple)):
                raise ValueError(
                    f"vmap(f, in_dims={in_dims}, ...)(<inputs>): expected `in_dims` to be int or a (potentially "
                    f"nested) tuple matching the structure of inputs, got: {type(in_dims)}."
                )
            dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
            if len(dims) != len(args):
                raise ValueError(
                    f"vmap(f, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with the structure of "
                    f"`inputs`: in_dims has {len(dims)} elements but inputs has {len(args)}."
                )
            sizes: set = set()
            _sizes(args, dims, sizes)
            if not sizes:
                raise ValueError("vmap: Expected at least one Tensor to vmap over")
            if len(sizes) > 1:
                raise ValueError(
                    f"vmap(f, in_dims={in_dims}, ...)(<inputs>): Expected all tensors to have the same size in the "
                    f"mapped dimension, got sizes {sorted(sizes)} for the mapped dimension"
                )
            rows = [func(*_row(args, dims, i), **kwargs) for i in range(sizes.pop())]
            return _stacked(rows, out_dims)

        return mapped

    def _stacked(rows, dims):
        first = rows[0]
        if isinstance(first, (tuple, list)):
            dims = dims if isinstance(dims, (tuple, list)) else (dims,) * len(first)
            return type(first)(_stacked([r[k] for r in rows], d) for k, d in enumerate(dims))
        if isinstance(first, dict):
            return {k: _stacked([r[k] for r in rows], dims) for k in first}
        if not hasattr(first, "shape"):
            raise ValueError(f"vmap: `func` must only return Tensors, got type {type(first)}")
        return stack(rows, dims % (first.ndim + 1))

    return vmap


def _sizes(value, dim, sizes):
    if isinstance(value, (tuple, list, dict)):
        keys = value.keys() if isinstance(value, dict) else range(len(value))
        for k in keys:
            _sizes(value[k], dim[k] if isinstance(dim, (tuple, list, dict)) else dim, sizes)
    elif dim is not None:
        if not hasattr(value, "shape"):
            raise ValueError(f"vmap: Got in_dim={dim} for an input but the input is of type {type(value)}")
        if not -value.ndim <= dim < value.ndim:
            raise ValueError(
                f"vmap: Got in_dim={dim} for some input, but that input is a Tensor of dimensionality {value.ndim}"
            )
        sizes.add(value.shape[dim])


def _row(value, dim, i):
    if isinstance(value, (tuple, list, dict)):
        keys = value.keys() if isinstance(value, dict) else range(len(value))
        parts = {k: _row(value[k], dim[k] if isinstance(dim, (tuple, list, dict)) else dim, i) for k in keys}
        return parts if isinstance(value, dict) else type(value)(parts.values())
    return value if dim is None else value[(slice(None),) * (dim % value.ndim) + (i,)]


_ENGINE = Transforms(sys.modules["engine"], transpose_jvp, zeros_like)
jvp, vjp, grad_and_value, grad = _ENGINE.jvp, _ENGINE.vjp, _ENGINE.grad_and_value, _ENGINE.grad
jacrev, jacfwd, hessian, linearize = _ENGINE.jacrev, _ENGINE.jacfwd, _ENGINE.hessian, _ENGINE.linearize
vmap = vmap_with(F.stack)  # also torch.vmap (engine.vmap)
