"""`torch.autograd.functional`: vjp, jvp, jacobian, hessian, vhp, hvp, written once for both Variables.

`Functional(ns)` binds the functions to a package's `grad`, `Variable`, `zeros_like`, `stack` and
`enable_grad` (`engine`'s, or `client`'s: there `lazy=True`, gradients are recorded as lazy `grad`
nodes, whatever `create_graph` says, so that one call is one request when its result is read).
PyTorch's conventions: inputs and outputs are one Variable or a tuple of them, and results mirror
that; `strict`, `vectorize` and the strategies are accepted (the strategies give the same values,
`vectorize` changes nothing here); `jvp` and `hvp` use the double-backward ("transpose") trick,
as PyTorch's do.
"""

from __future__ import annotations

import math
from functools import partial

import numpy

STRATEGIES = ("reverse-mode", "forward-mode")


def _as_tuple(x, what, variable):
    """(whether `x` was a tuple, `x` as a tuple), checking that it holds Variables only."""
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, v in enumerate(items):
        if not isinstance(v, variable):
            name = f"{what} {i}" if is_tuple else what
            raise TypeError(f"The {name} given to the function must be a Variable, got {type(v).__name__}")
    return is_tuple, items


def _back(is_tuple, items):
    return tuple(items) if is_tuple else items[0]


def _independent(i, output=None):
    start = "The output" if output is None else f"Output {output}"
    return RuntimeError(
        f"{start} of the user-provided function is independent of input {i}. This is not allowed in strict mode."
    )


def _check_options(strategy, strict, vectorize, create_graph):
    """PyTorch's refusals of jacobian's options (which would all give the same values here)."""
    if strategy not in STRATEGIES:
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your function has more outputs '
            'than inputs, "forward-mode" tends to be more performant. Otherwise, prefer to use "reverse-mode".'
        )
    name, forward = "torch.autograd.functional.jacobian:", '`strategy="forward-mode"` are not supported together (yet)'
    if strategy == "forward-mode" and create_graph:
        raise NotImplementedError(
            f'{name} `create_graph=True` and {forward}. Please either set `create_graph=False` or `strategy="reverse-mode"`.'
        )
    if strategy == "forward-mode" and strict:
        raise RuntimeError(
            f'{name} `strict=True` and {forward}. Please either set `strict=False` or `strategy="reverse-mode"`.'
        )
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse Hessian isonly implemented for `vectorize=True`."
        )
    if strict and vectorize:
        raise RuntimeError(
            f"{name} `strict=True` and `vectorized=True` are not supported together. Please either set `strict=False` or "
            "`vectorize=False`."
        )


