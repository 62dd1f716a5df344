"""gradserve's Python client: the engine's Variable API, computed by the gradserve service.

    from client import Variable

    x = Variable(np.ones((2, 2)), requires_grad=True)
    out = ((x + 2) * (x + 2) * 2).mean()   # recorded locally: nothing is sent
    out.backward()                          # one POST /backward
    print(x.grad)                           # 3.0 everywhere

Operations that need a graph record it locally (shapes and dtypes by the registry's rules, so
`.shape` and shape errors need no request); a value is fetched (one `/forward`) when it is
needed: `.item()`, `.data`, printing, `bool()`. `backward()` and `grad()` send one `/backward`
each; with `create_graph=True` they send nothing and return lazy `grad` nodes (format 1.1).
Where: `connect("http://host:8000")` or `$GRADSERVE_URL` for a server; with neither, the same
requests run in-process through `wire.executor.Executor`, and ops that need no graph are
computed at once on the engine.

Methods, operators, properties and factories are the engine's, declared once in `engine.surface`
and installed here by `client.ops`; imports flow client -> wire -> engine.
"""

from client import errors
from client.autograd import backward as _backward
from client.autograd import grad
from client.errors import *  # the error classes (errors.__all__)
from client.function import Function, FunctionCtx
from client.ops import ShapeError
from client.ops import install as _install
from client.session import AsyncSession, Session, connect, current_session
from client.state import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from client.variable import Variable
from engine.registry import OPS
from engine.surface import exported

_SURFACE = _install(_backward)
globals().update(_SURFACE)

__all__ = [
    "Variable", "Function", "FunctionCtx", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "connect", "Session", "AsyncSession", "current_session", "OPS", "errors", "ShapeError",
    *(name for name in errors.__all__ if name != "error_for_status"), *sorted(_SURFACE),
]
__all__ = exported(__all__)  # `import *` shadows no builtin (float, int, bool, all, max...)
