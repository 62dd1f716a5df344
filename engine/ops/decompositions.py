"""The decompositions torch.linalg composes from, each one primitive whose outputs are packed into one array
(the registry's ops have one output; `engine.linalg_functions` selects the parts): `eigh_packed`, `svd_packed`,
`qr_packed`, and `pinv`. The vjps are PyTorch's (FunctionsManual.cpp: linalg_eig_backward, svd_backward,
linalg_qr_backward, pinv_backward), written as differentiable ops, so each has a second derivative.

Where PyTorch leaves a gradient undefined (repeated eigenvalues or singular values, a zero singular value
with a gradient of U or V) the terms that would divide by zero are dropped rather than made inf or NaN: the
right gradient for a loss that does not depend on the choice of basis of a repeated eigenspace."""

from __future__ import annotations

import math

import numpy

from engine import costs, shapes
from engine.attrs import Attr
from engine.registry import F, Sample, defop


def _check(rule, x, **attrs):
    """The engine runs forwards unchecked: a shape or dtype the rule refuses is PyTorch's RuntimeError."""
    try:
        rule([x.shape], [x.dtype], attrs)
    except shapes.ShapeError as error:
        raise RuntimeError(str(error)) from None


def _safe(x):
    """x with its zeros as inf: dividing by it drops the terms PyTorch's formulas leave undefined."""
    return F.where(x == 0, math.inf, x)


def _skew(x):
    return x - x.mT


def _signs(xp, columns):
    """+-1 per column, making its entry largest in magnitude positive: one sign convention whatever the LAPACK."""
    largest = xp.take_along_axis(columns, xp.abs(columns).argmax(-2)[..., None, :], -2)
    return xp.where(largest < 0, -1, 1).astype(columns.dtype)


def _eigh(xp, x):
    _check(shapes.eigh_packed, x)
    values, vectors = xp.linalg.eigh((x + x.swapaxes(-1, -2)) / 2)  # reads the symmetric part, as its vjp does
    return xp.concatenate([values[..., None, :], vectors * _signs(xp, vectors)], axis=-2)


def _eigh_vjp(g, ans, x):
    values, vectors = ans[..., 0, :], ans[..., 1:, :]
    gaps = _safe(values.unsqueeze(-2) - values.unsqueeze(-1))
    rotation = 0.5 * _skew(vectors.mT @ g[..., 1:, :]) / gaps  # (diag(gL) as a column scaling: no index array)
    return (vectors @ rotation + vectors * g[..., 0, :].unsqueeze(-2)) @ vectors.mT


def _svd(xp, x, full_matrices):
    _check(shapes.svd_packed, x, full_matrices=full_matrices)
    m, n = x.shape[-2:]
    u, s, vh = xp.linalg.svd(x, full_matrices=full_matrices)
    out = xp.zeros((*x.shape[:-2], m + 1 + n, max(m, n) if full_matrices else min(m, n)), x.dtype)
    out[..., :m, : u.shape[-1]], out[..., m, : s.shape[-1]] = u, s
    out[..., m + 1 :, : vh.shape[-2]] = vh.swapaxes(-1, -2)
    signs, k = _signs(xp, out[..., :m, :]), min(m, n)  # U's columns and V's by the same signs (their own past k)
    out[..., :m, :] *= signs
    out[..., m + 1 :, :] *= xp.concatenate([signs[..., :k], _signs(xp, out[..., m + 1 :, k:])], axis=-1)
    return out


def _svd_vjp(g, ans, x, full_matrices):
    """PyTorch's svd_backward on the first min(m, n) columns of U and V (full_matrices: the others have none)."""
    m, n = x.shape[-2:]
    k = min(m, n)
    u, s, v = ans[..., :m, :k], ans[..., m, :k], ans[..., m + 1 :, :k]
    gu, gs, gv = g[..., :m, :k], g[..., m, :k], g[..., m + 1 :, :k]
    squares = s * s
    gaps = _safe(squares.unsqueeze(-2) - squares.unsqueeze(-1))
    core = (_skew(u.mT @ gu) * s.unsqueeze(-2) + s.unsqueeze(-1) * _skew(v.mT @ gv)) / gaps
    if m < n:
        scaled = gv.mT / _safe(s).unsqueeze(-1)
        return u @ (core @ v.mT + gs.unsqueeze(-1) * v.mT + scaled - (scaled @ v) @ v.mT)
    left = u @ core + u * gs.unsqueeze(-2)
    if m > n:
        scaled = gu / _safe(s).unsqueeze(-2)
        left = left + scaled - u @ (u.mT @ scaled)
    return left @ v.mT


def _qr(xp, x, complete):
    _check(shapes.qr_packed, x, complete=complete)
    m, n = x.shape[-2:]
    q, r = xp.linalg.qr(x, mode="complete" if complete else "reduced")
    out = xp.zeros((*x.shape[:-2], m, q.shape[-1] + n), x.dtype)
    out[..., : q.shape[-1]], out[..., : r.shape[-2], q.shape[-1] :] = q, r
    return out


def _qr_square_vjp(gq, gr, q, r):
    """m >= n: gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q, copyltu(M) symmetric from M's lower triangle."""
    middle = r @ gr.mT - gq.mT @ q
    return (gq + q @ (middle.tril() + middle.tril(-1).mT)) @ F.inv(r).mT


