"""Numerical gradient checks: central differences in float64 against the analytic vjps."""

from __future__ import annotations

import numpy

from engine import backend
from engine.autograd import grad
from engine.grad_mode import no_grad
from engine.variable import Variable


class GradcheckError(RuntimeError):
    pass


def _outputs(fn, inputs):
    out = fn(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _numerical(fn, inputs, wrt, eps):
    """Jacobian blocks J[o][i] of shape (out_size, in_size) by central differences."""
    sizes = [o._data.size for o in _outputs(fn, inputs)]
    jac = [[numpy.zeros((s, inputs[i]._data.size)) for i in wrt] for s in sizes]
    for k, i in enumerate(wrt):
        data = inputs[i]._data
        for j in range(data.size):
            at = numpy.unravel_index(j, data.shape)  # (not a reshape: of a transposed array that is a copy)
            original = data[at].item()
            data[at] = original + eps
            plus = [backend.to_numpy(o._data).astype(numpy.float64).reshape(-1) for o in _outputs(fn, inputs)]
            data[at] = original - eps
            minus = [backend.to_numpy(o._data).astype(numpy.float64).reshape(-1) for o in _outputs(fn, inputs)]
            data[at] = original
            for o in range(len(sizes)):
                jac[o][k][:, j] = (plus[o] - minus[o]) / (2 * eps)
    return jac


def _analytical(fn, inputs, wrt):
    outputs = _outputs(fn, inputs)
    jac = []
    targets = [inputs[i] for i in wrt]
    for out in outputs:
        rows = [numpy.zeros((out._data.size, inputs[i]._data.size)) for i in wrt]
        if out.requires_grad:
            xp = backend.array_module(out._data)
            for r in range(out._data.size):
                seed = xp.zeros(out._data.size, dtype=out._data.dtype)
                seed[r] = 1
                grads = grad(
                    out, targets, Variable._result(seed.reshape(out.shape), None), retain_graph=True, allow_unused=True
                )
                for k, g in enumerate(grads):
                    if g is not None:
                        rows[k][r] = backend.to_numpy(g._data).reshape(-1)
        jac.append(rows)
    return jac


def _forward(fn, inputs, wrt):
    """Jacobian blocks J[o][i] by forward-mode AD (`engine.forward_ad`): one column per input element."""
    from engine import forward_ad

    sizes = [o._data.size for o in _outputs(fn, inputs)]
    jac = [[numpy.zeros((s, inputs[i]._data.size)) for i in wrt] for s in sizes]
    for k, i in enumerate(wrt):
        data = inputs[i]._data
        for j in range(data.size):
            seed = backend.array_module(data).zeros(data.size, dtype=data.dtype)
            seed[j] = 1
            with forward_ad.dual_level():
                args = list(inputs)
                args[i] = forward_ad.make_dual(inputs[i], Variable._result(seed.reshape(data.shape), None))
                for o, out in enumerate(_outputs(fn, args)):
                    tangent = forward_ad.unpack_dual(out).tangent
                    if tangent is not None:
                        jac[o][k][:, j] = backend.to_numpy(tangent._data).reshape(-1)
    return jac


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
    """Compare the vjps of `fn` at `inputs` (and with `check_forward_ad` its forward-mode
    derivatives) with central differences; PyTorch's keywords.

    `inputs` are Variables (use float64); those with requires_grad are checked. Raises
    GradcheckError naming the output, input and worst element (or returns False when
    `raise_exception` is false). PyTorch's other keywords (`check_undefined_grad`, `fast_mode`,
    `nondet_tol`, `check_batched_grad`...) are accepted: the full Jacobians are always compared.
    """
    _accept("gradcheck", accepted, _GRADCHECK_KEYWORDS)
    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    wrt = [i for i, v in enumerate(inputs) if isinstance(v, Variable) and v.requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad")
    for i in wrt:
        if inputs[i].dtype != numpy.float64:
            raise ValueError(f"gradcheck: input {i} is {inputs[i].dtype}; use float64 for finite differences")
    numerical = _numerical(fn, inputs, wrt, eps)
    checks = ([("", _analytical(fn, inputs, wrt))] if check_backward_ad else []) + (
        [("forward-mode ", _forward(fn, inputs, wrt))] if check_forward_ad else []
    )
    return all(_compare(numerical, found, wrt, mode, atol, rtol, raise_exception) for mode, found in checks)


_GRADCHECK_KEYWORDS = frozenset(
    {
        "nondet_tol",
        "check_undefined_grad",
        "check_grad_dtypes",
        "check_batched_grad",
        "check_batched_forward_grad",
        "fast_mode",
        "masked",
    }
)
_GRADGRADCHECK_KEYWORDS = frozenset(
    {
        "nondet_tol",
        "check_undefined_grad",
        "check_grad_dtypes",
        "check_batched_grad",
        "gen_non_contig_grad_outputs",
        "fast_mode",
        "masked",
    }
)


def _accept(name, given, known):
    unknown = sorted(set(given) - known)
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")


def _compare(numerical, analytical, wrt, mode, atol, rtol, raise_exception) -> bool:
    for o, (num_rows, ana_rows) in enumerate(zip(numerical, analytical)):
        for k, (n, a) in enumerate(zip(num_rows, ana_rows)):
            if not numpy.allclose(a, n, rtol=rtol, atol=atol, equal_nan=True):
                worst = numpy.unravel_index(numpy.argmax(numpy.abs(a - n)), a.shape)
                message = (
                    f"gradcheck: {mode}Jacobian mismatch for output {o} with respect to input {wrt[k]}: "
                    f"analytical {a[worst]:.6g} vs numerical {n[worst]:.6g} at (output element, input element) {worst}\n"
                    f"analytical:\n{a}\nnumerical:\n{n}"
                )
                if raise_exception:
                    raise GradcheckError(message)
                return False
    return True


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
    """gradcheck of the first derivative: checks the vjps recorded with create_graph=True (and with
    `check_fwd_over_rev` their forward-mode derivatives); PyTorch's keywords."""
    _accept("gradgradcheck", accepted, _GRADGRADCHECK_KEYWORDS)
    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    wrt = [v for v in inputs if isinstance(v, Variable) and v.requires_grad]
    if grad_outputs is None:
        rng = numpy.random.default_rng(seed)
        with no_grad():
            outs = _outputs(fn, inputs)
        grad_outputs = [Variable(backend.to_active(rng.standard_normal(o.shape)).astype(o.dtype)) for o in outs]
    grad_outputs = list(grad_outputs)

    def first_derivative(*xs):
        outs = _outputs(fn, list(xs))
        targets = [x for x in xs if isinstance(x, Variable) and x.requires_grad]
        grads = grad(outs, targets, grad_outputs, create_graph=True, allow_unused=True)
        return tuple(Variable(x._data * 0) if g is None else g for g, x in zip(grads, targets))

    if not wrt:
        raise ValueError("gradgradcheck: no input requires grad")
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
