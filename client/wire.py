"""Request and response bodies: what `/forward` and `/backward` exchange, as bytes.

Tensors are Open Inference Protocol tensor objects (`wire.codec`): raw little-endian buffers
after the JSON header (Triton's binary data extension, `Inference-Header-Content-Length`) by
default, `data` lists with `binary=False`. Error answers become `ServerError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy
import orjson

from client.errors import ProtocolError, error_for_status
from engine.backend import to_numpy
from wire import codec
from wire.codec import HEADER_LENGTH

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
    header = dict(call.header)
    if binary:
        buffers = []
        if call.inputs:
            header["inputs"] = [codec.encode_binary(name, a, buffers) for name, a in call.inputs]
        if call.grad_outputs:
            header["grad_outputs"] = [codec.encode_binary(name, a, buffers) for name, a in call.grad_outputs]
        header["parameters"] = {**header.get("parameters", {}), "binary_data_output": True}
        body, length = codec.join_body(header, buffers)
        return body, {HEADER_LENGTH: str(length), "Content-Type": "application/octet-stream"}
    if call.inputs:
        header["inputs"] = [codec.encode_json(name, a) for name, a in call.inputs]
    if call.grad_outputs:
        header["grad_outputs"] = [codec.encode_json(name, a) for name, a in call.grad_outputs]
    return codec.dumps(header), {"Content-Type": "application/json"}


def _header(headers: dict, name: str):
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def raise_for_error(response: Response, url: str | None) -> None:
    """Raise the ServerError subclass for an error answer (status >= 400)."""
    if response.status < 400:
        return
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
    length = _header(response.headers, HEADER_LENGTH)
    try:
        head, tail = codec.split_body(response.content, None if length is None else int(length))
        body = orjson.loads(head)
        outputs, offset = codec.decode_tensors(body.get("outputs"), "outputs", tail, 0, MAX_ELEMENTS)
        grads, offset = codec.decode_tensors(body.get("grads"), "grads", tail, offset, MAX_ELEMENTS)
    except (ValueError, TypeError, AttributeError, orjson.JSONDecodeError) as err:
        raise ProtocolError(f"unreadable answer from {url}: {err}") from None
    return Reply(body, owned(outputs), owned(grads), body.get("tape"))


def owned(tensors, copy: bool = False) -> dict:
    """{name: host array} from (name, array) pairs, as arrays the client may keep and update in
    place: read-only ones (views of a body or of other arrays) and, with `copy`, all are copied."""
    own = {}
    for name, array in tensors:
        array = to_numpy(array)
        own[name] = numpy.array(array) if copy or not array.flags.writeable else array
    return own
