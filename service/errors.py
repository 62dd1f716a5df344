"""One error shape for every failure: {"error": message, "node": id|null, "field": name|null,
"request_id": id} (the request id also in the `X-Request-ID` header, see service/request_id.py).

Protocol errors (`wire.errors.protocol_error`) carry a kind, turned into an HTTP status by
`STATUS` (the one table of it); FastAPI's own HTTPException and validation errors are reshaped
to match; anything unexpected becomes a generic 500 whose details go to the log only, never
into a response.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from service import request_id
from wire.errors import KINDS, GraphError, error_body, protocol_error

log = logging.getLogger("gradserve")

INTERNAL = "internal server error"
STATUS = {
    "malformed": 400,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "invalid": 422,
    "cancelled": 503,
    "out_of_memory": 507,
}
assert STATUS.keys() == KINDS.keys(), "every protocol error kind has its HTTP status"


class ApiError(Exception):
    """An error the service itself raises (auth, size, busy, malformed body)."""

    def __init__(self, status: int, message: str, node=None, field=None, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.node = node
        self.field = field
        self.headers = headers or {}


def error_response(
    status: int, message: str, node=None, field=None, headers: dict | None = None, rid: str | None = None
) -> Response:
    """The one error shape; with the request id `rid` in the body and the X-Request-ID header when given."""
    headers = dict(headers or {})
    if status == 413:
        headers.setdefault("Connection", "close")  # don't drain an oversized body we refused to read
    if rid is None:
        body = error_body(message, node, field)
    else:
        body = orjson.dumps({"error": message, "node": node, "field": field, "request_id": rid})
        headers[request_id.HEADER] = rid
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _json_safe(value):
    return value if value is None or isinstance(value, (str, int)) and not isinstance(value, bool) else str(value)


def from_exception(exc: BaseException, rid: str | None = None) -> Response:
    """The response for any exception raised while handling the request whose id is `rid`."""
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.message, exc.node, exc.field, exc.headers, rid)
    error = protocol_error(exc)
    if error is None:
        log.error("unexpected error while handling request %s", rid, exc_info=exc)
        return error_response(500, INTERNAL, rid=rid)
    status = STATUS[error.kind]
    headers = {"Retry-After": "1"} if status == 503 else None
    return error_response(status, str(error), _json_safe(error.node), _json_safe(error.field), headers, rid)


async def _http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    return error_response(exc.status_code, message, headers=getattr(exc, "headers", None), rid=_rid(request))


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"invalid request: {first.get('msg', 'validation failed')}"
    return error_response(422, message, field=where or None, rid=_rid(request))


async def _any_exception(request: Request, exc: Exception) -> Response:
    return from_exception(exc, _rid(request))


def _rid(request: Request) -> str:
    return request_id.of_scope(request.scope)


def install(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    for kind in (ApiError, GraphError, MemoryError, Exception):
        app.add_exception_handler(kind, _any_exception)
