"""The client's exceptions.

Every error the service answers with (`{"error": msg, "node": id|null, "field": f|null}` and
an HTTP status) becomes a `ServerError` subclass chosen by the status, carrying the server's
message, status, node and field. The embedded executor's errors (`wire.errors.GraphError`,
`wire.codec.TensorError`) are turned into exactly the same answers first, so a program
sees the same exceptions embedded and remote. Subclasses also derive from the builtin
exception that fits (`ValueError` for a rejected graph, `RuntimeError` for a conflict...), so
`except ValueError` keeps working where the engine would have raised one.
"""

from __future__ import annotations

from engine.surface import NoValue


class ClientError(Exception):
    """Base class of every error raised by the gradserve client."""


class ServerError(ClientError):
    """The service (or the embedded executor) refused or failed a request."""

    def __init__(self, message: str, status: int | None = None, node=None, field=None, url: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.node = node
        self.field = field
        self.url = url

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status}, node={self.node!r}, field={self.field!r})"


class RequestError(ServerError):
    """A 4xx answer: the request itself was at fault."""


class ServiceError(ServerError):
    """A 5xx answer: the service could not do the work."""


class BadRequestError(RequestError, ValueError):
    """400: a malformed body (bad JSON, bad binary header length, truncated binary data)."""


class AuthenticationError(RequestError, PermissionError):
    """401/403: a missing or wrong API key."""


class NotFoundError(RequestError, LookupError):
    """404: an unknown or expired tape (or path)."""


class ConflictError(RequestError, RuntimeError):
    """409: a backward through a tape that a previous backward already freed."""


class PayloadTooLargeError(RequestError, ValueError):
    """413: a body, tensor, graph or tape over one of the service's limits."""


class GraphValidationError(RequestError, ValueError):
    """422: an invalid graph or tensor, or an op that failed while running (the node is named)."""


class InternalServerError(ServiceError, RuntimeError):
    """500 and other 5xx answers without a class of their own."""


class ServiceUnavailableError(ServiceError):
    """503: the service is busy or a computation passed its timeout (retried, then raised)."""


class OutOfMemoryError(ServiceError, MemoryError):
    """507: the service ran out of (device) memory."""


STATUS_ERRORS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: GraphValidationError,
    503: ServiceUnavailableError,
    507: OutOfMemoryError,
}


KIND_ERRORS = {  # the embedded executor's error kinds (wire.errors.KINDS)
    "malformed": BadRequestError,
    "invalid": GraphValidationError,
    "too_large": PayloadTooLargeError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "cancelled": ServiceUnavailableError,
    "out_of_memory": OutOfMemoryError,
}
_STATUS_OF = {cls: status for status, cls in STATUS_ERRORS.items()}


def status_of_kind(kind: str) -> int:
    """The HTTP status the service answers a protocol error of `kind` with."""
    return _STATUS_OF[KIND_ERRORS[kind]]


def error_for_status(status: int) -> type[ServerError]:
    """The exception class for an HTTP error status."""
    if status in STATUS_ERRORS:
        return STATUS_ERRORS[status]
    if 400 <= status < 500:
        return RequestError
    return InternalServerError


class ConnectionFailed(ClientError, ConnectionError):
    """The service could not be reached (after the retries); the message names the URL."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(message)
        self.url = url


class RequestTimeout(ClientError, TimeoutError):
    """No answer within the session's timeout; the message names the URL."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(message)
        self.url = url


class ProtocolError(ClientError):
    """An answer the client cannot read (not the service's format)."""


class TracingError(ClientError, NoValue):
    """A custom Function did something that can't be traced into a graph (e.g. needed a value)."""


__all__ = [
    "ClientError", "ServerError", "RequestError", "ServiceError", "BadRequestError", "AuthenticationError",
    "NotFoundError", "ConflictError", "PayloadTooLargeError", "GraphValidationError", "InternalServerError",
    "ServiceUnavailableError", "OutOfMemoryError", "ConnectionFailed", "RequestTimeout", "ProtocolError",
    "TracingError", "error_for_status",
]
