"""Matrix products, and the factorizations torch.linalg composes from (inverse, determinant, log |det|,
Cholesky), with vjps written as differentiable ops (PyTorch's formulas; the inverse's where they need one)."""

from __future__ import annotations

import numpy

from engine import backend, costs, shapes
from engine.dtypes import scalar_name
from engine.grad_mode import state as grad_state
from engine.node import FORWARD, RECORDING, _wrap, ndarray
from engine.ops.shape import transposed
from engine.registry import F, Sample, defop, local
from engine.variable import Variable

_result = Variable._result


def _matmul_vjp_x(g, ans, x, y):
    if y.ndim == 1:
        return g.unsqueeze(-1) * y if x.ndim > 1 else g * y
    if x.ndim == 1:
        return F.matmul(g.unsqueeze(-2), y.mT).squeeze(-2)
    return F.matmul(g, y.mT)


def _matmul_vjp_y(g, ans, x, y):
    if x.ndim == 1:
        return x.unsqueeze(-1) * g.unsqueeze(-2) if y.ndim > 1 else g * x
    if y.ndim == 1:
        return F.matmul(x.mT, g.unsqueeze(-1)).squeeze(-1)
    return F.matmul(x.mT, g)


def _product_scratch(in_metas, out_meta, attrs):
    """A batched or 1-d product's vjps build gradients of the broadcast shape (or outer products)
    before summing them down; a 2-d product's are its inputs' own shapes."""
    (x, _), (y, _) = in_metas
    plain = len(x) == len(y) == 2 or (len(x) == len(y) and x[:-2] == y[:-2])
    return costs.temporaries(of="output" if plain else "largest", backward=1 if plain else 2.5)(
        in_metas, out_meta, attrs
    )


def _mm_vjp_x(g, ans, x, y):
    """g @ y.T: with create_graph as mm's own operator (one frame: no method, autocast or coercion layer; its
    inputs are the recorded product's, already cast), else on the arrays (`local`'s work inline where nothing
    records: the HVP's second walk and every backward run it)."""
    if grad_state.enabled or FORWARD:
        return mm.operator(g, transposed(y))
    if RECORDING:
        return local(lambda g, y: g @ y.T, g, y)
    out = g._data @ y._data.T
    return _result(out if type(out) is ndarray else _wrap(out, g._data), None)


def _mm_vjp_y(g, ans, x, y):
    """x.T @ g, as `_mm_vjp_x`."""
    if grad_state.enabled or FORWARD:
        return mm.operator(transposed(x), g)
    if RECORDING:
        return local(lambda x, g: x.T @ g, x, g)
    out = x._data.T @ g._data
    return _result(out if type(out) is ndarray else _wrap(out, g._data), None)


def _mm(x, y):
    if x.ndim != 2 or y.ndim != 2:  # (NumPy's matmul takes them; the shape rule words PyTorch's refusal)
        raise ValueError("mm takes matrices")
    return x @ y


mm = defop(
    "mm",
    _mm,
    _mm_vjp_x,
    _mm_vjp_y,
    takes_xp=False,
    reads=((1,), (0,)),
    samples=(Sample(((3, 4), (4, 2))),),
    infer=shapes.mm,
    work=costs.matrix_product,
    kernel="blas",
    doc="matrix product of two 2-d inputs",
)
matmul = defop(
    "matmul",
    lambda xp, x, y: xp.matmul(x, y),
    _matmul_vjp_x,
    _matmul_vjp_y,
    reads=((1,), (0,)),
    samples=(
        Sample(((3, 4), (4, 2))),
        Sample(((2, 3, 4), (4, 5))),
        Sample(((2, 1, 3, 4), (3, 4, 2))),
        Sample(((4,), (4, 2))),
        Sample(((3, 4), (4,))),
        Sample(((4,), (4,))),
        Sample(((4,), (2, 4, 3))),
    ),
    infer=shapes.matmul,
    work=costs.matrix_product,
    kernel="blas",
    scratch=_product_scratch,
    doc="matrix product with NumPy's broadcasting and 1-d rules",
)


