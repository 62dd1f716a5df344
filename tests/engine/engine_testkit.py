"""Shared helpers of the engine tests: inputs from registry samples, and each op's PyTorch twin.

Not a test module (no `test_` prefix); `conftest.py` puts this folder on `sys.path`.
"""

from __future__ import annotations

import numpy as np

import engine
from engine import Variable
from engine.indexing import to_key

FLOAT_DTYPES = (np.float32, np.float64)

# Tolerances for engine-vs-torch comparisons per dtype (float32 results differ in the last bits).
TOL = {
    np.dtype(np.float32): dict(rtol=2e-4, atol=2e-5),
    np.dtype(np.float64): dict(rtol=1e-9, atol=1e-11),
}


def differentiable_ops():
    return sorted(name for name, op in engine.OPS.items() if op.differentiable)


def sample_cases(predicate=lambda op: True):
    """(op name, sample index) for every sample of every op that `predicate` accepts."""
    return [(name, i) for name, op in sorted(engine.OPS.items()) if predicate(op) for i in range(len(op.samples))]


def sample_arrays(sample, rng):
    """The raw NumPy arrays of one registry sample (float64 for drawn floats)."""
    if sample.make is not None:
        return [np.asarray(a) for a in sample.make(rng)]
    return [np.asarray(rng.uniform(sample.low, sample.high, size=shape)) for shape in sample.shapes]


def to_variables(arrays, dtype=np.float64, requires_grad=True):
    """Variables of `arrays`: floating ones cast to `dtype` (requiring grad), others kept as is."""
    out = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            out.append(Variable(a.astype(dtype), requires_grad=requires_grad))
        else:
            out.append(Variable(a.copy()))
    return out


def sample_variables(op, index, dtype=np.float64, seed=0, requires_grad=True):
    sample = op.samples[index]
    rng = np.random.default_rng(seed)
    inputs = to_variables(sample_arrays(sample, rng), dtype, requires_grad)
    return inputs, op.check_attrs(dict(sample.attrs))


def call_op(op, attrs):
    """`fn(*inputs)` running `op` with fixed attributes (what gradcheck differentiates)."""
    return lambda *xs: op.call(list(xs), attrs)


# --------------------------------------------------------------------------------------------
# PyTorch twins. An op is either spelled the same in torch (`BY_NAME`: the call is
# `torch.<name>(*inputs, **attrs)`, or `torch.<name>(inputs, **attrs)` for variadic ops) or has
# an entry in `TORCH_OVERRIDES`.
# --------------------------------------------------------------------------------------------

BY_NAME = frozenset(
    {
        "tan",
        "affine_grid_generator",
        "diagonal",
        "as_strided",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "asinh",
        "acosh",
        "atanh",
        "cosh",
        "erfinv",
        "lgamma",
        "digamma",
        "add",
        "bitwise_and",
        "det",
        "cumprod",
        "bitwise_or",
        "bitwise_xor",
        "bitwise_not",
        "bitwise_left_shift",
        "bitwise_right_shift",
        "sub",
        "mul",
        "div",
        "neg",
        "pow",
        "exp",
        "log",
        "sqrt",
        "sign",
        "abs",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "relu",
        "erf",
        "log1p",
        "expm1",
        "maximum",
        "minimum",
        "clone",
        "sum",
        "mean",
        "argmax",
        "argmin",
        "logsumexp",
        "log_softmax",
        "softmax",
        "mm",
        "matmul",
        "transpose",
        "t",
        "unsqueeze",
        "flatten",
        "permute",
        "reshape",
        "cat",
        "stack",
        "floor",
        "ceil",
        "round",
        "trunc",
        "fmod",
        "remainder",
        "floor_divide",
        "log10",
        "log2",
        "exp2",
        "tril",
        "triu",
        "cumsum",
        "argsort",
        "masked_fill",
    }
)


# ops whose torch twin's result requires grad but has no derivative (a backward raises); the
# engine declares them without a gradient, so their results require none
NO_DERIVATIVE_IN_TORCH = frozenset({"floor_divide"})


def _torch():
    import torch

    return torch


def _torch_key(index, arrays):
    return to_key(index, list(arrays))


def _getitem(inputs, attrs):
    x, *arrays = inputs
    return x[_torch_key(attrs["index"], arrays)]


def _index_add(inputs, attrs):
    # index_add is getitem's adjoint: the vjp of x[index] at zeros(shape) with cotangent g.
    # (torch.index_add is a different op, so the name must not be used.)
    torch = _torch()
    g, *arrays = inputs
    zeros = torch.zeros(attrs["shape"], dtype=g.dtype, requires_grad=True)
    picked = zeros[_torch_key(attrs["index"], arrays)]
    return torch.autograd.grad(picked, zeros, g, create_graph=True)[0]


