"""`/forward` and `/backward` on bytes, minus HTTP: a body in, the answer's body pieces out.

`handle` is the whole request handling after the transport (split the body, parse its JSON
header, decode and check the request, run it on the `Executor`, encode the result);
`run_arrays` the same for an in-process caller whose tensors are arrays. What goes wrong raises a `wire.errors.GraphError` whose `kind` the caller turns into its own answer (the
service: an HTTP status; the client's embedded mode: the same status and exception as remote).
"""

from __future__ import annotations

import numpy
import orjson

from engine.api import enable_grad, shown
from wire import codec
from wire.codec import datatype_of
from wire.errors import RequestError
from wire.executor import Executor
from wire.messages import Request, Result, check_total, decode_request, encode_result_parts, tensor_map

PATHS = ("/forward", "/backward")


def read_body(body: bytes, header_length: int | None):
    """(parsed JSON header, binary tail or None) of a request or response body."""
    head, tail = codec.split_body(body, header_length)
    try:
        return orjson.loads(head), tail
    except orjson.JSONDecodeError as err:
        raise RequestError(f"malformed JSON: {err}", field="body", kind="malformed") from None


def run(executor: Executor, path: str, request: Request) -> Result:
    """A decoded request's Result. Grad mode is on whatever the calling thread set, and IEEE
    results (inf, nan) are answers, not warnings."""
    with enable_grad(), numpy.errstate(all="ignore"):
        return executor.forward(request) if path == "/forward" else executor.backward(request)


def run_arrays(executor: Executor, path: str, header: dict, inputs=(), grad_outputs=()) -> Result:
    """The Result of a request whose tensors are arrays already ([(name, array)] besides a JSON
    `header` without tensors), for an in-process caller: nothing is encoded or copied. The header
    is checked by `decode_request`, the arrays by the limits a body's tensors meet, and they reach
    the executor as read-only views (a result that is a view of one is read-only too, so the
    caller knows to copy it)."""
    request = decode_request(header, None, executor.limits)
    max_elements, total = executor.limits.max_tensor_elements, 0
    for key, tensors in (("inputs", inputs), ("grad_outputs", grad_outputs)):
        views = []
        for i, (name, array) in enumerate(tensors):
            view = numpy.asarray(array).view(numpy.ndarray)
            datatype_of(view.dtype)
            total += codec.element_count(view.shape, max_elements, f"tensor {shown(name)}", f"{key}[{i}].shape")
            view.flags.writeable = False
            views.append((name, view))
        setattr(request, key, tensor_map(views, key))
    check_total(total, executor.limits)
    return run(executor, path, request)


def handle(executor: Executor, path: str, body: bytes, header_length: int | None):
    """(body pieces, header length or None, retained tape or None) of the answer to a request
    `body` (binary when `header_length` is given) posted to `path`, one of PATHS."""
    header, tail = read_body(body, header_length)
    request = decode_request(header, tail, executor.limits)
    result = run(executor, path, request)
    parts, length = encode_result_parts(result, request.binary_output)
    return parts, length, result.tape
