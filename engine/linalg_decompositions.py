"""torch.linalg's decompositions (`eigh`, `eigvalsh`, `svd`, `svdvals`, `qr`, `pinv`, `lstsq`, `matrix_rank`, `cond`,
the matrix norms of singular values) and their older spellings (`torch.svd`, `torch.qr`, `torch.pinverse`), selected from the packed
results of the registry's `eigh_packed`, `svd_packed`, `qr_packed` and `pinv` (engine/ops/decompositions.py), for
both Variables: `functions(ops)` for the surface (each also a Tensor method), `linalg(ops)` for the namespace.

Unlike PyTorch, differentiating linalg.qr(mode='r') works (PyTorch refuses it), and repeated eigenvalues or
singular values give the gradient that drops their undefined terms, where PyTorch's may be inf or NaN."""

from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

import numpy

from engine.grad_fn_names import swap

if TYPE_CHECKING:
    from engine.surface_types import VariableSurface


class EighResult(namedtuple("linalg_eigh", "eigenvalues eigenvectors")):
    """torch.return_types.linalg_eigh."""


class SVDResult(namedtuple("linalg_svd", "U S Vh")):
    """torch.return_types.linalg_svd."""


class QRResult(namedtuple("linalg_qr", "Q R")):
    """torch.return_types.linalg_qr (and torch.return_types.qr)."""


class OldSVD(namedtuple("svd", "U S V")):
    """torch.return_types.svd: V, not its transpose."""


class LstsqResult(namedtuple("linalg_lstsq", "solution residuals rank singular_values")):
    """torch.return_types.linalg_lstsq."""


MODES = ("reduced", "complete", "r")


def _named(parts, name: str):
    """`parts` (selections of one packed result), each one's grad_fn named PyTorch's node of the decomposition."""
    for part in parts:
        node = getattr(part, "grad_fn", None)
        if node is not None:
            swap(node, name)
    return parts


DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _svd_parts(ops, A, full_matrices):
    """(U, S, V) of A, U and V with all their columns when full_matrices."""
    packed = ops["svd_packed"](A, full_matrices=full_matrices)
    m, n = A.shape[-2:]
    k = min(m, n)
    return (
        packed[..., :m, : m if full_matrices else k],
        packed[..., m, :k],
        packed[..., m + 1 :, : n if full_matrices else k],
    )


def _qr(ops, A, mode):
    if mode not in MODES:
        raise RuntimeError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'"
        )
    packed = ops["qr_packed"](A, complete=mode == "complete")
    columns = A.shape[-2] if mode == "complete" else min(A.shape[-2:])
    Q, R = packed[..., :columns], packed[..., :columns, columns:]
    return _named(QRResult(A.new_zeros(0) if mode == "r" else Q, R), "LinalgQrBackward0")


def functions(ops) -> dict:
    def svd(input: VariableSurface, some: bool = True, compute_uv: bool = True) -> tuple[VariableSurface, ...]:
        U, S, V = _svd_parts(ops, input, not some)
        if not compute_uv:
            m, n = input.shape[-2:]
            return OldSVD(input.new_zeros((*input.shape[:-2], m, m)), S, input.new_zeros((*input.shape[:-2], n, n)))
        return _named(OldSVD(U, S, V), "LinalgSvdBackward0")

    def qr(input: VariableSurface, some: bool = True) -> tuple[VariableSurface, VariableSurface]:
        return _qr(ops, input, "reduced" if some else "complete")

    def pinverse(input: VariableSurface, rcond: float = 1e-15) -> VariableSurface:
        return ops["pinv"](input, rtol=rcond)

    return {"svd": svd, "qr": qr, "pinverse": pinverse}