class Functional:
    """torch.autograd.functional over one package's Variables (see the module docstring)."""

    def __init__(self, ns, lazy=False):
        self.ns = ns
        self.lazy = lazy

    # --- helpers -------------------------------------------------------------------------

    def _inputs(self, inputs, create_graph, what="inputs"):
        is_tuple, items = _as_tuple(inputs, what, self.ns.Variable)
        prepared = tuple(
            x.view_as(x) if create_graph and x.requires_grad else x.detach().requires_grad_(True) for x in items
        )
        return is_tuple, prepared

    def _outputs(self, func, inputs):
        with self.ns.enable_grad():
            out = func(*inputs)
        return _as_tuple(out, "outputs of the user-provided function", self.ns.Variable)

    def _post(self, items, create_graph):
        return tuple(x if create_graph else x.detach() for x in items)

    def _grad(self, outputs, inputs, grad_outputs, create_graph, strict, independent=_independent):
        """Gradients of `outputs` for `inputs` (zeros where there is none, unless `strict`)."""
        keep = [i for i, o in enumerate(outputs) if o.requires_grad]
        grads = (None,) * len(inputs)
        if keep:
            seeds = None if grad_outputs is None else [grad_outputs[i] for i in keep]
            grads = self.ns.grad(
                [outputs[i] for i in keep],
                list(inputs),
                seeds,
                retain_graph=True,
                create_graph=create_graph or self.lazy,
                allow_unused=True,
            )
        result = []
        for i, (g, x) in enumerate(zip(grads, inputs)):
            if g is None:
                if strict:
                    raise independent(i)
                g = self.ns.zeros_like(x)
            result.append(g)
        return tuple(result)

    def _vector(self, v, like, what):
        """`v` as a tuple matching `like` (shapes checked); None stays None."""
        if v is None:
            return None
        _, v = _as_tuple(v, what, self.ns.Variable)
        if len(v) != len(like):
            raise RuntimeError(f"The given {what} has {len(v)} entries but there are {len(like)}")
        for i, (a, b) in enumerate(zip(v, like)):
            if tuple(a.shape) != tuple(b.shape):
                raise RuntimeError(
                    f"Entry {i} in {what} has invalid size: got {list(a.shape)} but expected {list(b.shape)}"
                )
        return v

    # --- the functions -------------------------------------------------------------------

    def vjp(self, func, inputs, v=None, create_graph=False, strict=False):
        """(func(inputs), vᵀ·J): the vector-Jacobian product at `inputs`."""
        in_tuple, inputs = self._inputs(inputs, create_graph)
        out_tuple, outputs = self._outputs(func, inputs)
        v = self._vector(v, outputs, "v")
        if v is None and (len(outputs) != 1 or outputs[0].numel() != 1):
            raise RuntimeError(
                "The vector v can only be None if the user-provided function returns a single Tensor with a single "
                "element."
            )
        grads = self._grad(outputs, inputs, v, create_graph, strict)
        return _back(out_tuple, self._post(outputs, create_graph)), _back(in_tuple, self._post(grads, create_graph))

    def jvp(self, func, inputs, v=None, create_graph=False, strict=False):
        """(func(inputs), J·v): the Jacobian-vector product, by the double-backward trick."""
        in_tuple, inputs = self._inputs(inputs, create_graph)
        v = self._vector(v, inputs, "v")
        if v is None:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError(
                    "The vector v can only be None if the input to the user-provided function is a single Tensor "
                    "with a single element."
                )
            v = (self.ns.ones_like(inputs[0]),)
        out_tuple, outputs = self._outputs(func, inputs)
        tangents = self._transpose(outputs, inputs, v, create_graph, strict)
        return _back(out_tuple, self._post(outputs, create_graph)), _back(out_tuple, self._post(tangents, create_graph))

    def _transpose(self, outputs, inputs, v, create_graph, strict):
        """J·v for every output: with u dummy cotangents, vᵀ·(uᵀJ)ᵀ is linear in u and its gradient for u is J·v."""
        with self.ns.enable_grad():
            dummies = tuple(self.ns.zeros_like(o).requires_grad_(True) for o in outputs)
            firsts = self._grad(outputs, inputs, dummies, True, strict)
            return self._grad(firsts, dummies, v, create_graph, strict)

    def _one_hots(self, out):
        """r -> the seed of the Jacobian's row r: one where `out`'s element r is. On the client each is made
        from `out`'s graph (zeros that no value of `out` can make otherwise, NaN included, and one element
        set), so N rows upload nothing, where N one-hot tensors would be N x N numbers."""
        shape, dtype, n = tuple(out.shape), out.dtype, out.numel()
        if self.lazy:
            zeros = (out.detach() > math.inf).to(dtype)

            def made(r):
                seed = zeros.clone()
                seed[numpy.unravel_index(r, shape)] = 1
                return seed

            return made

        def seed(r):
            row = numpy.zeros(n, dtype=dtype)
            row[r] = 1
            return self.ns.Variable(row.reshape(shape))

        return seed

    def jacobian(self, func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
        """The Jacobian: one Variable of shape out.shape + in.shape per (output, input)."""
        _check_options(strategy, strict, vectorize, create_graph)
        in_tuple, inputs = self._inputs(inputs, create_graph)
        out_tuple, outputs = self._outputs(func, inputs)
        blocks = []
        for i, out in enumerate(outputs):
            rows = []
            seeds = self._one_hots(out)
            independent = partial(_independent, output=i)
            for r in range(out.numel()):
                rows.append(self._grad((out,), inputs, (seeds(r),), create_graph, strict, independent))
            row = []
            for k, x in enumerate(inputs):
                if rows:
                    block = self.ns.stack([g[k] for g in rows]).reshape(tuple(out.shape) + tuple(x.shape))
                else:
                    block = self.ns.zeros(tuple(out.shape) + tuple(x.shape), dtype=x.dtype)
                row.append(block)
            blocks.append(_back(in_tuple, self._post(row, create_graph)))
        return _back(out_tuple, blocks)

    def hessian(
        self,
        func,
        inputs,
        create_graph=False,
        strict=False,
        vectorize=False,
        outer_jacobian_strategy="reverse-mode",
    ):
        """The Hessian of a function with one one-element output: in.shape + in.shape per pair of inputs."""
        in_tuple, _ = _as_tuple(inputs, "inputs", self.ns.Variable)

        def gradient(*xs):
            _, out = self._outputs(func, xs)
            self._check_scalar(out, "hessian")
            return _back(in_tuple, self._grad(out, xs, None, True, strict))

        return self.jacobian(gradient, inputs, create_graph, strict, vectorize, outer_jacobian_strategy)

    def _check_scalar(self, outputs, name):
        if len(outputs) != 1:
            raise RuntimeError(f"The function given to {name} should return a single Tensor")
        if outputs[0].numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to {name} should contain a single element")

    def vhp(self, func, inputs, v=None, create_graph=False, strict=False):
        """(func(inputs), vᵀ·H) for a function with one one-element output."""
        in_tuple, inputs = self._inputs(inputs, create_graph)
        v = self._vector(v, inputs, "v")
        out_tuple, outputs = self._outputs(func, inputs)
        self._check_scalar(outputs, "vhp")
        v = self._default_v(v, inputs)
        jac = self._grad(outputs, inputs, None, True, strict)
        with self.ns.enable_grad():
            result = self._grad(jac, inputs, v, create_graph, strict)
        return _back(out_tuple, self._post(outputs, create_graph)), _back(in_tuple, self._post(result, create_graph))

    def hvp(self, func, inputs, v=None, create_graph=False, strict=False):
        """(func(inputs), H·v), by the double-backward trick on the gradient (as PyTorch computes it)."""
        in_tuple, inputs = self._inputs(inputs, create_graph)
        v = self._vector(v, inputs, "v")
        out_tuple, outputs = self._outputs(func, inputs)
        self._check_scalar(outputs, "hvp")
        v = self._default_v(v, inputs)
        with self.ns.enable_grad():
            jac = self._grad(outputs, inputs, None, True, strict)
            result = self._transpose(jac, inputs, v, create_graph, strict)
        return _back(out_tuple, self._post(outputs, create_graph)), _back(in_tuple, self._post(result, create_graph))

    def _default_v(self, v, inputs):
        if v is not None:
            return v
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the input to the user-provided function is a single Tensor with a "
                "single element."
            )
        return (self.ns.ones_like(inputs[0]),)