def pivots_of(a, name):
    """LAPACK getrf's row choices for the matrices `a` [..., m, n] (partial pivoting, on the values): the rows of
    A in the order of P^T A, LAPACK's 1-based pivots, and info (the first zero pivot, 1-based; 0: none)."""
    if a.ndim < 2:
        raise RuntimeError(f"{name}: Expected tensor with 2 or more dimensions. Got size: {list(a.shape)} instead")
    m, n = a.shape[-2:]
    work = a.reshape(-1, m, n).copy()
    rows, batch = numpy.tile(numpy.arange(m), (len(work), 1)), numpy.arange(len(work))
    pivots, info = numpy.zeros((len(work), min(m, n)), numpy.int32), numpy.zeros(len(work), numpy.int32)
    for j in range(min(m, n)):
        p = numpy.argmax(abs(work[:, j:, j]), axis=1) + j
        pivots[:, j] = p + 1
        work[batch, j], work[batch, p] = work[batch, p], work[batch, j].copy()
        rows[batch, j], rows[batch, p] = rows[batch, p], rows[batch, j].copy()
        pivot = work[:, j, j]
        info = numpy.where((info == 0) & (pivot == 0), j + 1, info)
        work[:, j + 1 :, j] /= numpy.where(pivot == 0, 1, pivot)[:, None]
        work[:, j + 1 :, j + 1 :] -= work[:, j + 1 :, j, None] * work[:, j, None, j + 1 :]
    batched = a.shape[:-2]
    return rows.reshape(*batched, m), pivots.reshape(*batched, -1), info.reshape(batched)


def _failed(name, what, index, batch_shape):
    """PyTorch's LinAlgError of `name`, `what` failing in matrix `index` of a batch (flat)."""
    where = f"(Batch element {index}): " if batch_shape else ""
    return shapes.LinAlgError(f"{name}: {where}{what}")


def _floating(name, x):
    if x.dtype.kind not in "fc":
        raise shapes.DtypeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {scalar_name(x.dtype)}"
        )


def _inv(xp, x):
    _floating("linalg.inv", x)
    try:
        return xp.linalg.inv(x)
    except numpy.linalg.LinAlgError:
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise  # (the shape rule words it)
        info = pivots_of(backend.to_numpy(x), "linalg.inv")[2].reshape(-1)
        at = int(numpy.flatnonzero(info)[0])
        what = f"The diagonal element {info[at]} is zero, the inversion could not be completed because the input matrix is singular."
        raise _failed("linalg.inv", what, at, x.shape[:-2]) from None


def _cholesky(xp, x):
    _floating("linalg.cholesky", x)
    try:
        return xp.linalg.cholesky((x + x.swapaxes(-1, -2)) / 2)  # reads the symmetric part, as its vjp does
    except numpy.linalg.LinAlgError:
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise
        flat = backend.to_numpy(x).reshape(-1, *x.shape[-2:])
        for at, a in enumerate((a + a.T) / 2 for a in flat):
            for order in range(1, len(a) + 1):
                if numpy.linalg.eigvalsh(a[:order, :order]).min() <= 0:
                    what = "The factorization could not be completed because the input is not positive-definite"
                    detail = f" (the leading minor of order {order} is not positive-definite)."
                    raise _failed("linalg.cholesky", what + detail, at, x.shape[:-2]) from None
        raise


def _batched(g):
    return g.unsqueeze(-1).unsqueeze(-1)


def _phi(x):
    """The lower triangle of x with its diagonal halved (the Cholesky vjp's projection)."""
    return 0.5 * (F.tril(x) + F.tril(x, diagonal=-1))


def _cholesky_vjp(g, ans, x):
    inverse = F.inv(ans)
    s = F.matmul(F.matmul(inverse.mT, _phi(F.matmul(ans.mT, g))), inverse)
    return 0.5 * (s + s.mT)


