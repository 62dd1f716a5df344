"""gradserve's engine: define-by-run reverse-mode autograd with PyTorch's Variable semantics.

Importing it fills the op registry (`engine.ops`) and installs the Variable surface
(`engine.surface`, through the engine's side `engine.eager`) on `engine.Variable`.
"""

import sys

from engine import backend, ops  # noqa: F401  (importing ops fills the registry)
from engine import eager as _eager
from engine import surface as _surface
from engine.autograd import grad
from engine.function import Function
from engine.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from engine.gradcheck import GradcheckError, gradcheck, gradgradcheck
from engine.registry import OPS
from engine.variable import Variable

_SURFACE = _surface.install(_eager.SIDE)
globals().update(_SURFACE)

# torch.nn.functional (it needs the names above), torch.autograd's other names and torch.func
from engine import autograd, forward_ad, func, nn  # noqa: E402,F401
from engine.autograd_functional import Functional  # noqa: E402

autograd.functional = Functional(sys.modules[__name__])  # torch.autograd.functional, on the names above
autograd.forward_ad, autograd.gradcheck, autograd.gradgradcheck = forward_ad, gradcheck, gradgradcheck

__all__ = [
    "Variable",
    "Function",
    "grad",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "set_grad_enabled",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "OPS",
    "backend",
    *sorted(_SURFACE),
]
__all__ = _surface.exported(__all__)  # `import *` shadows no builtin (float, int, bool, all, max...)
