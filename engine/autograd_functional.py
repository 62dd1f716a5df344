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


STRICT = " This is not allowed in strict mode."
NEEDS_GRAD = {  # PyTorch's `_check_requires_grad`: a result that does not require grad, by what it is
    "outputs": "Output {i} of the user-provided function does not require gradients. The outputs must be computed in "
    "a differentiable manner from the input when running in strict mode.",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the user-provided "
    "function." + STRICT,
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided function with respect to "
    "input {i} is independent of the input. This is not allowed in strict mode. You should ensure that your function "
    "is twice differentiable and that the jacobian depends on the inputs (this would be violated by a linear "
    "function for example).",
}
MISSING = {  # PyTorch's `_fill_in_zeros`: a gradient that is None, by the stage that computed it
    "back": "The output of the user-provided function is independent of input {i}." + STRICT,
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs when using "
    "the double backward trick to compute forward mode gradients." + STRICT,
    "double_back": "The jacobian of the user-provided function is independent of input {i}." + STRICT,
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the grad_jacobian. "
    "This is not allowed in strict mode as it prevents from using the double backward trick to replace forward mode AD.",
}
CONSTANT = (
    "The {what} of the user-provided function is independent of input {i}." + STRICT[:-1] + " when create_graph=True."
)


def _check_requires_grad(items, kind, strict):
    """PyTorch's strict-mode refusal of a None (a missing gradient) or of a result that does not require grad."""
    for i, v in enumerate(items if strict else ()):
        if v is None:
            raise RuntimeError(MISSING["back"].format(i=i))
        if not v.requires_grad:
            raise RuntimeError(NEEDS_GRAD[kind].format(i=i))


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

    def _grad(self, outputs, inputs, grad_outputs, create_graph, strict, stage="back", refs=None):
        """Gradients of `outputs` for `inputs`: None where there is none with `stage` None, else zeros shaped as
        `refs` (the inputs by default), or PyTorch's strict-mode refusal for that stage (`_fill_in_zeros`)."""
        keep = [i for i, o in enumerate(outputs) if o is not None and o.requires_grad]
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
        if stage is None:
            return tuple(grads)
        result = []
        for i, (g, ref) in enumerate(zip(grads, refs or inputs)):
            if strict and (g is None or create_graph and not g.requires_grad):
                what = "hessian" if "double" in stage else "jacobian"
                raise RuntimeError(MISSING[stage].format(i=i) if g is None else CONSTANT.format(what=what, i=i))
            result.append(self.ns.zeros_like(ref) if g is None else g)
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
        _check_requires_grad(outputs, "outputs", strict)
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
        _check_requires_grad(outputs, "outputs", strict)
        tangents = self._transpose(outputs, inputs, v, create_graph, strict, outputs)
        return _back(out_tuple, self._post(outputs, create_graph)), _back(out_tuple, self._post(tangents, create_graph))

    def _transpose(self, outputs, inputs, v, create_graph, strict, likes, stage="back_trick"):
        """J·v for every output: with u dummy cotangents (shaped as `likes`), vᵀ·(uᵀJ)ᵀ is linear in u and its
        gradient for u is J·v."""
        with self.ns.enable_grad():
            dummies = tuple(self.ns.zeros_like(o).requires_grad_(True) for o in likes)
            firsts = self._grad(outputs, inputs, dummies, True, strict, None)
            _check_requires_grad(firsts if stage == "back_trick" else (), "grad_inputs", strict)
            return self._grad(firsts, dummies, v, create_graph, strict, stage, likes)

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
        _check_requires_grad(outputs, "outputs", strict)
        blocks = []
        for i, out in enumerate(outputs):
            rows = []
            seeds = self._one_hots(out)
            for r in range(out.numel()):
                row = self._grad((out,), inputs, (seeds(r),), create_graph, strict, None)
                for k, g in enumerate(row if strict else ()):  # PyTorch's messages (`create_graph`'s names output i)
                    if g is None:
                        raise RuntimeError(
                            f"Output {i} of the user-provided function is independent of input {k}.{STRICT}"
                        )
                    if create_graph and not g.requires_grad:
                        raise RuntimeError(CONSTANT.format(what="jacobian", i=i))
                rows.append([self.ns.zeros_like(x) if g is None else g for g, x in zip(row, inputs)])
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
            _check_requires_grad(out, "outputs", strict)
            self._check_scalar(out, "hessian")
            jac = self._grad(out, xs, None, True, False)
            _check_requires_grad(jac, "jacobian", strict)
            return _back(in_tuple, jac)

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
        _check_requires_grad(outputs, "outputs", strict)
        self._check_scalar(outputs, "vhp")
        v = self._default_v(v, inputs)
        jac = self._grad(outputs, inputs, None, True, strict, None)
        _check_requires_grad(jac, "jacobian", strict)
        with self.ns.enable_grad():
            result = self._grad(jac, inputs, v, create_graph, strict, "double_back")
        return _back(out_tuple, self._post(outputs, create_graph)), _back(in_tuple, self._post(result, create_graph))

    def hvp(self, func, inputs, v=None, create_graph=False, strict=False):
        """(func(inputs), H·v), by the double-backward trick on the gradient (as PyTorch computes it)."""
        in_tuple, inputs = self._inputs(inputs, create_graph)
        v = self._vector(v, inputs, "v")
        out_tuple, outputs = self._outputs(func, inputs)
        _check_requires_grad(outputs, "outputs", strict)
        self._check_scalar(outputs, "hvp")
        v = self._default_v(v, inputs)
        with self.ns.enable_grad():
            jac = self._grad(outputs, inputs, None, True, strict, None)
            _check_requires_grad(jac, "jacobian", strict)
            result = self._transpose(jac, inputs, v, create_graph, strict, inputs, "double_back_trick")
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
