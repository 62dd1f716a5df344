"""`gradcheck` and `gradgradcheck` on the client, with the engine's keywords and messages
(`engine.gradcheck`): the central differences, the analytical Jacobian (lazy `grad` nodes) and,
with `check_forward_ad`, the forward-mode one (lazy `jvp` nodes) are all recorded, then computed by
one request. Perturbed inputs are new Variables (x ± eps·eⱼ), not edits of the inputs in place.
"""

from __future__ import annotations

import numpy

from client import autograd
from client.func import jvp
from client.session import current_session
from client.state import enable_grad, no_grad
from client.variable import Variable
from engine.api import GRADCHECK_KEYWORDS, GRADGRADCHECK_KEYWORDS, GradcheckError, accept_keywords, compare_jacobians

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


def _outputs(fn, inputs):
    out = fn(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _one_hot(x, j, scale=1.0):
    e = numpy.zeros(x.numel(), dtype=x.dtype)
    e[j] = scale
    return e.reshape(x.shape)


def _perturbed(inputs, i, array):
    """`inputs` with input i replaced by a leaf of `array` (requiring grad as input i does)."""
    return [*inputs[:i], Variable(array, requires_grad=inputs[i].requires_grad), *inputs[i + 1 :]]


def _jacobians(fn, inputs, wrt, eps, forward):
    """(outputs, numerical, analytical, forward-mode or None Jacobian blocks [output][input] as arrays),
    recorded lazily and computed by one request."""
    with enable_grad():
        outs = _outputs(fn, inputs)
        columns = {"numerical": [[[] for _ in wrt] for _ in outs], "forward": [[[] for _ in wrt] for _ in outs]}
        for k, i in enumerate(wrt):
            x, array = inputs[i], inputs[i].numpy(force=True)
            for j in range(x.numel()):
                plus = _outputs(fn, _perturbed(inputs, i, array + _one_hot(x, j, eps)))
                minus = _outputs(fn, _perturbed(inputs, i, array - _one_hot(x, j, eps)))
                for o, (p, m) in enumerate(zip(plus, minus)):
                    columns["numerical"][o][k].append(((p - m) / (2 * eps)).reshape(-1))
                if forward:
                    f = lambda xi, i=i: _call(fn, inputs, (i,), (xi,))  # noqa: E731
                    for o, t in enumerate(jvp(f, (x,), (Variable(_one_hot(x, j)),))[1]):
                        columns["forward"][o][k].append(t.reshape(-1))
        analytical = autograd.functional.jacobian(lambda *xs: _call(fn, inputs, wrt, xs), tuple(inputs[i] for i in wrt))
    lazy = [c for kind in columns.values() for row in kind for cols in row for c in cols]
    lazy += [block for row in analytical for block in row]
    current_session().fetch(*[v for v in lazy if not v._has_value])
    numerical, forward_blocks = (_arrays(outs, wrt, inputs, columns[kind]) for kind in ("numerical", "forward"))
    found = [[block.numpy(force=True).reshape(o.numel(), -1) for block in row] for o, row in zip(outs, analytical)]
    return numerical, found, forward_blocks if forward else None


def _call(fn, inputs, wrt, xs):
    """fn's outputs, as a tuple, at `inputs` with those of `wrt` replaced by `xs`."""
    args = list(inputs)
    for i, x in zip(wrt, xs):
        args[i] = x
    out = fn(*args)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _arrays(outs, wrt, inputs, columns):
    """Jacobian blocks (out_size, in_size) as NumPy arrays from per-column Variables."""
    return [
        [
            numpy.stack([c.numpy(force=True) for c in cols], axis=1).reshape(o.numel(), inputs[i].numel())
            if cols
            else numpy.zeros((o.numel(), inputs[i].numel()))
            for cols, i in zip(row, wrt)
        ]
        for o, row in zip(outs, columns)
    ]


def gradcheck(
    fn,
    inputs,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    raise_exception=True,
    check_forward_ad=False,
    check_backward_ad=True,
    **accepted,
) -> bool:
    """`engine.gradcheck` on client Variables (PyTorch's keywords; see the module docstring)."""
    accept_keywords("gradcheck", accepted, GRADCHECK_KEYWORDS)
    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    wrt = [i for i, v in enumerate(inputs) if isinstance(v, Variable) and v.requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad")
    for i in wrt:
        if inputs[i].dtype != numpy.float64:
            raise ValueError(f"gradcheck: input {i} is {inputs[i].dtype}; use float64 for finite differences")
    numerical, analytical, forward = _jacobians(fn, inputs, wrt, eps, check_forward_ad)
    checks = ([("", analytical)] if check_backward_ad else []) + (
        [("forward-mode ", forward)] if check_forward_ad else []
    )
    return all(compare_jacobians(numerical, found, wrt, mode, atol, rtol, raise_exception) for mode, found in checks)


def gradgradcheck(
    fn,
    inputs,
    grad_outputs=None,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    raise_exception=True,
    seed=0,
    check_fwd_over_rev=False,
    check_rev_over_rev=True,
    **accepted,
) -> bool:
    """gradcheck of the first derivative (gradients recorded as lazy grad nodes)."""
    accept_keywords("gradgradcheck", accepted, GRADGRADCHECK_KEYWORDS)
    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    if not any(isinstance(v, Variable) and v.requires_grad for v in inputs):
        raise ValueError("gradgradcheck: no input requires grad")
    if grad_outputs is None:
        rng = numpy.random.default_rng(seed)
        with no_grad():
            outs = _outputs(fn, inputs)
        grad_outputs = [Variable(rng.standard_normal(o.shape).astype(o.dtype)) for o in outs]
    grad_outputs = list(grad_outputs)

    def first_derivative(*xs):
        outs = _outputs(fn, list(xs))
        targets = [x for x in xs if isinstance(x, Variable) and x.requires_grad]
        grads = autograd.grad(outs, targets, grad_outputs, create_graph=True, allow_unused=True)
        return tuple(x * 0 if g is None else g for g, x in zip(grads, targets))

    return gradcheck(
        first_derivative,
        inputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        check_forward_ad=check_fwd_over_rev,
        check_backward_ad=check_rev_over_rev,
    )
