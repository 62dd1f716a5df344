"""gradserve's engine: define-by-run reverse-mode autograd with PyTorch's Variable semantics.

Importing it fills the op registry (`engine.ops`) and installs the Variable surface
(`engine.surface`, through the engine's side `engine.eager`) on `engine.Variable`.
"""

import sys
from typing import TYPE_CHECKING

from engine import backend, ops  # noqa: F401  (importing ops fills the registry)
from engine import eager as _eager
from engine import surface as _surface
from engine.autograd import grad
from engine.function import Function
from engine.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from engine.gradcheck import GradcheckError, gradcheck, gradgradcheck
from engine.registry import OPS
from engine.saving import loader, save
from engine.variable import Variable

if TYPE_CHECKING:  # what engine.surface installs below (`engine.exp`, `engine.zeros`...), declared for type checkers
    from engine._surface import *  # noqa: F403

_SURFACE = _surface.install(_eager.SIDE)
_eager.direct_methods()
globals().update(_SURFACE)

# torch.nn and torch.optim (they need the names above), torch.autograd's other names and torch.func
from engine import autograd, forward_ad, func, nn, optim  # noqa: E402,F401
from engine.autograd_functional import Functional  # noqa: E402
from engine.nn import stateless  # noqa: E402,F401
from engine.optim import averaging  # noqa: E402

# torch.optim.swa_utils, its AveragedModel an engine nn.Module
optim.swa_utils = averaging.bind(nn)

# torch.autograd.functional on the names above, and torch.autograd's other names
autograd.functional = Functional(sys.modules[__name__])  # type: ignore[attr-defined,no-untyped-call]
autograd.forward_ad = forward_ad  # type: ignore[attr-defined]
func.functional_call = nn.stateless.functional_call  # type: ignore[attr-defined]
func.stack_module_state = nn.stateless.stack_module_state  # type: ignore[attr-defined]
func.replace_all_batch_norm_modules_ = nn.stateless.replace_all_batch_norm_modules_  # type: ignore[attr-defined]
vmap = func.vmap  # torch.vmap
autograd.gradcheck, autograd.gradgradcheck = gradcheck, gradgradcheck  # type: ignore[attr-defined]
autograd.no_grad, autograd.enable_grad, autograd.inference_mode = no_grad, enable_grad, _SURFACE["inference_mode"]  # type: ignore
autograd.set_grad_enabled = set_grad_enabled  # type: ignore[attr-defined]  # torch.autograd.grad_mode's names
from engine import anomaly_mode  # noqa: E402

for _name in anomaly_mode.NAMES:  # torch.autograd.detect_anomaly...; torch.is_anomaly_enabled...
    setattr(autograd, _name.__name__, _name)
is_anomaly_enabled, is_anomaly_check_nan_enabled = (
    anomaly_mode.is_anomaly_enabled,
    anomaly_mode.is_anomaly_check_nan_enabled,
)
autograd.anomaly_mode = anomaly_mode  # type: ignore[attr-defined]
from engine import autograd_graph  # noqa: E402

autograd.graph = autograd_graph.namespace()  # type: ignore[attr-defined]
from engine import profiling  # noqa: E402

profiler, autograd.profiler = profiling.namespace(observe_ops=True)  # type: ignore[attr-defined]

__all__ = [
    "Variable",
    "Function",
    "save",
    "load",
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


# torch.utils.data, bound to this namespace now that it is complete
from engine import utils  # noqa: E402
from engine.nn import checkpoint as _checkpoint  # noqa: E402  (torch.utils.checkpoint, on nn's side lookup)
from engine.utils import loading  # noqa: E402

_DATA = loading.bind(sys.modules[__name__], "engine.utils.data")
vars(utils.data).update(_DATA, __all__=sorted(_DATA))
utils.checkpoint = _checkpoint  # type: ignore[attr-defined]
load = loader(sys.modules[__name__])

# torch.autocast, torch.amp and their older spellings (torch.cpu.amp, torch.cuda.amp)
from engine import mixed_precision  # noqa: E402

globals().update(mixed_precision.bind(sys.modules[__name__]))

# torch.compile, torch.backends, thread counts, print options, type promotion, torch.testing.assert_close
from engine import runtime  # noqa: E402

globals().update(runtime.bind(sys.modules[__name__]))

# torch.distributions
from engine import distribution_families  # noqa: E402

distributions = distribution_families.bind(sys.modules[__name__])

# torch.special (what composes from the registry's ops)
from engine import special_functions  # noqa: E402

special = special_functions.bind(sys.modules[__name__])

# torch.linalg
from engine import linalg_functions  # noqa: E402

globals().update(linalg_functions.bind(sys.modules[__name__]))

# torch.fft (its real transforms; a spectrum is a ComplexView), torch.view_as_real and torch.view_as_complex
from engine import fft_functions  # noqa: E402

globals().update(fft_functions.bind(sys.modules[__name__]))

# torch's module paths (`import engine.autograd.forward_ad`, `from engine.distributions import Normal`)
from engine import module_paths  # noqa: E402

module_paths.bind(sys.modules[__name__])