def linalg(ops) -> dict:
    def eigh(A, UPLO="L"):
        """A's triangle UPLO read as a symmetric matrix; the gradient is PyTorch's, symmetric (A's own)."""
        if UPLO not in ("L", "U"):
            raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
        if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
            ops["eigh_packed"](A)  # refused, as the op words it
        half = A.tril() if UPLO == "L" else A.triu()
        symmetric = half + (A.tril(-1) if UPLO == "L" else A.triu(1)).mT
        packed = ops["eigh_packed"](A + (symmetric - A).detach() if A.requires_grad else symmetric)
        return _named(EighResult(packed[..., 0, :], packed[..., 1:, :]), "LinalgEighBackward0")

    def svd(A, full_matrices=True, *, driver=None):
        U, S, V = _svd_parts(ops, A, full_matrices)
        return _named(SVDResult(U, S, V.mT), "LinalgSvdBackward0")

    def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None):
        return ops["pinv"](A, atol=atol, rtol=rcond if rtol is None else rtol, hermitian=hermitian)

    def lstsq(A, B, rcond=None, *, driver=None):
        """The solution pinv(A) B (PyTorch's gradient); residuals, rank and singular values (per driver) have none."""
        driver = driver or "gelsy"
        if driver not in DRIVERS:
            raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
        vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
        matrix = B.unsqueeze(-1) if vector else B
        if A.shape[-2] != matrix.shape[-2]:
            raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
        m, n = A.shape[-2:]
        cut = numpy.finfo(A.dtype).eps * max(m, n) if rcond is None else rcond
        solution = pinv(A, rtol=cut) @ matrix
        S = _svd_parts(ops, A.detach(), False)[1]
        s = S.numpy()
        rank = (s > cut * s[..., :1]).sum(-1) if s.shape[-1] else numpy.zeros(s.shape[:-1], numpy.int64)
        residuals = A.new_zeros(0)
        if m > n and driver != "gelsy" and (rank == n).all():
            residuals = ((A.detach() @ solution.detach() - matrix.detach()) ** 2).sum(-2)
        return LstsqResult(
            solution.squeeze(-1) if vector else solution,
            residuals,
            A.new_tensor(rank if driver != "gels" else numpy.zeros(0), dtype=numpy.int64),
            S if driver in ("gelsd", "gelss") else A.new_zeros(0),
        )

    def singular_norm(A, ord, dim, keepdim):
        """matrix_norm's ord 2, -2 and 'nuc': the largest, smallest or sum of the singular values over dim."""
        rows, cols = (d % A.ndim for d in dim)
        S = _svd_parts(ops, A.movedim((rows, cols), (-2, -1)), False)[1]
        out = S.amax(-1) if ord == 2 else S.amin(-1) if ord == -2 else S.sum(-1)
        return out.unsqueeze(min(rows, cols)).unsqueeze(max(rows, cols)) if keepdim else out

    def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
        """The singular values above max(atol, rtol * the largest) (pinv's tolerance), counted."""
        S = _svd_parts(ops, A.detach(), False)[1]
        atol = tol if atol is None else atol
        if rtol is None:
            rtol = numpy.finfo(A.dtype).eps * max(A.shape[-2:]) if not atol else 0.0
        return (S > (S[..., :1] * rtol).clamp(min=float(atol or 0.0))).sum(-1)

    def cond(A, p=None):
        """The ratio of the extreme singular values (p None, 2, -2), else norm(A, p) * norm(inv(A), p)."""
        if p in (None, 2, -2):
            S = _svd_parts(ops, A, False)[1]
            return S[..., 0] / S[..., -1] if p != -2 else S[..., -1] / S[..., 0]
        return ops["linalg"].matrix_norm(A, p) * ops["linalg"].matrix_norm(ops["inv"](A), p)

    return {
        "matrix_rank": matrix_rank,
        "cond": cond,
        "eigh": eigh,
        "eigvalsh": lambda A, UPLO="L": eigh(A, UPLO).eigenvalues,
        "svd": svd,
        "svdvals": lambda A, *, driver=None: _named(_svd_parts(ops, A, False)[1:2], "LinalgSvdBackward0")[0],
        "qr": lambda A, mode="reduced": _qr(ops, A, mode),
        "pinv": pinv,
        "lstsq": lstsq,
        "singular_norm": singular_norm,
    }
