"""`/forward` and `/backward` minus HTTP: the one body pipeline, decode -> admit -> execute -> encode.

The service (`service.routes`, on its event loop or a compute thread) and the client's embedded
transport (`client.transports`) run these same functions: `decode` a body into a Request,
`Executor.admit` it into a `wire.admission.Ticket`, `execute` the ticket (grad mode on, IEEE
results as answers, the answer's bound once its shapes are known) and `encode` its Result.
`handle` is the four in one call; `run_arrays` the same for an in-process caller whose tensors are
arrays (nothing decoded or encoded). What goes wrong raises a `wire.errors.GraphError` whose
`kind` the caller turns into its own answer (the service: an HTTP status; the client's embedded
mode: the same status and exception as remote).
"""

from __future__ import annotations

from contextvars import ContextVar

import numpy
import orjson

from engine.api import enable_grad, is_grad_enabled, shown
from wire import codec
from wire.admission import ALL_JSON, INLINE, SHORT, Refusal, Ticket, bound_answer
from wire.codec import datatype_of
from wire.compile import _count as count_run
from wire.errors import RequestError
from wire.executor import Executor
from wire.layouts import Layout
from wire.layouts import _repeated as repeated
from wire.messages import Request, Result, check_total, decode_request, encode_result_parts, tensor_map
from wire.program import Program

PATHS = ("/forward", "/backward")
IEEE_QUIET = ContextVar("gradserve.ieee_quiet", default=False)  # `quiet_ieee` ran in this context


def quiet_ieee() -> None:
    """IEEE results (inf, nan) are never warnings in the current context from now on, and every
    context copied from it: a server's worker (the context its request tasks copy), a compute
    thread. `execute` there skips its own `numpy.errstate` (~2 µs of a small request)."""
    numpy.seterr(all="ignore")
    IEEE_QUIET.set(True)


def read_body(body: bytes, header_length: int | None):
    """(parsed JSON header, binary tail or None) of a request or response body."""
    head, tail = codec.split_body(body, header_length)
    try:
        return orjson.loads(head), tail
    except orjson.JSONDecodeError as err:
        raise RequestError(f"malformed JSON: {err}", field="body", kind="malformed") from None


def decode(executor: Executor, body: bytes, header_length: int | None, aligned: bool = True) -> Request:
    """The Request of a `body` (binary when `header_length` is given); its answer is JSON unless
    it asks for a binary one, and bounded so (`wire.admission`). `aligned=False`: a binary tensor
    not aligned for its dtype stays a view, not copied (it admits the same): `align_tensors` before
    running it."""
    if header_length is not None:
        request = executor.layouts.decode(body, header_length, aligned)
        if request is not None:  # a header seen before (`wire.layouts`)
            return request
    header, tail = read_body(body, header_length)
    request = decode_request(header, tail, executor.limits, aligned)
    request.json_answer = None if request.binary_output else ALL_JSON
    if header_length is not None:
        executor.layouts.learn(body, header_length, header, request)
    return request


def align_tensors(request: Request) -> Request:
    """`request` with a copy of each of its tensors that is not aligned for its dtype (see `decode`)."""
    for tensors in (request.inputs, request.grad_outputs, request.upload):
        for name, array in list(tensors.items()):
            if not array.flags.aligned:
                tensors[name] = array.copy()
    return request


def execute(executor: Executor, ticket: Ticket) -> Result:
    """The Result of an admitted request (one admitted without a plan is admitted fully first). Grad
    mode is on whatever the calling thread set, and IEEE results (inf, nan) are answers, not
    warnings. A JSON answer over its bound that inference could not foresee is refused now (its
    retained tape dropped)."""
    request = ticket.request
    if ticket.plan is None and request.tape is None:  # (not `ticket.planned`: a property's call, per request)
        ticket = executor.admit(request, ticket.kind)
    if IEEE_QUIET.get() and is_grad_enabled():
        result = executor.run(ticket)
    else:
        with enable_grad(), numpy.errstate(all="ignore"):
            result = executor.run(ticket)
    if request.json_answer is None:  # a binary answer: nothing to bound (`bound_answer`'s call saved)
        return result
    try:
        bound_answer(ticket, result, executor.limits)
    except Refusal:
        if result.tape is not None:
            executor.tapes.drop(result.tape)
        raise
    return result


def encode(request: Request, result: Result) -> tuple[list, int | None]:
    """([body pieces], header length or None) of the answer: binary when the request asked so (by
    its layout, for a header seen before: `wire.layouts.Layout.encode`)."""
    if request.binary_output and request.layout is not None:
        return request.layout.encode(result)
    return encode_result_parts(result, request.binary_output)