def _setitem(inputs, attrs):
    x, value, *arrays = inputs
    out = x.clone()
    out[_torch_key(attrs["index"], arrays)] = value
    return out


def _copy_slices(inputs, attrs):
    base, value, positions = inputs
    out = base.clone()
    out.view(-1)[positions] = value
    return out


def _norm(inputs, attrs):
    torch = _torch()
    dim = attrs["dim"]
    return torch.linalg.vector_norm(inputs[0], ord=attrs["p"], dim=dim, keepdim=attrs["keepdim"])


def _var(inputs, attrs):
    torch = _torch()
    # dim=() means "all dims" in torch's forward, but torch 2.x's var backward treats it as no
    # reduction (gradients off by n); None is the same reduction with a correct backward.
    dim = None if attrs["dim"] == () else attrs["dim"]
    return torch.var(inputs[0], dim=dim, correction=1 if attrs["unbiased"] else 0, keepdim=attrs["keepdim"])


def _extreme(name):
    def call(inputs, attrs):
        torch = _torch()
        dim = () if attrs["dim"] is None else attrs["dim"]
        return getattr(torch, name)(inputs[0], dim=dim, keepdim=attrs["keepdim"])

    return call


def _prod(inputs, attrs):
    # torch.prod takes one dim: reduce the dims one at a time, the highest first
    x, dim = inputs[0], attrs["dim"]
    dims = range(x.ndim) if dim is None or dim == () else ([dim] if isinstance(dim, int) else dim)
    for d in sorted((d % max(x.ndim, 1) for d in dims), reverse=True):
        x = x.prod(d, keepdim=attrs["keepdim"])
    return x


def _comparison(name):
    return lambda inputs, attrs: getattr(_torch(), name)(*inputs)


def _clamp(inputs, attrs):
    return _torch().clamp(inputs[0], min=attrs["min"], max=attrs["max"])


def _functional(name):
    return lambda inputs, attrs: getattr(_torch().nn.functional, name)(*inputs, **attrs)


def _as_2d(value, fill):
    return (fill, value) if isinstance(value, int) else (fill, *value) if len(value) == 1 else tuple(value)


def _im2col(inputs, attrs):
    # torch's unfold takes 4-d inputs only: a 1-d window is a 2-d one of height 1
    (x,) = inputs
    if x.ndim == 4:
        return _torch().nn.functional.unfold(x, **attrs)
    fills = {"kernel_size": 1, "dilation": 1, "padding": 0, "stride": 1}
    return _torch().nn.functional.unfold(x.unsqueeze(2), **{k: _as_2d(v, fills[k]) for k, v in attrs.items()})


def _signs(columns):
    """engine/ops/decompositions.py's sign convention: each column's entry largest in magnitude positive."""
    largest = columns.detach().gather(-2, columns.detach().abs().argmax(-2, keepdim=True))
    return _torch().where(largest < 0, -1.0, 1.0).to(columns.dtype)


def _eigh_packed(inputs, attrs):
    values, vectors = _torch().linalg.eigh((inputs[0] + inputs[0].mT) / 2)  # its symmetric part
    return _torch().cat([values.unsqueeze(-2), vectors * _signs(vectors)], -2)


def _svd_packed(inputs, attrs):
    """U's rows, S, V's rows; reduced only (the registry's samples)."""
    u, s, vh = _torch().linalg.svd(inputs[0], full_matrices=False)
    signs = _signs(u)
    return _torch().cat([u * signs, s.unsqueeze(-2), vh.mT * signs], -2)


def _qr_packed(inputs, attrs):
    q, r = _torch().linalg.qr(inputs[0], mode="complete" if attrs["complete"] else "reduced")
    padding = _torch().zeros(*r.shape[:-2], q.shape[-2] - r.shape[-2], r.shape[-1], dtype=r.dtype)
    return _torch().cat([q, _torch().cat([r, padding], -2)], -1)


