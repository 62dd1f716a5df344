"""`torch.linalg` and the matrix functions of `torch` (`slogdet`, `logdet`, `cross`, `matrix_power`, `matrix_exp`), composed
from the registry's ops (`matmul`, `inv`, `det`, `logabsdet`, `cholesky`, `norm`...) once for both Variables:
`functions(ops)` for the surface (each also a Tensor method), `bind(ns)` for the `linalg` namespace.

`solve` is computed through the inverse (same values to rounding; gradients by the inverse's vjp). The
decompositions are `engine.linalg_decompositions`', `lu`/`lu_factor` Gaussian elimination with LAPACK's pivots
(chosen on the values) written in ops; not here yet: `eig`, `eigvals` (each raises NotImplementedError naming itself).
"""

from __future__ import annotations

import math
import re
from collections import namedtuple
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy

from engine import linalg_decompositions
from engine.dtypes import scalar_name
from engine.linalg_decompositions import _named
from engine.ops.linalg import pivots_of
from engine.shapes import LinAlgError
from engine.tensor_arith import swap_named
from engine.user_warnings import once

if TYPE_CHECKING:
    from engine.surface_types import VariableSurface


class Slogdet(namedtuple("Slogdet", "sign logabsdet")):
    """torch.return_types.slogdet: (sign, logabsdet)."""


# torch.return_types of the `_ex` functions: the result and `info` (0: the engine raises where PyTorch's is not)
INV_EX = namedtuple("linalg_inv_ex", "inverse info")  # type: ignore[name-match]
CHOLESKY_EX = namedtuple("linalg_cholesky_ex", "L info")  # type: ignore[name-match]
SOLVE_EX = namedtuple("linalg_solve_ex", "result info")  # type: ignore[name-match]
LU = namedtuple("linalg_lu", "P L U")  # type: ignore[name-match]
LU_FACTOR = namedtuple("linalg_lu_factor", "LU pivots")  # type: ignore[name-match]
LU_UNPACK = namedtuple("lu_unpack", "P L U")  # type: ignore[name-match]
LU_FACTOR_EX = namedtuple("linalg_lu_factor_ex", "LU pivots info")  # type: ignore[name-match]
TRIANGULAR_SOLVE = namedtuple("triangular_solve", "solution cloned_coefficient")  # type: ignore[name-match]
TRIANGULAR_SOLVE_DEPRECATED = (  # (PyTorch's words, its missing space too)
    "torch.triangular_solve is deprecated in favor of torch.linalg.solve_triangularand will be removed in a future "
    "PyTorch release.\ntorch.linalg.solve_triangular has its arguments reversed and does not return a copy of one of "
    "the inputs.\nX = torch.triangular_solve(B, A).solution\nshould be replaced with\nX = torch.linalg.solve_triangular(A, B)."
)


def _missing(name):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"torch.linalg.{name} is not available in gradserve yet (see the README)")

    refuse.__name__ = name
    return refuse


