"""gradserve's Python client: the engine's Variable API, computed by the gradserve service.

    from client import Variable

    x = Variable(np.ones((2, 2)), requires_grad=True)
    out = ((x + 2) * (x + 2) * 2).mean()   # recorded locally: nothing is sent
    out.backward()                          # one POST /backward
    print(x.grad)                           # 3.0 everywhere

Shapes and shape errors come from the registry's rules, with no request; a value is fetched (one
`/forward`) when it is needed: `.item()`, `.data`, printing, `bool()`. `connect("http://host:8000")`
or `$GRADSERVE_URL` selects a server; with neither, the same requests run in-process (and ops that
need no graph are computed at once). The surface is declared once in `engine.surface` and installed
here by `client.ops`; client/README.md tells the rest.
"""

import sys
from typing import TYPE_CHECKING

from client import autograd, errors, ops, variable
from client.autograd import grad
from client.dot import graph_svg, to_dot
from client.errors import *  # noqa: F403  (the error classes: errors.__all__)
from client.function import Function, FunctionCtx
from client.ops import ShapeError
from client.session import AsyncSession, Session, connect, current_session
from client.state import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from client.variable import Variable
from engine.api import OPS, exported, loader, save

if TYPE_CHECKING:  # what engine.surface installs below (`client.exp`, `client.zeros`...), declared for type checkers
    from client._surface import *  # noqa: F403

_SURFACE = ops.install(autograd.backward)
variable.lend(_SURFACE)
globals().update(_SURFACE)

# torch.nn and torch.optim (they need the names above), torch.autograd's other names and torch.func
from client import forward_ad, func, gradcheck, nn, optim  # noqa: E402,F401
from engine.api import Functional  # noqa: E402
from engine.nn.stateless import functional_call, replace_all_batch_norm_modules_, stack_module_state  # noqa: E402
from engine.optim import averaging  # noqa: E402

optim.swa_utils = averaging.bind(nn)  # torch.optim.swa_utils on client nn.Modules

# torch.autograd.functional (one request per call) and torch.autograd's other names
autograd.functional = Functional(sys.modules[__name__], lazy=True)  # type: ignore[attr-defined,no-untyped-call]
autograd.forward_ad = forward_ad  # type: ignore[attr-defined]
func.functional_call = functional_call  # type: ignore[attr-defined]
func.stack_module_state = stack_module_state  # type: ignore[attr-defined]
func.replace_all_batch_norm_modules_ = replace_all_batch_norm_modules_  # type: ignore[attr-defined]
vmap = func.vmap  # torch.vmap
autograd.gradcheck, autograd.gradgradcheck = gradcheck.gradcheck, gradcheck.gradgradcheck  # type: ignore[attr-defined]
autograd.no_grad, autograd.enable_grad, autograd.inference_mode = no_grad, enable_grad, _SURFACE["inference_mode"]  # type: ignore
autograd.set_grad_enabled = set_grad_enabled  # type: ignore[attr-defined]  # torch.autograd.grad_mode's names
from engine.api import anomaly_mode  # noqa: E402  (the engine's mode: its walk checks; a server's is not told)

for _name in anomaly_mode.NAMES:
    setattr(autograd, _name.__name__, _name)
is_anomaly_enabled, is_anomaly_check_nan_enabled = (
    anomaly_mode.is_anomaly_enabled,
    anomaly_mode.is_anomaly_check_nan_enabled,
)
autograd.anomaly_mode = anomaly_mode
from engine.api import autograd_graph  # noqa: E402  (saved-tensor hooks refused: pack and unpack can't run on a server)

autograd.graph = autograd_graph(client=True, backward_pass=(autograd, "_through_hooks"))  # type: ignore[attr-defined]
from engine.api import profiling  # noqa: E402  (the client's requests are its events: the server's ops are not seen)

profiler, autograd.profiler = profiling.namespace(observe_ops=False)  # type: ignore[attr-defined]

__all__ = [
    "Variable",
    "save",
    "load",
    "Function",
    "FunctionCtx",
    "grad",
    "to_dot",
    "graph_svg",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "set_grad_enabled",
    "connect",
    "Session",
    "AsyncSession",
    "current_session",
    "OPS",
    "errors",
    "ShapeError",
    *(name for name in errors.__all__ if name != "error_for_status"),
    *sorted(_SURFACE),
]
__all__ = exported(__all__)  # `import *` shadows no builtin (float, int, bool, all, max...)


# torch.utils.data, bound to this namespace now that it is complete
from client import utils  # noqa: E402
from engine.utils import loading  # noqa: E402

_DATA = loading.bind(sys.modules[__name__], "client.utils.data")
vars(utils.data).update(_DATA, __all__=sorted(_DATA))
load = loader(sys.modules[__name__])

# torch.autocast, torch.amp and their older spellings (torch.cpu.amp, torch.cuda.amp): the casts are recorded ops
from engine.api import bind_mixed_precision  # noqa: E402

globals().update(bind_mixed_precision(sys.modules[__name__]))

# torch.compile, torch.backends, thread counts, print options, type promotion, torch.testing.assert_close
from engine.api import bind_runtime  # noqa: E402

globals().update(bind_runtime(sys.modules[__name__]))

# torch.distributions: a sample is drawn at once, log_prob and rsample are recorded ops
from engine.api import bind_distributions  # noqa: E402

distributions = bind_distributions(sys.modules[__name__])

# torch.special (what composes from the registry's ops)
from engine.api import bind_special  # noqa: E402

special = bind_special(sys.modules[__name__])

# torch.linalg
from engine.api import bind_linalg  # noqa: E402

globals().update(autograd.worded(bind_linalg(sys.modules[__name__])))  # (solve's singular matrix in its words)

# torch.fft (its real transforms; a spectrum is a ComplexView), torch.view_as_real and torch.view_as_complex
from engine.api import bind_fft  # noqa: E402

globals().update(bind_fft(sys.modules[__name__]))

# torch's module paths (`import client.autograd.forward_ad`, `from client.distributions import Normal`)
from engine.api import bind_module_paths  # noqa: E402

bind_module_paths(sys.modules[__name__])
