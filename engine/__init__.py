"""gradserve's engine: define-by-run reverse-mode autograd with PyTorch's Variable semantics."""

from engine import backend, ops  # noqa: F401  (importing ops fills the registry)
from engine import compat as _compat
from engine import factory as _factory
from engine.autograd import grad
from engine.factory import (
    arange,
    full,
    manual_seed,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from engine.function import Function
from engine.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from engine.gradcheck import GradcheckError, gradcheck, gradgradcheck
from engine.ops.reduction import max, min
from engine.registry import OPS
from engine.registry import F as _F
from engine.variable import Variable

globals().update({name: getattr(_F, name) for name in OPS})
_PYTORCH03 = _compat.install(Variable, _factory._engine, lambda v, dtype: _F.cast(v, dtype=dtype))
globals().update(_PYTORCH03)

__all__ = [
    "Variable", "Function", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "gradcheck", "gradgradcheck", "GradcheckError", "OPS", "backend", "max", "min",
    "tensor", "zeros", "ones", "full", "randn", "rand", "arange", "zeros_like", "ones_like", "manual_seed",
    *sorted(_PYTORCH03), *sorted(OPS),
]