def _qr_vjp(g, ans, x, complete):
    """PyTorch's linalg_qr_backward; m < n as A = Q [R1 | R2] (Q and R1 the QR of A's first m columns)."""
    m, n = x.shape[-2:]
    if complete and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    k = min(m, n)
    q, r, gq, gr = ans[..., :k], ans[..., :k, k:], g[..., :k], g[..., :k, k:]
    if m >= n:
        return _qr_square_vjp(gq, gr, q, r)
    tail = q @ r[..., m:]
    grad = _qr_square_vjp(gq + tail @ gr[..., m:].mT, gr[..., :m], q, r[..., :m])
    return F.cat([grad, q @ gr[..., m:]], dim=-1)


def _pinv(xp, x, atol, rtol, hermitian):
    """PyTorch's tolerance: singular values at most max(atol, rtol * the largest) are dropped; rtol defaults
    to eps * max(m, n) when atol is unset or zero, to zero otherwise."""
    _check(shapes.pinv, x)
    u, s, vh = xp.linalg.svd(x, full_matrices=False)
    if rtol is None:
        rtol = numpy.finfo(x.dtype).eps * max(x.shape[-2:]) if not atol else 0.0
    largest = s[..., :1] if s.shape[-1] else s
    kept = s > xp.maximum(atol or 0.0, rtol * largest)
    inverse = xp.where(kept, 1 / xp.where(kept, s, 1), 0).astype(x.dtype)
    return (vh.swapaxes(-1, -2) * inverse[..., None, :]) @ u.swapaxes(-1, -2)


def _pinv_vjp(g, ans, x, atol, rtol, hermitian):
    """PyTorch's pinv_backward (the derivative at a constant rank)."""
    m, n = x.shape[-2:]
    ans_t, g_t = ans.mT, g.mT
    if m <= n:
        k = g_t @ ans
        k_ans_t = k @ ans_t
        return -(ans @ k).mT + k_ans_t - (x @ ans) @ k_ans_t + (ans_t @ ans) @ (g_t - k @ x)
    k = ans @ g_t
    ans_t_k = ans_t @ k
    return -(k @ ans).mT + (g_t - x @ k) @ ans @ ans_t + ans_t_k - ans_t_k @ ans @ x


def _work(factor):
    """~factor * m * n * min(m, n) flops per matrix of the batch, plus a pass over the operands."""

    def work(in_shapes, out_shape, attrs) -> int:
        *batch, m, n = in_shapes[0]
        return factor * costs.numel(batch) * m * n * min(m, n) + costs.one_pass(in_shapes, out_shape, attrs)

    return work


def _scratch(forward, backward):
    """`forward` and `backward` temporaries of the largest of the input and the output, in its float dtype."""

    def scratch(in_metas, out_meta, attrs) -> costs.Scratch:
        size = costs.largest(in_metas, out_meta) * costs.float_itemsize(in_metas, out_meta)
        return costs.Scratch(forward=forward * size, backward=backward * size)

    return scratch


COMMON = dict(methods=(), kernel="blas", saves=False, uses_output=True)
eigh_packed = defop(
    "eigh_packed",
    _eigh,
    _eigh_vjp,
    samples=(Sample(((3, 3),)), Sample(((2, 4, 4),))),
    infer=shapes.eigh_packed,
    work=_work(9),
    scratch=_scratch(4, 6),
    doc="eigenvalues (a first row) over eigenvectors (columns) of each matrix's symmetric part (torch.linalg.eigh)",
    **COMMON,
)
svd_packed = defop(
    "svd_packed",
    _svd,
    _svd_vjp,
    attrs={
        "full_matrices": Attr("bool", False, "U and Vh square (their extra columns have no gradient, as in PyTorch)")
    },
    samples=(Sample(((3, 3),)), Sample(((4, 2),)), Sample(((2, 2, 4),))),  # (full_matrices' extra columns: none)
    infer=shapes.svd_packed,
    work=_work(12),
    scratch=_scratch(4, 6),
    doc="U's rows, S, then V's rows (V = Vh^T) of each matrix (torch.linalg.svd), zero-padded to one width",
    **COMMON,
)
qr_packed = defop(
    "qr_packed",
    _qr,
    _qr_vjp,
    attrs={"complete": Attr("bool", False, "Q square, R as tall as A (mode='complete')")},
    samples=(Sample(((3, 3),)), Sample(((4, 2),)), Sample(((2, 2, 4),)), Sample(((2, 4),), {"complete": True})),
    infer=shapes.qr_packed,
    work=_work(4),
    scratch=_scratch(3, 5),
    doc="Q's columns, then R's (zero-padded to A's rows), of each matrix (torch.linalg.qr)",
    **COMMON,
)
pinv = defop(
    "pinv",
    _pinv,
    _pinv_vjp,
    attrs={
        "atol": Attr("float?", None, "singular values at most this are dropped"),
        "rtol": Attr("float?", None, "... or at most this times the largest (default eps * max(m, n))"),
        "hermitian": Attr("bool", False, "A is symmetric (computed as any other matrix)"),
    },
    samples=(Sample(((2, 4, 3),)), Sample(((2, 3, 3),)), Sample(((2, 2, 4),))),  # batched: grown, fast SVDs
    infer=shapes.pinv,
    work=_work(14),
    scratch=_scratch(6, 7),
    doc="the Moore-Penrose pseudo-inverse of each matrix (torch.linalg.pinv)",
    **{**COMMON, "saves": True},
)
