"""`torch.nn.utils.parametrizations` on `engine.nn.parametrize`, written once for every Variable class, as
PyTorch's (the same originals, buffers and state-dict names):
- `weight_norm`: the weight as g * v / ||v||, g and v the originals (`original0`, `original1`), norms over every
  dimension but `dim` (all of them for `dim=None`);
- `orthogonal`: the weight an orthogonal matrix (orthonormal columns, or rows when wide; batches too) by the
  matrix exponential or the Cayley map of a skew-symmetric matrix, or a product of Householder reflectors; with
  `use_trivialization` a `base` buffer is the orthogonal matrix the map moves from (set by right_inverse: the
  weight's Q, its QR computed on the values, unrecorded, as PyTorch's is under no_grad);
- `spectral_norm`: the weight divided by its largest singular value, estimated by a power iteration on the
  `_u`/`_v` buffers (each call in training mode; 15 steps when registered)."""

from __future__ import annotations

import enum

import numpy

from engine.nn import parametrize
from engine.nn.init import _q_factor
from engine.nn.sides import _ns

_OrthMaps = enum.Enum("_OrthMaps", "matrix_exp cayley householder")


def _norm_except_dim(v, dim):
    """The 2-norm of `v` over every dimension but `dim`, shaped to broadcast against it (`dim=-1`: all)."""
    if dim == -1:
        return v.norm()
    moved = v.transpose(0, dim) if dim else v
    norms = moved.reshape(moved.shape[0], -1).norm(dim=1)
    return norms.reshape(tuple(v.shape[d] if d == dim else 1 for d in range(v.ndim)))


def _side_class(nn, build):
    """The class `build(nn)` makes for one side's `nn`, made once and kept on it."""
    made = getattr(nn, build.__name__, None)
    if made is None:
        made = build(nn)
        setattr(nn, build.__name__, made)
    return made


def _WeightNorm(nn):
    class _WeightNorm(nn.Module):
        def __init__(self, dim=0):
            super().__init__()
            self.dim = -1 if dim is None else dim

        def forward(self, weight_g, weight_v):
            return weight_v * (weight_g / _norm_except_dim(weight_v, self.dim))

        def right_inverse(self, weight):
            return _norm_except_dim(weight, self.dim), weight

    return _WeightNorm


def weight_norm(module, name="weight", dim=0):
    """Reparametrize `module.<name>` by its magnitude and direction (see the module docstring)."""
    nn = _ns(getattr(module, name)).nn
    return parametrize.register_parametrization(module, name, _side_class(nn, _WeightNorm)(dim), unsafe=True)