def repeat(executor: Executor, body, header_length: int, kind: str, idle: bool):
    """(where it ran, its answer as `service.routes.ComputeEndpoint.execute` gives it) of a binary `body` to `kind`
    of the last decoded header and tail size (`Layouts.last`), admitted to run here (INLINE, or SHORT while `idle`) by
    a verified program (`Layout.key`) of a plan still cached: what `decode`, admit, `execute` and `encode` do, in one
    step (~25k instructions less). Else None, nothing done. A program that raises runs again as `execute` runs it."""
    layout = executor.layouts.last(body, header_length)
    admitted = None if layout is None else layout.admitted.get(kind)
    if admitted is None or not (admitted[0] == INLINE or (idle and admitted[0] == SHORT)) or not executor.compiled:
        return None
    key, plan, shapes = layout.key(kind), admitted[1](), admitted[2]()
    program = None if key is None or shapes is None else shapes.programs.get(key)
    if type(program) is not Program or not program.verified or not (IEEE_QUIET.get() and is_grad_enabled()):
        return None
    if not executor.plans.hit(plan):  # (counted as the admission's lookup)
        return None
    inputs, grad_outputs = layout.views(body, header_length)
    pid = executor.plans.id_of(plan)
    try:
        outputs, grads = program.run(inputs, grad_outputs)
    except Exception:  # noqa: BLE001 - answered as run_compiled answers it (counted, logged, by the engine)
        request = layout.request(inputs, grad_outputs, planned=(plan, shapes, None))
        result = execute(executor, Ticket(request, kind, admitted[0], plan, shapes, admitted[3], admitted[4]))
    else:
        ran = count_run("compiled" if program.generated is not None else "interpreted")
        grads = grads if key.differentiate else None
        parts = None if layout.answered is None else repeated(layout.answered, pid, outputs, grads)
        if parts is not None:  # (the last answer's header again)
            return admitted[0], (parts, len(parts[0]), None, (pid, ran))
        result = Result(layout.fields["id"], outputs, grads, plan=pid, ran=ran)
    parts, length = layout.encode(result)
    return admitted[0], (parts, length, result.tape, (result.plan, result.ran))


def kind_of(path: str) -> str:
    """ "forward" or "backward", the kind of a request posted to `path` (one of PATHS)."""
    return path.removeprefix("/")


def run(executor: Executor, path: str, request: Request) -> Result:
    """A decoded request's Result: admitted, then executed."""
    return execute(executor, executor.admit(request, kind_of(path)))


def run_arrays(
    executor: Executor, path: str, header: dict, inputs=(), grad_outputs=(), upload=(), layout=None
) -> Result:
    """The Result of a request whose tensors are arrays already ([(name, array)] besides a JSON
    `header` without tensors), for an in-process caller: nothing is encoded or copied. The header
    is checked by `decode_request`, the arrays by the limits a body's tensors meet, and they reach
    the executor as read-only views (a result that is a view of one is read-only too, so the
    caller knows to copy it). `layout`: the Result's `layout` of an earlier request of this same
    header: when these arrays have the names, dtypes and shapes that one's had, the request is made
    and admitted as it was (`wire.layouts`), its header not checked again."""
    request = None if layout is None or upload else layout.repeat(header, inputs, grad_outputs)
    if request is None:
        request = decode_request(header, None, executor.limits)
        max_elements, total = executor.limits.max_tensor_elements, 0
        for key, tensors in (("inputs", inputs), ("grad_outputs", grad_outputs), ("upload", upload)):
            views = []
            for i, (name, array) in enumerate(tensors):
                view = numpy.asarray(array).view(numpy.ndarray)
                datatype_of(view.dtype)
                total += codec.element_count(view.shape, max_elements, f"tensor {shown(name)}", f"{key}[{i}].shape")
                view.flags.writeable = False
                views.append((name, view))
            setattr(request, key, tensor_map(views, key))
        check_total(total, executor.limits)
        request.layout = Layout.of(request, header)
    result = run(executor, path, request)
    result.layout = request.layout
    return result


def handle(executor: Executor, path: str, body: bytes, header_length: int | None):
    """(body pieces, header length or None, retained tape or None) of the answer to a request
    `body` (binary when `header_length` is given) posted to `path`, one of PATHS."""
    request = decode(executor, body, header_length)
    result = run(executor, path, request)
    parts, length = encode(request, result)
    return parts, length, result.tape
