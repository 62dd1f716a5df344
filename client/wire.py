"""What a session exchanges: calls (a request's header and tensors), replies, raw responses.

Bodies are encoded and read by the protocol's own functions (`wire.messages.encode_request`,
`decode_result`): binary tensors (Triton's binary data extension) by default, JSON with
`binary=False`. Error answers become `ServerError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy
import orjson

from client.errors import ProtocolError, error_for_status
from engine.backend import to_numpy
from wire.codec import HEADER_LENGTH, content_headers
from wire.handler import read_body
from wire.messages import decode_result, encode_request

MAX_ELEMENTS = 2**62  # responses are trusted for size: the service already enforced its limits


@dataclass
class Call:
    """One request: a path, a JSON header (without tensors) and its tensors."""

    path: str
    header: dict
    inputs: list = field(default_factory=list)        # [(name, ndarray)]
    grad_outputs: list = field(default_factory=list)  # [(name, ndarray)]
    fallback: "Call | None" = None                    # resent when the first answer is 404/409 (a lost tape)
    idempotent: bool = True                           # safe to resend after a dropped connection


@dataclass
class Reply:
    body: dict
    outputs: dict
    grads: dict
    tape: str | None = None


@dataclass
class Response:
    status: int
    headers: dict
    content: bytes

    def json(self):
        return orjson.loads(self.content)


def encode(call: Call, binary: bool) -> tuple[bytes, dict]:
    """(body, headers) of a call."""
    body, length = encode_request(call.header, call.inputs, call.grad_outputs, binary)
    return body, content_headers(length)


def header_of(headers: dict, name: str):
    """The value of header `name` (any case) in `headers`, or None."""
    name = name.lower()
    return next((value for key, value in headers.items() if key.lower() == name), None)


def raise_for_error(response: Response, url: str | None) -> Response:
    """The response, unless it is an error answer (status >= 400): then its ServerError subclass is raised."""
    if response.status < 400:
        return response
    message, node, where = None, None, None
    try:
        body = response.json()
        if isinstance(body, dict):
            message, node, where = body.get("error"), body.get("node"), body.get("field")
            if message is None and "detail" in body:
                message = str(body["detail"])
    except (orjson.JSONDecodeError, ValueError, TypeError):
        pass
    if not isinstance(message, str) or not message:
        text = response.content[:300].decode("utf-8", "replace").strip()
        message = f"HTTP {response.status}" + (f": {text}" if text else "")
    raise error_for_status(response.status)(message, response.status, node, where, url)


def decode(response: Response, url: str | None) -> Reply:
    """A Reply from a successful answer (JSON or binary)."""
    raise_for_error(response, url)
    length = header_of(response.headers, HEADER_LENGTH)
    try:
        body, tail = read_body(response.content, None if length is None else int(length))
        result = decode_result(body, tail, MAX_ELEMENTS)
    except (ValueError, TypeError, AttributeError) as err:  # wire.errors.GraphError is a ValueError
        raise ProtocolError(f"unreadable answer from {url}: {err}") from None
    return Reply(body, owned(result.outputs.items()), owned(result.grads.items()), result.tape)


def owned(tensors, copy: bool = False) -> dict:
    """{name: host array} from (name, array) pairs, as arrays the client may keep and update in
    place: read-only ones (views of a body or of other arrays) and, with `copy`, all are copied."""
    own = {}
    for name, array in tensors:
        array = to_numpy(array)
        own[name] = numpy.array(array) if copy or not array.flags.writeable else array
    return own