def _factorization_scratch(in_metas, out_meta, attrs):
    """LAPACK through NumPy works on float64 copies of float32 matrices (the matrix and its result); the
    vjps add the inverse (in float64) and a product of the same size."""
    dtype, n = in_metas[0][1], costs.numel(in_metas[0][0])
    copies = 2 if numpy.dtype(dtype).itemsize < 8 else 0
    return costs.Scratch(forward=copies * 8 * n, backward=2 * 8 * n)


def _cholesky_scratch(in_metas, out_meta, attrs):
    """A factorization's, and the symmetric part it reads (a sum and its half)."""
    scratch = _factorization_scratch(in_metas, out_meta, attrs)
    symmetric = 2 * costs.numel(in_metas[0][0]) * numpy.dtype(in_metas[0][1]).itemsize
    return costs.Scratch(forward=scratch.forward + symmetric, backward=scratch.backward + symmetric)


def _spd_sample(rng):
    a = rng.uniform(-1, 1, (3, 3))
    return [a @ a.T + 3 * numpy.eye(3)]


inv = defop(
    "inv",
    _inv,
    lambda g, ans, x: -F.matmul(F.matmul(ans.mT, g), ans.mT),
    uses_output=True,
    methods=("inverse",),
    samples=(Sample(make=lambda rng: [rng.uniform(-1, 1, (3, 3)) + 3 * numpy.eye(3)]),),
    infer=shapes.square("linalg.inv"),
    work=costs.factorization,
    scratch=_factorization_scratch,
    kernel="blas",
    doc="the inverse of each square matrix (numpy.linalg.LinAlgError when one is singular)",
)


def _det_vjp(g, ans, x):
    """g det(A) A^-T; where a determinant is (near) zero, the cofactors U diag(prod of the other singular values)
    V^T det(U V^T), as PyTorch's create_graph path (its plain backward gives zeros where det is exactly 0)."""
    if not (abs(ans._data) < 100 * numpy.finfo(ans.dtype).eps).any():
        return _batched(g * ans) * F.inv(x).mT
    n = x.shape[-1]
    packed = F.svd_packed(x, full_matrices=False)
    U, S, V = packed[..., :n, :], packed[..., n, :], packed[..., n + 1 :, :]
    rows = S.unsqueeze(-2).expand(*S.shape[:-1], n, n)  # row i: the singular values but S_i, there 1
    others = (rows.tril(-1) + rows.triu(1) + (S.detach() * 0 + 1).diag_embed()).prod(-1)
    sign = (F.det(U.detach()) * F.det(V.detach())).unsqueeze(-1)
    return _batched(g) * F.matmul(U * (others * sign).unsqueeze(-2), V.mT)


det = defop(
    "det",
    lambda xp, x: _floating("linalg.det", x) or xp.linalg.det(x),
    _det_vjp,
    uses_output=True,
    samples=(Sample(make=lambda rng: [rng.uniform(-1, 1, (2, 3, 3)) + 3 * numpy.eye(3)]),),
    infer=shapes.square_to_batch("linalg.det"),
    work=costs.factorization,
    scratch=_factorization_scratch,
    kernel="blas",
    doc="the determinant of each square matrix",
)
logabsdet = defop(
    "logabsdet",
    lambda xp, x: _floating("linalg.slogdet", x) or xp.linalg.slogdet(x)[1],
    lambda g, ans, x: _batched(g) * F.inv(x).mT,
    methods=(),
    samples=(Sample(make=lambda rng: [rng.uniform(-1, 1, (3, 3)) - 3 * numpy.eye(3)]),),
    infer=shapes.square_to_batch("linalg.slogdet"),
    work=costs.factorization,
    scratch=_factorization_scratch,
    kernel="blas",
    doc="log |det| of each square matrix (slogdet's second value)",
)
cholesky = defop(
    "cholesky",
    _cholesky,
    _cholesky_vjp,
    uses_output=True,
    samples=(Sample(make=_spd_sample),),
    infer=shapes.square("linalg.cholesky"),
    work=costs.factorization,
    scratch=_cholesky_scratch,
    kernel="blas",
    doc="the lower Cholesky factor of each symmetric positive-definite matrix",
)