def _checked(fn, what):
    """`fn`, with NumPy's LinAlgError (a singular or indefinite matrix) as PyTorch's LinAlgError."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LinAlgError as error:  # (the ops' words: inv's and cholesky's are PyTorch's)
            if what in ("solve", "solve_ex"):  # solve's words, with the inv's batch element
                element = (re.findall(r"\(Batch element \d+\): ", str(error)) or [""])[0]
                raise LinAlgError(
                    f"torch.linalg.{what}: {element}The solver failed because the input matrix is singular."
                ) from None
            raise
        except numpy.linalg.LinAlgError as error:
            raise LinAlgError(f"linalg.{what}: {error}") from None

    call.__name__ = what
    return call


def _lu_solve_values(a, b):
    """X of A X = B by LAPACK's getrf and getrs, dividing by a zero pivot as they do (the values `solve_ex` and
    `inv_ex` return for a singular A: infs and NaNs); float64 arrays [n, n], [n, k]."""
    rows = pivots_of(a, "linalg.solve_ex")[0]
    lu, x = a[rows].copy(), b[rows].copy()
    n = len(lu)
    with numpy.errstate(divide="ignore", invalid="ignore"):
        for j in range(n - 1):
            pivot = lu[j, j] if lu[j, j] != 0 else 1.0
            lu[j + 1 :, j] /= pivot
            lu[j + 1 :, j + 1 :] -= numpy.outer(lu[j + 1 :, j], lu[j, j + 1 :])
            x[j + 1 :] -= numpy.outer(lu[j + 1 :, j], x[j])
        for j in range(n - 1, -1, -1):
            x[j] = (x[j] - lu[j, j + 1 :] @ x[j + 1 :]) / lu[j, j]
    return x


def _potf2(a):
    """LAPACK potf2's lower factor of `a` (its lower triangle), stopping at the first non-positive pivot as it
    does (left in place, the rest of `a` as given): (L, info)."""
    a = numpy.tril(a)
    for j in range(len(a)):
        pivot = a[j, j] - a[j, :j] @ a[j, :j]
        if not pivot > 0:
            a[j, j] = pivot
            return a, j + 1
        a[j, j] = math.sqrt(pivot)
        a[j + 1 :, j] = (a[j + 1 :, j] - a[j + 1 :, :j] @ a[j, :j]) / a[j, j]
    return a, 0


CHOLESKY_DEPRECATED = (
    "torch.cholesky is deprecated in favor of torch.linalg.cholesky and will be removed in a future PyTorch release.\n"
    "L = torch.cholesky(A)\nshould be replaced with\nL = torch.linalg.cholesky(A)\nand\n"
    "U = torch.cholesky(A, upper=True)\nshould be replaced with\nU = torch.linalg.cholesky(A).mH\n"
    "This transform will produce equivalent results for all valid (symmetric positive definite) inputs."
)


def _worded(name, fn, *args):
    """`fn(*args)`, a refusal of the `linalg.` op it calls worded as PyTorch's `name` (`cholesky: ...`)."""
    try:
        return fn(*args)
    except RuntimeError as error:
        message = str(error)
        if not message.startswith("linalg."):
            raise
        raise type(error)(name + message[message.index(":") :]) from None


