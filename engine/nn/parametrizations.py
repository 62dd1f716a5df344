"""`torch.nn.utils.parametrizations.weight_norm`, on `engine.nn.parametrize`: the weight as g * v / ||v||, g and v
the originals (`parametrizations.weight.original0` and `original1`, as PyTorch names them), norms over every
dimension but `dim` (all of them for `dim=None`)."""

from __future__ import annotations

from engine.nn import parametrize
from engine.nn.sides import _ns


def _norm_except_dim(v, dim):
    """The 2-norm of `v` over every dimension but `dim`, shaped to broadcast against it (`dim=-1`: all)."""
    if dim == -1:
        return v.norm()
    moved = v.transpose(0, dim) if dim else v
    norms = moved.reshape(moved.shape[0], -1).norm(dim=1)
    return norms.reshape(tuple(v.shape[d] if d == dim else 1 for d in range(v.ndim)))


def _weight_norm_class(nn):
    made = getattr(nn, "_WeightNorm", None)
    if made is None:

        class _WeightNorm(nn.Module):
            def __init__(self, dim=0):
                super().__init__()
                self.dim = -1 if dim is None else dim

            def forward(self, weight_g, weight_v):
                return weight_v * (weight_g / _norm_except_dim(weight_v, self.dim))

            def right_inverse(self, weight):
                return _norm_except_dim(weight, self.dim), weight

        made = nn._WeightNorm = _WeightNorm
    return made


def weight_norm(module, name="weight", dim=0):
    """Reparametrize `module.<name>` by its magnitude and direction (see the module docstring)."""
    nn = _ns(getattr(module, name)).nn
    return parametrize.register_parametrization(module, name, _weight_norm_class(nn)(dim), unsafe=True)


__all__ = ["weight_norm"]
