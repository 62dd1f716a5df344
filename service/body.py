"""Reading request bodies within `max_body_bytes`, and the binary-extension header."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from engine.codec import HEADER_LENGTH
from service.errors import ApiError


def _too_large(limit: int, what: str) -> ApiError:
    return ApiError(413, f"the request body {what} the limit of {limit} bytes (max_body_bytes)", field="body")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 before reading when Content-Length is over `limit`,
    and while reading (chunked or lying streams) as soon as the bytes pass it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise ApiError(400, f"Content-Length is not an integer: {declared!r}", field="Content-Length") from None
        if length > limit:
            raise _too_large(limit, f"declares {length} bytes, over")
    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise _too_large(limit, "is over")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "the client disconnected before sending the whole body", field="body") from None
    return b"".join(chunks)


def header_length(request: Request) -> int | None:
    """The JSON header's length for a binary-extension body (None for a plain JSON body)."""
    value = request.headers.get(HEADER_LENGTH)
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise ApiError(400, f"{HEADER_LENGTH} must be a non-negative integer, got {value!r}", field=HEADER_LENGTH)
    return int(text)
