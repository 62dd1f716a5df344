"""The client's exceptions. An error answer (`wire.errors.error_body` and an HTTP status) raises the `ServerError`
subclass of its status (message, status, node, field), embedded and remote alike; each also derives from the
builtin exception that fits (`ValueError` for a rejected graph...), so `except ValueError` works as with the engine.
"""

from __future__ import annotations

import re

import engine
from engine.api import NoValue
from wire.errors import KINDS, protocol_error


class ClientError(Exception):
    """Base class of every error raised by the gradserve client; `url`: where a request went, if one did."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(message)
        self.url = url


class ServerError(ClientError):
    """The service (or the embedded executor) refused or failed a request. A subclass names the
    HTTP `statuses` it stands for and the `wire.errors` kind the service answers with its first."""

    statuses: tuple = ()
    kind: str | None = None

    def __init__(self, message: str, status: int | None = None, node=None, field=None, url: str | None = None):
        super().__init__(message, url)
        self.message = message
        self.status = status
        self.node = node
        self.field = field

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}({self.message!r}, status={self.status}, node={self.node!r}, field={self.field!r})"


class RequestError(ServerError):
    """A 4xx answer: the request itself was at fault."""


class ServiceError(ServerError):
    """A 5xx answer: the service could not do the work."""


def _answer(name: str, bases: tuple, statuses: tuple, kind: str | None = None, what: str | None = None) -> type:
    """A ServerError subclass for the HTTP `statuses`, documented by `what` or by `kind`'s description in KINDS."""
    doc = f"{'/'.join(map(str, statuses))}: {what or KINDS[kind]}."
    return type(name, bases, {"__doc__": doc, "__module__": __name__, "statuses": statuses, "kind": kind})


BadRequestError = _answer("BadRequestError", (RequestError, ValueError), (400,), "malformed")
AuthenticationError = _answer(
    "AuthenticationError", (RequestError, PermissionError), (401, 403), what="a missing or wrong API key"
)
NotFoundError = _answer("NotFoundError", (RequestError, LookupError), (404,), "not_found")
UploadTimeoutError = _answer(
    "UploadTimeoutError",
    (RequestError, TimeoutError),
    (408,),
    what="the request's headers or body did not all arrive within the service's timeout for them",
)
ConflictError = _answer("ConflictError", (RequestError, RuntimeError), (409,), "conflict")
PayloadTooLargeError = _answer("PayloadTooLargeError", (RequestError, ValueError), (413,), "too_large")
UnsupportedMediaTypeError = _answer(
    "UnsupportedMediaTypeError",
    (RequestError, ValueError),
    (415,),
    what="a body whose Content-Type is neither application/json nor application/octet-stream",
)
# a RuntimeError too: an op or a backward that failed while running raises one in PyTorch (anomaly mode's NaN)
GraphValidationError = _answer("GraphValidationError", (RequestError, ValueError, RuntimeError), (422,), "invalid")
InternalServerError = _answer(
    "InternalServerError",
    (ServiceError, RuntimeError),
    (500,),
    what="an internal error, and any other 5xx answer without a class of its own",
)
ServiceUnavailableError = _answer(
    "ServiceUnavailableError",
    (ServiceError,),
    (503,),
    "cancelled",
    what=f"the service is busy, or {KINDS['cancelled']} (retried, then raised)",
)
OutOfMemoryError = _answer("OutOfMemoryError", (ServiceError, MemoryError), (507,), "out_of_memory")

_ANSWERS = RequestError.__subclasses__() + ServiceError.__subclasses__()  # the classes `_answer` made

STATUS_ERRORS = {status: cls for cls in _ANSWERS for status in cls.statuses}
KIND_ERRORS = {cls.kind: cls for cls in _ANSWERS if cls.kind}
assert KIND_ERRORS.keys() == KINDS.keys(), "every protocol error kind has its exception"


# a singular or indefinite matrix (the engine's LinAlgError, as the executor words it): PyTorch's LinAlgError too
_LINALG = engine.linalg.LinAlgError  # type: ignore[attr-defined]  # (installed with the surface: mypy can't see it)
_LinAlgError = type("LinAlgError", (GraphValidationError, _LINALG), {"__module__": __name__})
_SINGULAR = re.compile(r"failed: (torch\.)?linalg\.\w+: .*(singular|positive-definite)", re.IGNORECASE)


def error_for_status(status: int, message: str = "") -> type[ServerError]:
    """The exception class for an HTTP error status (and its `message`: torch.linalg.LinAlgError's words)."""
    if status == 422 and _SINGULAR.search(message):
        return _LinAlgError
    return STATUS_ERRORS.get(status) or (RequestError if 400 <= status < 500 else InternalServerError)


def error_for_exception(err: Exception, where: str) -> ServerError:
    """The ServerError for what handling a request in-process raised, as the service would answer it."""
    error = protocol_error(err)
    if error is None:
        return InternalServerError(f"internal error: {type(err).__name__}: {err}", 500, url=where)
    cls = KIND_ERRORS[error.kind]
    cls = error_for_status(cls.statuses[0], str(error)) if cls is GraphValidationError else cls
    return cls(str(error), cls.statuses[0], error.node, error.field, where)


class ConnectionFailed(ClientError, ConnectionError):
    """The service could not be reached (after the retries); the message names the URL. `retry`: when a
    session may try again: "always" (nothing was sent), "idempotent" (the connection dropped), or None."""

    def __init__(self, message: str, url: str | None = None, retry: str | None = None):
        super().__init__(message, url)
        self.retry = retry


class RequestTimeout(ClientError, TimeoutError):
    """No answer within the session's timeout; the message names the URL."""


class ProtocolError(ClientError):
    """An answer the client cannot read (not the service's format)."""


class TracingError(ClientError, NoValue):
    """A custom Function did something that can't be traced into a graph (e.g. needed a value)."""


__all__ = [
    name
    for name, value in globals().items()
    if isinstance(value, type) and issubclass(value, ClientError) and not name.startswith("_")
] + ["error_for_status"]