def _Orthogonal(nn):
    class _Orthogonal(nn.Module):
        def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
            super().__init__()
            self.shape, self.orthogonal_map = weight.shape, orthogonal_map
            if use_trivialization:
                self.register_buffer("base", None)

        def forward(self, X):
            ns = _ns(X)
            n, k = X.shape[-2:]
            transposed = n < k
            if transposed:
                X, n, k = X.mT, k, n
            if self.orthogonal_map == _OrthMaps.householder:
                A = X.tril(-1)
                Q = ns.linalg.householder_product(A, 2.0 / (1.0 + (A * A).sum(dim=-2)))
                Q = Q * X.diagonal(dim1=-2, dim2=-1).int().to(X.dtype).unsqueeze(-2)  # the diagonal's signs
            else:
                X = X.tril()
                if n != k:
                    X = ns.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
                A = X - X.mT
                if self.orthogonal_map == _OrthMaps.matrix_exp:
                    Q = ns.matrix_exp(A)
                else:
                    Id = ns.eye(n, dtype=A.dtype)
                    Q = ns.linalg.solve(Id - 0.5 * A, Id + 0.5 * A)
                Q = Q[..., :k]
            if hasattr(self, "base"):
                Q = self.base @ Q
            return Q.mT if transposed else Q

        def right_inverse(self, Q):
            if tuple(Q.shape) != tuple(self.shape):
                raise ValueError(
                    f"Expected a matrix or batch of matrices of shape torch.Size({list(self.shape)}). "
                    f"Got a tensor of shape torch.Size({list(Q.shape)})."
                )
            ns, values = _ns(Q), Q.detach().numpy()
            n, k = values.shape[-2:]
            transposed = n < k
            if transposed:
                values, n, k = values.swapaxes(-1, -2), k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map != _OrthMaps.householder:
                    raise NotImplementedError(
                        "It is not possible to assign to the matrix exponential "
                        "or the Cayley parametrizations when use_trivialization=False."
                    )
                reflectors, tau = numpy.linalg.qr(values, mode="raw")  # LAPACK's geqrf, transposed
                diagonal = numpy.sign(numpy.diagonal(reflectors, axis1=-2, axis2=-1)) * numpy.where(tau == 0, -1, 1)
                reflectors[..., range(k), range(k)] = diagonal
                return ns.tensor(reflectors if transposed else reflectors.swapaxes(-1, -2), dtype=Q.dtype)
            eps = 10.0 * n * numpy.finfo(values.dtype).eps
            if n == k and numpy.allclose(values.swapaxes(-1, -2) @ values, numpy.eye(k), rtol=1e-5, atol=eps):
                base = values.copy()
            else:
                if n != k:  # completed into a square matrix by normal columns
                    normal = ns.randn(*values.shape[:-2], n, n - k, dtype=Q.dtype).numpy()
                    values = numpy.concatenate([values, normal], -1)
                base = _q_factor(values)
            self.base = ns.tensor(base, dtype=Q.dtype)
            return ns.tensor(numpy.broadcast_to(-numpy.eye(*Q.shape[-2:]), tuple(Q.shape)), dtype=Q.dtype)

    return _Orthogonal


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Make `module.<name>` an orthogonal matrix (see the module docstring); `orthogonal_map` "matrix_exp" (the
    default for square matrices), "cayley" or "householder" (the default otherwise)."""
    weight = getattr(module, name, None)
    if not module._ns.is_tensor(weight):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(
            f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: {orthogonal_map}'
        )
    orth = _side_class(module._ns.nn, _Orthogonal)(weight, orth_enum, use_trivialization=use_trivialization)
    return parametrize.register_parametrization(module, name, orth, unsafe=True)


def _SpectralNorm(nn):
    F = nn.functional

    class _SpectralNorm(nn.Module):
        def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
            super().__init__()
            ndim = weight.ndim
            if dim >= ndim or dim < -ndim:
                raise IndexError(
                    f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})"
                )
            if n_power_iterations <= 0:
                raise ValueError(
                    f"Expected n_power_iterations to be positive, but got n_power_iterations={n_power_iterations}"
                )
            self.dim, self.eps = dim if dim >= 0 else dim + ndim, eps
            if ndim > 1:
                self.n_power_iterations = n_power_iterations
                weight_mat = self._reshape_weight_to_matrix(weight)
                h, w = weight_mat.shape
                u, v = weight_mat.new_empty(h).normal_(0, 1), weight_mat.new_empty(w).normal_(0, 1)
                self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
                self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
                self._power_method(weight_mat, 15)

        def _reshape_weight_to_matrix(self, weight):
            if self.dim != 0:
                weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
            return weight.flatten(1)

        def _power_method(self, weight_mat, n_power_iterations):
            ns = _ns(weight_mat)
            with ns.no_grad():
                for _ in range(n_power_iterations):
                    F.normalize(ns.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u)
                    F.normalize(ns.mv(weight_mat.mT, self._u), dim=0, eps=self.eps, out=self._v)

        def forward(self, weight):
            if weight.ndim == 1:
                return F.normalize(weight, dim=0, eps=self.eps)
            weight_mat = self._reshape_weight_to_matrix(weight)
            if self.training:
                self._power_method(weight_mat, self.n_power_iterations)
            u, v = self._u.clone(), self._v.clone()  # the values this call saw, whatever the next call does
            return weight / _ns(weight).dot(u, _ns(weight).mv(weight_mat, v))

        def right_inverse(self, value):
            return value

    return _SpectralNorm


def _output_dim(module) -> int:
    """The dimension of a weight's outputs: 1 for a ConvTranspose's, 0 otherwise."""
    nn = module._ns.nn
    return 1 if isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)) else 0


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide `module.<name>` by its spectral norm (see the module docstring)."""
    weight = getattr(module, name, None)
    if not module._ns.is_tensor(weight):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    dim = _output_dim(module) if dim is None else dim
    norm = _side_class(module._ns.nn, _SpectralNorm)(weight, n_power_iterations, dim, eps)
    return parametrize.register_parametrization(module, name, norm)


__all__ = ["orthogonal", "spectral_norm", "weight_norm"]
