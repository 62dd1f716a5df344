"""gradserve's Python client: the engine's Variable API, computed by the gradserve service.

    from client import Variable

    x = Variable(np.ones((2, 2)), requires_grad=True)
    out = ((x + 2) * (x + 2) * 2).mean()   # recorded locally: nothing is sent
    out.backward()                          # one POST /backward
    print(x.grad)                           # 3.0 everywhere

Operations record a graph locally (shapes and dtypes by the registry's rules, so `.shape` and
shape errors need no request); a value is fetched (one `/forward`) when it is needed: `.item()`,
`.data` of a computed Variable, printing, `bool()`. `backward()` and `grad()` send one
`/backward` each. Where: `connect("http://host:8000")` or `$GRADSERVE_URL` for a server; with
neither, the same requests run in-process through `wire.executor.Executor`.

Ops, methods and operators are derived from `engine.registry.OPS`; imports flow client -> engine.
Higher-order gradients (`create_graph=True`) raise `HigherOrderGradientError`: use `engine`.
"""

from client import errors
from client import factory as _factory
from client.autograd import grad
from client.errors import (
    AuthenticationError,
    BadRequestError,
    ClientError,
    ConflictError,
    ConnectionFailed,
    GraphValidationError,
    HigherOrderGradientError,
    InternalServerError,
    NotFoundError,
    OutOfMemoryError,
    PayloadTooLargeError,
    ProtocolError,
    RequestError,
    RequestTimeout,
    ServerError,
    ServiceError,
    ServiceUnavailableError,
    TracingError,
)
from client.factory import (
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
from client.function import Function, FunctionCtx
from client.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from client.ops import ShapeError, max, min
from client.ops import install as _install
from client.session import AsyncSession, Session, connect, current_session
from client.variable import Variable
from engine import compat as _compat
from engine import ops as _engine_ops  # noqa: F401  (importing ops fills the registry)
from engine.registry import OPS

_FUNCTIONS = _install()
globals().update(_FUNCTIONS)
_PYTORCH03 = _compat.install(Variable, _factory._client, lambda v, dtype: _FUNCTIONS["cast"](v, dtype=dtype))
globals().update(_PYTORCH03)

__all__ = [
    "Variable", "Function", "FunctionCtx", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "connect", "Session", "AsyncSession", "current_session", "OPS", "max", "min",
    "tensor", "zeros", "ones", "full", "randn", "rand", "arange", "zeros_like", "ones_like", "manual_seed",
    "errors", "ClientError", "ServerError", "RequestError", "ServiceError", "BadRequestError", "AuthenticationError",
    "NotFoundError", "ConflictError", "PayloadTooLargeError", "GraphValidationError", "InternalServerError",
    "ServiceUnavailableError", "OutOfMemoryError", "ConnectionFailed", "RequestTimeout", "ProtocolError",
    "TracingError", "HigherOrderGradientError", "ShapeError",
    *sorted(_PYTORCH03), *sorted(OPS),
]
