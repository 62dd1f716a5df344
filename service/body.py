"""Reading request bodies within `max_body_bytes`, and the binary-extension header."""

from __future__ import annotations

from starlette.datastructures import Headers

from service.errors import ApiError
from wire.codec import HEADER_LENGTH


def _too_large(limit: int, what: str) -> ApiError:
    return ApiError(413, f"the request body {what} the limit of {limit} bytes (max_body_bytes)", field="body")


def declared_length(headers: Headers, limit: int) -> int | None:
    """The Content-Length, refused with 413 when it is over `limit` (before any byte is read)."""
    declared = headers.get("content-length")
    if declared is None:
        return None
    try:
        length = int(declared)
    except ValueError:
        raise ApiError(400, f"Content-Length is not an integer: {declared!r}", field="Content-Length") from None
    if length > limit:
        raise _too_large(limit, f"declares {length} bytes, over")
    return length


async def read_body(receive, headers: Headers, limit: int) -> bytes:
    """The raw body from ASGI `receive`, refused with 413 before reading when Content-Length is
    over `limit`, and while reading (chunked or lying streams) as soon as the bytes pass it."""
    declared_length(headers, limit)
    chunks, total = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "the client disconnected before sending the whole body", field="body")
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise _too_large(limit, "is over")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def header_length(headers: Headers) -> int | None:
    """The JSON header's length for a binary-extension body (None for a plain JSON body)."""
    value = headers.get(HEADER_LENGTH)
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise ApiError(400, f"{HEADER_LENGTH} must be a non-negative integer, got {value!r}", field=HEADER_LENGTH)
    return int(text)