def functions(ops) -> dict:
    def slogdet(input: VariableSurface) -> tuple[VariableSurface, VariableSurface]:
        """(sign, logabsdet): the sign has no gradient."""
        logabsdet = ops["logabsdet"](input)  # (first: a refusal words slogdet's)
        return Slogdet(ops["det"](input.detach()).sign(), logabsdet)

    def logdet(input: VariableSurface) -> VariableSurface:
        """log det: NaN where the determinant is negative."""
        sign = _worded("logdet", ops["det"], input.detach()).sign()
        return ops["where"](sign < 0, math.nan, ops["where"](sign == 0, -math.inf, ops["logabsdet"](input)))

    def cross(input: VariableSurface, other: VariableSurface, dim: int = -1) -> VariableSurface:
        input, other = (t.expand(*_shape(input, other)) for t in (input, other))
        if input.shape[dim] != 3:
            raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[dim]}")
        a = [input.select(dim, i) for i in range(3)]
        b = [other.select(dim, i) for i in range(3)]
        parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
        return ops["stack"](parts, dim=dim)

    def matrix_power(input: VariableSurface, n: int) -> VariableSurface:
        if input.ndim < 2 or input.shape[-1] != input.shape[-2]:
            raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, got {list(input.shape)}")
        if n == 0:
            return input.new_ones(input.shape[:-1]).diag_embed()
        base = ops["inv"](input) if n < 0 else input
        result: Any = None
        for bit in bin(abs(n))[2:]:  # square and multiply, most significant bit first
            result = None if result is None else result @ result
            if bit == "1":
                result = base if result is None else result @ base
        return result

    def matrix_exp(input: VariableSurface) -> VariableSurface:
        """exp of each square matrix by scaling and squaring: the Taylor polynomial (degree 24 in float64, 18
        otherwise: below rounding at norm 2) of A / 2^s by Horner's rule, squared s times, s per matrix from
        its 1-norm; differentiable as the matmuls it is."""
        if input.ndim < 2:
            raise RuntimeError("linalg.matrix_exp: The input tensor A must have at least 2 dimensions.")
        if input.shape[-1] != input.shape[-2]:
            shape = f"{input.shape[-2]} by {input.shape[-1]}"
            raise RuntimeError(
                f"linalg.matrix_exp: A must be batches of square matrices, but they are {shape} matrices"
            )
        squarings = numpy.maximum(numpy.frexp(input.detach().abs().sum(-2).amax(-1).numpy() / 2)[1], 0)[..., None, None]
        scaled, eye = (
            input * input.new_tensor(numpy.ldexp(1.0, -squarings)),
            input.new_ones(input.shape[:-1]).diag_embed(),
        )
        result = eye
        for j in range(24 if input.dtype == numpy.float64 else 18, 0, -1):
            result = eye + (scaled @ result) / j
        counts = input.new_tensor(squarings)
        for k in range(int(squarings.max(initial=0))):
            result = result @ result if (squarings > k).all() else ops["where"](counts > k, result @ result, result)
        return result

    def cholesky_solve(input: VariableSurface, input2: VariableSurface, upper: bool = False) -> VariableSurface:
        """X of A X = input, A = L L^T from its Cholesky factor input2 (U^T U when upper), as a solve of that product."""
        if input.ndim < 2:
            raise RuntimeError(f"b should have at least 2 dimensions, but has {input.ndim} dimensions instead")
        A = input2.mT @ input2 if upper else input2 @ input2.mT
        return swap_named(ops["inv"](A) @ input, "CholeskySolveBackward0")

    def cholesky(input: VariableSurface, upper: bool = False) -> VariableSurface:
        """The old spelling: torch.linalg.cholesky's factor (its transpose when upper), refusals worded `cholesky:`."""
        once(CHOLESKY_DEPRECATED)
        lower = _worded("cholesky", ops["cholesky"], input)
        return swap_named(lower.mT if upper else lower, "CholeskyBackward0")

    def cholesky_inverse(input: VariableSurface, upper: bool = False) -> VariableSurface:
        """The inverse of A = L L^T (U^T U when upper) from its Cholesky factor, as the inverse of that product."""
        factor = input.triu() if upper else input.tril()
        return swap_named(ops["inv"](factor.mT @ factor if upper else factor @ factor.mT), "CholeskyInverseBackward0")

    cholesky.op = ops["cholesky"]  # type: ignore[attr-defined]  # (linalg.cholesky's)
    return {
        **linalg_decompositions.functions(ops),
        "cholesky": cholesky,
        "cholesky_solve": cholesky_solve,
        "cholesky_inverse": cholesky_inverse,
        "slogdet": slogdet,
        "logdet": logdet,
        "cross": cross,
        "matrix_power": matrix_power,
        "matrix_exp": matrix_exp,
    }


def _shape(a, b) -> tuple:
    return tuple(numpy.broadcast_shapes(tuple(a.shape), tuple(b.shape)))