TORCH_OVERRIDES = {
    "eigh_packed": _eigh_packed,
    "svd_packed": _svd_packed,
    "qr_packed": _qr_packed,
    "pinv": lambda inputs, attrs: _torch().linalg.pinv(inputs[0], **attrs),
    "polygamma": lambda inputs, attrs: _torch().polygamma(attrs["n"], inputs[0]),
    "gather": lambda inputs, attrs: _torch().gather(inputs[0], attrs["dim"], inputs[1]),
    "scatter_add": lambda inputs, attrs: _torch().scatter_add(inputs[0], attrs["dim"], *inputs[1:]),
    "cumextreme_index": lambda inputs, attrs: (
        getattr(_torch(), "cummax" if attrs["largest"] else "cummin")(inputs[0], attrs["dim"]).indices
    ),
    "div_rounded": lambda inputs, attrs: _torch().div(*inputs, rounding_mode="floor" if attrs["floor"] else "trunc"),
    **{
        f"scatter_{reduce}": lambda inputs, attrs, reduce=reduce: _torch().scatter_reduce(
            inputs[0], attrs["dim"], *inputs[1:], reduce=reduce, include_self=attrs["include_self"]
        )
        for reduce in ("amax", "amin", "prod")
    },
    "scatter": lambda inputs, attrs: _torch().scatter(
        inputs[0], attrs["dim"], inputs[1], inputs[2] if inputs[2].ndim else inputs[2].expand(inputs[1].shape)
    ),
    "index_select": lambda inputs, attrs: _torch().index_select(inputs[0], attrs["dim"], inputs[1]),
    "einsum": lambda inputs, attrs: _torch().einsum(attrs["equation"], *inputs),
    "inv": lambda inputs, attrs: _torch().linalg.inv(inputs[0]),
    "logabsdet": lambda inputs, attrs: _torch().linalg.slogdet(inputs[0])[1],
    "cholesky": lambda inputs, attrs: _torch().linalg.cholesky((inputs[0] + inputs[0].mT) / 2),  # its symmetric part
    "fft_r2c": lambda inputs, attrs: _torch().view_as_real(_torch().fft.rfftn(inputs[0], **attrs)),
    "fft_c2r": lambda inputs, attrs: _torch().fft.irfftn(_torch().view_as_complex(inputs[0].contiguous()), **attrs),
    "getitem": _getitem,
    "index_add": _index_add,
    "setitem": _setitem,
    "copy_slices": _copy_slices,
    "sum_to": lambda inputs, attrs: inputs[0].sum_to_size(tuple(attrs["shape"])),
    "cast": lambda inputs, attrs: inputs[0].to(getattr(_torch(), attrs["dtype"])),
    # (the losses' value checks: their values pass through, ignored targets as 0)
    "class_targets": lambda inputs, attrs: inputs[0].where(inputs[0] != attrs["ignore_index"], 0),
    "probabilities": lambda inputs, attrs: inputs[0].clone(),
    "expand": lambda inputs, attrs: inputs[0].expand(tuple(attrs["shape"])),
    "clamp": _clamp,
    "norm": _norm,
    "var": _var,
    "prod": _prod,
    "amax": _extreme("amax"),
    "amin": _extreme("amin"),
    "squeeze": lambda inputs, attrs: inputs[0].squeeze() if attrs["dim"] is None else inputs[0].squeeze(attrs["dim"]),
    "where": lambda inputs, attrs: _torch().where(*inputs),
    **{name: _comparison(name) for name in ("lt", "le", "gt", "ge", "eq", "ne")},
    "im2col": _im2col,
    "col2im": _functional("fold"),
    **{
        name: _functional(name)
        for name in (
            "conv1d",
            "conv2d",
            "conv3d",
            "max_pool1d",
            "max_pool2d",
            "max_pool3d",
            "avg_pool1d",
            "avg_pool2d",
            "avg_pool3d",
            "adaptive_avg_pool2d",
        )
    },
}


def torch_call(name, inputs, attrs):
    """Run op `name`'s PyTorch twin on torch tensors `inputs`."""
    if name in TORCH_OVERRIDES:
        return TORCH_OVERRIDES[name](list(inputs), attrs)
    if name not in BY_NAME:
        raise KeyError(f"op {name!r} has no PyTorch twin: add it to BY_NAME or TORCH_OVERRIDES in engine_testkit.py")
    fn = getattr(_torch(), name)
    if engine.OPS[name].variadic:
        return fn(list(inputs), **attrs)
    return fn(*inputs, **attrs)


def to_torch(v, requires_grad=None):
    torch = _torch()
    array = v.detach().numpy() if isinstance(v, Variable) else np.asarray(v)
    t = torch.from_numpy(np.array(array, copy=True))
    want = (isinstance(v, Variable) and v.requires_grad) if requires_grad is None else requires_grad
    if want and t.is_floating_point():
        t.requires_grad_(True)
    return t


def torch_dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def assert_close(actual, expected, dtype=np.float64, what=""):
    """Compare an engine Variable/array with a torch tensor or array, dtype-aware tolerances."""
    if isinstance(actual, Variable):
        actual = actual.detach().numpy()
    if hasattr(expected, "detach"):
        expected = expected.detach().numpy()
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "biu" or expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        np.testing.assert_allclose(actual, expected, err_msg=what, equal_nan=True, **TOL[np.dtype(dtype)])