def bind(ns) -> dict:
    """`linalg` for package `ns` (its functions are the package's, bound by `functions` and the registry)."""
    decompositions = linalg_decompositions.linalg(vars(ns))
    singular_norm = decompositions.pop("singular_norm")

    def floating(name, x):
        if not x.is_floating_point():
            raise RuntimeError(
                f"{name}: Expected a floating point or complex tensor as input. Got {scalar_name(x.dtype)}"
            )

    def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
        floating("linalg.vector_norm", x)
        x = x if dtype is None else x.to(dtype)
        if ord == math.inf:
            return x.abs().amax(dim, keepdim) if dim is not None else x.abs().amax()
        if ord == -math.inf:
            return x.abs().amin(dim, keepdim) if dim is not None else x.abs().amin()
        if ord == 0:
            count = (x != 0).type_as(x)
            return count.sum(dim, keepdim) if dim is not None else count.sum()
        if dim is None:
            x, dim = x.reshape(-1), 0
        return ns.norm(x, float(ord), dim=dim, keepdim=keepdim)

    def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
        floating("linalg.matrix_norm", A)
        A = A if dtype is None else A.to(dtype)
        rows, cols = (d % A.ndim for d in dim)
        if ord == "fro":
            return vector_norm(A, 2, (rows, cols), keepdim)
        if ord in (1, -1, math.inf, -math.inf):
            summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
            sums = A.abs().sum(summed, keepdim=True)
            reduced = sums.amax(other, keepdim=True) if ord > 0 else sums.amin(other, keepdim=True)
            return reduced if keepdim else reduced.squeeze(max(rows, cols)).squeeze(min(rows, cols))
        if ord in (2, -2, "nuc"):
            return singular_norm(A, ord, (rows, cols), keepdim)
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")

    def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
        if isinstance(ord, str) or (dim is not None and not isinstance(dim, int) and len(dim) == 2):
            return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)
        if ord is not None and dim is None and A.ndim == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)

    def solve(A, B, *, left=True):
        if not left:
            return solve(A.mT, B.mT).mT
        if B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1])):  # a batch of vectors
            return (ns.inv(A) @ B.unsqueeze(-1)).squeeze(-1)
        return ns.inv(A) @ B

    def cholesky(A, *, upper=False):
        lower = ns.cholesky.op(A)
        return lower.mT if upper else lower

    def multi_dot(tensors):
        result = tensors[0]
        for t in tensors[1:]:
            result = result @ t
        return result

    def vecdot(x, y, *, dim=-1):
        return (x * y).sum(dim)

    def householder_product(A, tau):
        """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i column i of A below a 1 on the
        diagonal (LAPACK's orgqr), composed."""
        if A.ndim < 2:
            raise RuntimeError("torch.linalg.householder_product: input must have at least 2 dimensions.")
        m, n = A.shape[-2:]
        if m < n or n < tau.shape[-1]:
            which = (
                "input.shape[-2] must be greater than or equal to input.shape[-1]"
                if m < n
                else ("input.shape[-1] must be greater than or equal to tau.shape[-1]")
            )
            raise RuntimeError(f"torch.linalg.householder_product: {which}")
        reflectors = A.tril(-1) + ns.eye(m, n, dtype=A.dtype)
        Q = ns.eye(m, dtype=A.dtype).expand(*A.shape[:-2], m, m)
        for i in range(tau.shape[-1]):
            v = reflectors[..., i : i + 1]
            Q = Q - (Q @ v) @ (v * tau[..., i : i + 1, None]).mT
        return Q[..., :n]

    def vander(x, *, N=None):
        """Columns x ** 0, ..., x ** (N - 1) of each row of x, as PyTorch's (cumprod: exact gradients at zero)."""
        N = x.shape[-1] if N is None and x.ndim else N
        if N is None or N <= 1:
            raise RuntimeError("N must be greater than 1.")
        ones = ns.ones_like(x).unsqueeze(-1)
        return ns.cat([ones, x.unsqueeze(-1).expand(*x.shape, N - 1)], -1).cumprod(-1)

    def _lu(A, pivot, name):
        """(P, L, U, pivots, info): Gaussian elimination of P^T A, written in ops (its gradient is PyTorch's)."""
        if not pivot:
            raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
        if A.ndim >= 2 and not A.is_floating_point():
            raise NotImplementedError(f'"lu_cpu" not implemented for {scalar_name(A.dtype)!r}')
        rows, pivots, info = pivots_of(A.detach().numpy(), name)
        m, n = A.shape[-2:]
        order = A.new_tensor(rows, dtype=numpy.int64)
        M, columns, lines = A.gather(-2, order.unsqueeze(-1).expand(*A.shape)), [], []
        for j in range(min(m, n)):
            pivot = M[..., j : j + 1, j : j + 1]
            column = M[..., j : j + 1] / ns.where(pivot == 0, 1.0, pivot)
            columns.append(column)
            lines.append(M[..., j : j + 1, :])
            M = M - column * lines[-1]
        P = ns.nn.functional.one_hot(order, m).to(A.dtype).mT
        int32 = {"dtype": numpy.int32}
        return (
            P,
            ns.cat(columns, -1).tril(),
            ns.cat(lines, -2).triu(),
            A.new_tensor(pivots, **int32),
            A.new_tensor(info, **int32),
        )

    def lu(A, *, pivot=True):
        return _named(LU(*_lu(A, pivot, "linalg.lu")[:3]), "LinalgLuBackward0")

    def _compact(L, U):
        m, n = L.shape[-2], U.shape[-1]
        if m >= n:
            return L.tril(-1) + ns.cat([U, U.new_zeros((*U.shape[:-2], m - n, n))], -2)
        return U + ns.cat([L.tril(-1), L.new_zeros((*L.shape[:-2], m, n - m))], -1)

    def lu_factor_ex(A, *, pivot=True, check_errors=False):
        _, L, U, pivots, info = _lu(A, pivot, "torch.lu_factor")
        return LU_FACTOR_EX(swap_named(_compact(L, U), "LinalgLuFactorExBackward0"), pivots, info)

    def lu_factor(A, *, pivot=True):
        LU, pivots, info = lu_factor_ex(A, pivot=pivot)
        if (info > 0).any():
            i = int(info[info > 0][0])
            raise RuntimeError(
                f"torch.linalg.lu_factor: U[{i},{i}] is zero and using it on lu_solve would result in a division by "
                "zero. If you still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
                "linalg.lu_factor_ex(A, pivot)"
            )
        return LU_FACTOR(LU, pivots)

    def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
        """A X = B (X A = B when not left; A^T for A when adjoint) for A = P L U, as a solve of that product."""
        if LU.ndim < 2 or LU.shape[-1] != LU.shape[-2]:
            m, n = LU.shape[-2:] if LU.ndim >= 2 else (LU.shape[-1], 1)
            raise RuntimeError(
                f"torch.linalg.lu_solve: A must be batches of square matrices, but they are {m} by {n} matrices"
            )
        P, L, U = lu_unpack(LU, pivots)
        A = P @ L @ U
        return swap_named(solve(A.mT if adjoint else A, B, left=left), "LinalgLuSolveBackward0")

    def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
        """(P, L, U) of A = P L U from lu_factor's compact LU and LAPACK's 1-based row swaps."""
        m, k = LU_data.shape[-2], LU_pivots.shape[-1]
        P, L, U = LU_data.new_zeros(0), LU_data.reshape(-1)[:0], LU_data.reshape(-1)[:0]
        if unpack_pivots:
            rows = numpy.tile(numpy.arange(m), (*LU_pivots.shape[:-1], 1))
            for j, p in enumerate(numpy.moveaxis(LU_pivots.numpy() - 1, -1, 0)):
                at = numpy.indices(p.shape)
                rows[(*at, j)], rows[(*at, p)] = rows[(*at, p)], rows[(*at, j)].copy()
            P = ns.nn.functional.one_hot(LU_data.new_tensor(rows, dtype=numpy.int64), m).to(LU_data.dtype).mT
        if unpack_data:
            L = LU_data[..., :k].tril(-1) + ns.eye(m, k, dtype=LU_data.dtype)
            U = LU_data[..., :k, :].triu()
        return LU_UNPACK(P, *(swap_named(t, "LuUnpackBackward0") for t in (L, U)))

    def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
        """X of A X = B (X A = B when not left) reading A's upper or lower triangle (a unit diagonal when
        unitriangular), as the solve of that triangular matrix."""
        if B.ndim < 2:
            raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
        _square("linalg.solve_triangular: ", A)
        if A.shape[-1] != B.shape[-2 if left else -1]:
            raise RuntimeError(
                f"linalg.solve_triangular: Incompatible shapes of A and B for the equation {'AX' if left else 'XA'} = B"
                f" ({A.shape[-2]}x{A.shape[-1]} and {B.shape[-2]}x{B.shape[-1]})"
            )
        B = B if B.dtype == A.dtype else B.to(A.dtype)  # (PyTorch casts B to A's dtype, even a narrower one)
        T = A.triu(int(unitriangular)) if upper else A.tril(-int(unitriangular))
        T = T + ns.eye(A.shape[-1], dtype=A.dtype) if unitriangular else T
        X = _substituted(T, B, upper) if left else _substituted(T.mT, B.mT, not upper).mT  # (X A = B: A^T X^T = B^T)
        return swap_named(X, "LinalgSolveTriangularBackward0")

    def triangular_solve(input, A, upper=True, transpose=False, unitriangular=False):
        """The old spelling, arguments reversed: (X of A X = input, A^T X = input when transpose; A's copy broadcast
        to X's batch), as solve_triangular of A (of A^T, its other triangle, when transpose)."""
        once(TRIANGULAR_SOLVE_DEPRECATED)
        for name, x in (("b", input), ("A", A)):
            if x.ndim < 2:
                raise RuntimeError(
                    f"torch.triangular_solve: Expected {name} to have at least 2 dimensions, but it has {x.ndim} "
                    "dimensions instead"
                )
        if input.dtype != A.dtype:
            raise RuntimeError(
                f"Expected b and A to have the same dtype, but found b of type {scalar_name(input.dtype)} and A of "
                f"type {scalar_name(A.dtype)} instead."
            )
        _square("", A)
        if A.shape[-1] != input.shape[-2]:
            raise RuntimeError(
                f"Incompatible matrix sizes for triangular_solve: each A matrix is {A.shape[-2]} by {A.shape[-1]} but "
                f"each b matrix is {input.shape[-2]} by {input.shape[-1]}"
            )
        X = solve_triangular(A.mT if transpose else A, input, upper=upper != transpose, unitriangular=unitriangular)
        copy = A.expand(*X.shape[:-2], *A.shape[-2:]).clone()
        return TRIANGULAR_SOLVE(*(swap_named(t, "TriangularSolveBackward0") for t in (X, copy)))

    def _square(where, A):
        if A.shape[-1] != A.shape[-2]:
            raise RuntimeError(
                f"{where}A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} matrices"
            )

    def _substituted(T, B, upper):
        """X of T X = B by substitution, a row of X at a time (from the last when upper), as LAPACK's trsm: a zero on
        T's diagonal gives PyTorch's infs and NaNs, not a refusal."""
        rows: dict[int, Any] = {}
        for i in range(T.shape[-1] - 1, -1, -1) if upper else range(T.shape[-1]):
            b, solved = B[..., i : i + 1, :], sorted(rows)
            if solved:
                b = b - T[..., i : i + 1, solved[0] : solved[-1] + 1] @ ns.cat([rows[j] for j in solved], -2)
            rows[i] = b / T[..., i : i + 1, i : i + 1]
        return ns.cat([rows[i] for i in sorted(rows)], -2) if rows else solve(T, B)

    def tensorinv(A, ind=2):
        """The inverse of A read as a matrix of its first `ind` dimensions by the rest."""
        if ind <= 0:
            raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
        rows, columns = A.shape[:ind], A.shape[ind:]
        if math.prod(rows) != math.prod(columns):
            raise RuntimeError(
                "Expected self to satisfy the requirement prod(self.shape[ind:]) == prod(self.shape[:ind]), but got "
                f"{math.prod(columns)} != {math.prod(rows)}"
            )
        return ns.inv(A.reshape(math.prod(rows), -1)).reshape(*columns, *rows)

    def tensorsolve(A, B, dims=None):
        """X with tensordot(A, X, X.ndim) = B: A's `dims` moved last, A read as a matrix of B's dimensions by X's."""
        if dims is not None:
            A = A.movedim(list(dims), list(range(A.ndim - len(dims), A.ndim)))
        rows, columns = A.shape[: B.ndim], A.shape[B.ndim :]
        if math.prod(rows) != math.prod(columns):
            raise RuntimeError(
                "Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
                f"prod(self.shape[:other.ndim]), but got {math.prod(columns)} != {math.prod(rows)}"
            )
        return (ns.inv(A.reshape(math.prod(rows), -1)) @ B.reshape(-1)).reshape(columns)

    def _ex(kind, name, compute, A, check_errors, *others):
        """(result, info) of `compute` (inv, cholesky, solve), which refuses a singular or indefinite matrix: the
        values and info LAPACK leaves for those matrices (`_failed_values`); check_errors raises as `name`."""
        try:
            return kind(compute(A, *others), A.new_zeros(A.shape[:-2]).int())
        except LinAlgError as error:
            if check_errors:
                raise LinAlgError(re.sub(r"^(torch\.)?linalg\.\w+:", f"\\1linalg.{name}:", str(error))) from None
        values, info = _failed_values(name, A.detach().numpy(), *(o.detach().numpy() for o in others))
        failed = A.new_tensor(info > 0, dtype=numpy.bool_)
        mask = failed.reshape(*failed.shape, *[1] * (values.ndim - failed.ndim))
        good = compute(ns.where(failed[..., None, None], ns.eye(A.shape[-1], dtype=A.dtype), A), *others)
        return kind(ns.where(mask, A.new_tensor(values), good), A.new_tensor(info, dtype=numpy.int32))

    def _cholesky_ex(A, upper, check_errors):
        L, info = _ex(CHOLESKY_EX, "cholesky_ex", ns.cholesky.op, A, check_errors)
        return CHOLESKY_EX(L.mT if upper else L, info)

    def _solve_ex(A, B, left, check_errors):
        if not left:
            X, info = _ex(SOLVE_EX, "solve_ex", solve, A.mT, check_errors, B.mT)
            return SOLVE_EX(X.mT, info)
        return _ex(SOLVE_EX, "solve_ex", solve, A, check_errors, B)

    def _failed_values(name, a, b=None):
        flat, info = a.reshape(-1, *a.shape[-2:]).astype(numpy.float64), []
        if name == "cholesky_ex":
            values, info = zip(*(_potf2(m) for m in flat))
        else:
            eye = numpy.eye(a.shape[-1])
            vector = b is not None and (b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]))
            b = eye if b is None else b[..., None] if vector else b
            rhs = numpy.broadcast_to(b, (*a.shape[:-2], *b.shape[-2:])).reshape(len(flat), *b.shape[-2:])
            values = [_lu_solve_values(m, r) for m, r in zip(flat, rhs)]
            info = pivots_of(a, name)[2].reshape(-1)
            values = [v[..., 0] if vector else v for v in values]
        values = numpy.stack(values).reshape(*a.shape[:-2], *values[0].shape).astype(a.dtype)
        return values, numpy.asarray(info, numpy.int32).reshape(a.shape[:-2])

    names: dict[str, Any] = {
        **decompositions,
        "norm": norm,
        "vector_norm": vector_norm,
        "matrix_norm": matrix_norm,
        "inv": ns.inv,
        "inv_ex": lambda A, *, check_errors=False: _ex(INV_EX, "inv_ex", ns.inv, A, check_errors),
        "cholesky_ex": lambda A, *, upper=False, check_errors=False: _cholesky_ex(A, upper, check_errors),
        "solve_ex": lambda A, B, *, left=True, check_errors=False: _solve_ex(A, B, left, check_errors),
        "det": ns.det,
        "slogdet": ns.slogdet,
        "solve": solve,
        "cholesky": cholesky,
        "cross": ns.cross,
        "matrix_power": ns.matrix_power,
        "matrix_exp": ns.matrix_exp,
        "householder_product": householder_product,
        "multi_dot": multi_dot,
        "vecdot": vecdot,
        "vander": vander,
        "matmul": ns.matmul,
        "lu": lu,
        "lu_factor": lu_factor,
        "lu_factor_ex": lu_factor_ex,
        "lu_solve": lu_solve,
        "solve_triangular": solve_triangular,
        "tensorinv": tensorinv,
        "tensorsolve": tensorsolve,
        "diagonal": lambda A, *, offset=0, dim1=-2, dim2=-1: A.diagonal(offset, dim1, dim2),
    }

    def chain_matmul(*matrices):
        once(
            "torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
            "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than multiple parameters."
        )
        if not matrices:
            raise RuntimeError("chain_matmul(): Expected one or more matrices")
        return multi_dot(matrices)

    checked = {name: _checked(fn, name) for name, fn in names.items()}
    for name in ("eig", "eigvals"):
        checked[name] = _missing(name)
    linalg = SimpleNamespace(**checked, LinAlgError=LinAlgError)
    return dict(linalg=linalg, chain_matmul=chain_matmul, lu_unpack=lu_unpack, triangular_solve=triangular_solve)
