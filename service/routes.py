"""The HTTP endpoints. The metadata endpoints are FastAPI routes; the compute endpoints are plain
ASGI routes that read their body by hand. A large body goes unparsed to a compute thread, so
parsing, decoding, running and encoding never block the event loop; a small body is decoded on
the loop and admitted there (`wire.admission`) and, when its ticket says so (a few small nodes of
known shapes, or milliseconds while the loop is free), run there too."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from engine import backend
from engine.api import OPS
from service import request_id
from service.auth import require_api_key
from service.body import BodyHold, drain, header_length, keep_heap_pad, peer_of, read_body, request_headers
from service.compute import ClientGone
from service.connections import alone, answered
from service.errors import ApiError, from_exception
from service.logs import ACCESS, INFO, RequestLogMiddleware, request_line
from service.schema import ERROR
from service.version import __version__
from wire import codec, handler
from wire.admission import INLINE, LIGHT_STEPS, SHORT, SHORT_STEPS
from wire.graph import SPECIAL_OPS, SUBGRAPH_OPS, VERSION

router = APIRouter()
JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
BODY_TYPES = (JSON, OCTET_STREAM)
HEADER_LENGTH_KEY = codec.HEADER_LENGTH.lower().encode()


def json_response(obj, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=JSON)


def _doc(description: str, example=None) -> dict:
    content = {JSON: {"schema": {"type": "object"}}}
    if example is not None:
        content[JSON]["example"] = example
    return {200: {"description": description, "content": content}}


@router.get("/healthz", tags=["health"], responses=_doc("the process is alive", {"status": "ok"}))
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    tags=["health"],
    responses={
        **_doc("the backend is initialised", {"status": "ready", "device": "cpu"}),
        503: {"description": "not ready yet", "content": {JSON: {"schema": ERROR}}},
    },
)
async def readyz(request: Request) -> Response:
    if not getattr(request.app.state, "ready", False):
        rid = request_id.of_scope(request.scope)
        error = {"error": "not ready: the backend is not initialised", "node": None, "field": None, "request_id": rid}
        return json_response(error, 503)
    return json_response({"status": "ready", "device": backend.device})


SERVICE_LIMITS = (
    "max_concurrency",
    "queue_timeout_s",
    "compute_timeout_s",
    "max_connections",
    "header_timeout_s",
    "body_timeout_s",
    "keep_alive_timeout_s",
    "max_inflight_body_bytes",
    "timeout_graceful_shutdown",
)


@router.get("/info", tags=["metadata"], responses=_doc("version, backend, limits"))
async def info(request: Request) -> Response:
    state = request.app.state
    settings = state.settings
    return json_response(
        {
            "name": "gradserve",
            "version": __version__,
            "graph_format_version": VERSION,
            "backend": {
                "device": backend.device,
                "array_module": backend.xp.__name__,
                "memory_in_use_bytes": backend.memory_in_use(),
            },
            "ops_count": len(OPS),
            "datatypes": list(codec.DATATYPES),
            "limits": {**state.executor.limits.as_dict(), **{name: getattr(settings, name) for name in SERVICE_LIMITS}},
            "binary_extension": {"header": codec.HEADER_LENGTH},
            "auth": {"api_key_required": settings.api_key is not None, "scheme": "Bearer"},
        }
    )


@router.get("/ops", tags=["metadata"], responses=_doc("the ops a graph may use"))
async def ops() -> Response:
    return json_response(
        {
            "graph_format_version": VERSION,
            "ops": [op.describe() for op in OPS.values()],
            "special": [{"name": name, "doc": doc} for name, doc in SPECIAL_OPS.items()],
            "subgraph": [{"name": name, "doc": doc} for name, doc in SUBGRAPH_OPS.items()],
        }
    )


@router.get(
    "/metrics",
    tags=["metadata"],
    responses={
        200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
        401: {"description": "the API key is missing or wrong (when one is set)", "content": {JSON: {"schema": ERROR}}},
    },
)
async def metrics(request: Request) -> Response:
    """Prometheus text; needs the API key when one is set (it names the registered models and
    tells the server's load), so a scraper sends it as a bearer token."""
    require_api_key(request.app.state.settings.api_key, request.headers)
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


INLINE_BODY_BYTES = 8192  # a JSON body (or a binary body's JSON header) this small is decoded on the event loop
SHORT_BODY_BYTES = 4 * 2**20  # ... and a binary body this small too (its tensors are views; a misaligned one is copied)


def _drop_tape(executor, tape) -> None:
    """Drop a tape retained for an answer that will not be sent."""
    if tape is not None:
        executor.tapes.drop(tape)


def _discard_tape(executor):
    """on_abandon for a computation nobody waits for any more: drop the tape it retained."""
    return lambda result: _drop_tape(executor, result[2])


SEND_CHUNK_BYTES = 1 << 20
ONE_CHUNK_BYTES = SEND_CHUNK_BYTES + (SEND_CHUNK_BYTES >> 2)  # a body up to this is sent as one chunk


def _chunks(parts: list):
    """The body `parts` of a large answer (over ONE_CHUNK_BYTES) as `bytes` chunks of SEND_CHUNK_BYTES
    (the last one shorter): the ASGI spec allows only `bytes` body parts. A tensor's memoryview is
    copied a slice at a time as it is sent, so neither the event loop (a copy holds the GIL) nor
    memory ever carries a second whole copy of it."""
    pending, size = [], 0
    for part in parts:
        view = memoryview(part)
        start, end = 0, len(view)
        while start < end:
            take = min(end - start, SEND_CHUNK_BYTES - size)
            pending.append(view[start : start + take])
            size += take
            start += take
            if size == SEND_CHUNK_BYTES:
                yield b"".join(pending)
                pending, size = [], 0
    if pending:
        yield b"".join(pending)


EXECUTOR_HEADER = b"x-gradserve-executor"  # what computed an answer: engine, interpreted or compiled
JSON_TYPE, OCTET_STREAM_TYPE = ((b"content-type", media.encode()) for media in (JSON, OCTET_STREAM))


async def _send_parts(send, parts: list, head_length: int | None, rid: str, executor: str | None = None) -> int:
    """A 200 whose body is `parts`: one message (one write) when it is at most ONE_CHUNK_BYTES (small
    parts, or a 1 MiB tensor and its header), else one `bytes` chunk after the other (`_chunks`), the
    last one closing the body; its length. `executor` (what ran the computation:
    `wire.messages.Result.ran`) goes in the X-Gradserve-Executor header."""
    length = sum(map(len, parts))
    headers = [(b"content-length", b"%d" % length), (request_id.HEADER_KEY, rid.encode())]
    if executor:
        headers.append((EXECUTOR_HEADER, executor.encode()))
    if head_length is None:
        headers.append(JSON_TYPE)
    else:
        headers += [OCTET_STREAM_TYPE, (HEADER_LENGTH_KEY, b"%d" % head_length)]
    if length <= ONE_CHUNK_BYTES:
        if not answered(send, headers, parts):
            body = parts[0] if len(parts) == 1 and type(parts[0]) is bytes else b"".join(parts)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        return length
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    chunks = _chunks(parts)
    chunk = next(chunks)
    for following in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        chunk = following
    await send({"type": "http.response.body", "body": chunk})
    return length


async def _send_error(exc, hold, scope, receive, send, rid: str, early: bool = False) -> tuple[int, int, int]:
    """Send the error response of `exc`: (its status, body bytes received, body bytes sent). `early`: it
    answers a request whose body was not read whole (401, 413, 415, 503...), and closes the connection,
    whose unread bytes are no next request; before closing it drops what the client still sends of its
    body (`service.body.drain`, bounded) so that the client can read the answer (a close with unread
    bytes resets the connection; client.transports reads an answer from a reset one too)."""
    response = from_exception(exc, rid)
    if not early:
        await response(scope, receive, send)
        return response.status_code, hold.received, len(response.body)
    response.headers["connection"] = "close"
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body, "more_body": True})
    if response.status_code != 408:  # a body too slow to arrive is not waited for again
        await drain(receive, request_headers(scope), hold.received)
    await send({"type": "http.response.body", "body": b""})
    return response.status_code, hold.received, len(response.body)


def require_body_type(headers, types: tuple = BODY_TYPES) -> None:
    """415 unless the body is declared one of `types`, JSON or octet-stream by default (parameters
    such as charset allowed).

    A web page can make a browser POST text/plain, or a body with no type at all, to any address
    without asking it first (no CORS preflight). Browsers send `Origin` with every POST, so a body
    without a type is read only from a caller that sends none (Triton's own HTTP client declares
    no type); a browser's must declare one of ours."""
    declared = headers.get("content-type")
    if declared is None and "origin" not in headers:
        return
    media_type = (declared or "").split(";", 1)[0].strip().lower()
    if media_type not in types:
        got = f"got {declared!r}" if declared is not None else "it is missing (required of browsers, which send Origin)"
        raise ApiError(
            415,
            f"Content-Type must be {' or '.join(types)}; {got}",
            field="Content-Type",
            headers={"Connection": "close"},
        )  # the body is never read


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the compute endpoints use, the same objects as the app's state holds, as plain
    attributes of the app (`app.runtime`): each `app.state.x` first fails a normal attribute
    lookup (Starlette's State keeps a dict behind `__getattr__`), which costs an AttributeError
    built and dropped, ~2k instructions."""

    settings: object
    executor: object
    pool: object
    body_budget: object


class ComputeEndpoint:
    """`POST /forward` or `/backward` as a plain ASGI app: the request path has no dependency
    injection and no per-request objects beyond the headers. The API key (401) and the body's
    Content-Type (415) are checked before the body is read; a compute slot is taken only by a
    request that runs on a compute thread, so a light request (run inline) is never refused as busy."""

    def __init__(self, kind: str):
        self.kind = kind
        self.path = f"/{kind}"
        self.metrics = None  # the Metrics it counts its requests in itself (`counted`), else a middleware does
        # (raw headers, their dict, header length, safe X-Request-ID) of the last request whose headers passed the
        # checks, kept without an API key only (`raw == seen[0]` is no constant-time comparison of a key)
        self.seen = None

    def counted(self, metrics) -> ComputeEndpoint:
        """A copy that counts its requests in `metrics` itself (`Gradserve.direct`: past MetricsMiddleware and
        its wrappers around receive and send, ~8% of a tiny request's CPU), from what `answer` returns."""
        endpoint = type(self)(self.kind)
        endpoint.metrics = metrics
        return endpoint

    async def answer(self, scope, receive, send) -> tuple[int, int, int]:
        """Answer one request (the endpoint's ASGI `__call__` too): (status, body bytes received, body bytes sent),
        counted in `self.metrics` when set; status 500 when nothing was sent (the client left), as MetricsMiddleware
        counts it. Every answer carries the request's id (X-Request-ID); its log line is written here."""
        start = time.perf_counter()
        outcome = None
        try:
            raw, seen = scope["headers"], self.seen
            if seen is not None and raw == seen[0]:  # a repeat of the last request's headers: checked already
                _, headers, length, given = seen
            else:
                seen, headers = None, request_headers(scope)
                given = request_id.safe(headers.get(request_id.HEADER))
            rid = scope.get(request_id.SCOPE_KEY) or request_id.of_known(scope, given)
            runtime = scope["app"].runtime
            settings = runtime.settings
            hold = BodyHold(runtime.body_budget, peer_of(scope))
            body = ran = None
            try:
                if seen is None:
                    require_api_key(settings.api_key, headers)
                    require_body_type(headers)
                    length = header_length(headers)
                    if settings.api_key is None:
                        self.seen = (raw, headers, length, given)
                body = await read_body(receive, headers, runtime.executor.limits, length, hold, settings.body_timeout_s)
                parts, head_length, _, ran = await self._run(runtime, body, length, receive, send)
            except ClientGone:
                outcome = 500, hold.received, 0
            except asyncio.CancelledError:  # the shutdown drain ended: answer, retriably, instead of a 500
                hold.release()
                outcome = await _send_error(shutting_down(settings), hold, scope, receive, send, rid)
            except Exception as exc:  # noqa: BLE001 - every failure becomes the one error shape
                hold.release()  # a refused body's bytes are not held while its answer is sent and the rest drained
                outcome = await _send_error(exc, hold, scope, receive, send, rid, early=body is None)
            finally:
                hold.release()
            if outcome is None:
                outcome = 200, hold.received, await _send_parts(send, parts, head_length, rid, ran[1] if ran else None)
            if ACCESS.isEnabledFor(INFO):
                route = getattr(scope.get("endpoint"), "route_path", None) or scope["path"]
                status, received, sent = outcome
                request_line(scope, rid, route, status, time.perf_counter() - start, received, sent, ran)
            scope[RequestLogMiddleware.LOGGED] = True
            return outcome
        finally:
            if self.metrics is not None:
                status, received, sent = outcome or (500, 0, 0)
                self.metrics.observe(self.path, "POST", status, time.perf_counter() - start, received, sent)

    __call__ = answer

    async def _run(self, runtime, body, length: int | None, receive, send):
        """A body whose JSON is small (a binary body's header too, whatever its tensors' size) is
        decoded and admitted here on the event loop (planned only where that is cheap,
        `Executor.admit`), so a request over a limit gets its 413 before it waits for a compute
        slot; then an INLINE ticket runs here too, where it costs less than the hop to a compute
        thread, and so does a SHORT one when the pool lets it (`ComputePool.may_run_inline`; `alone`).
        Anything else runs on the pool, cancelled if the client disconnects meanwhile. (A large
        JSON body goes to the pool undecoded: parsing it would block the loop.)"""
        pool, executor = runtime.pool, runtime.executor
        if len(body) <= INLINE_BODY_BYTES or (length is not None and length <= INLINE_BODY_BYTES):
            short = len(body) <= SHORT_BODY_BYTES  # else its misaligned tensors are copied on the pool
            idle = short and pool.may_run_inline(alone(send))
            start = time.perf_counter()
            done = self.repeat(executor, body, length, idle) if short and length is not None else None
            if done is not None:  # a repeat of the last binary request, run here as it was (`handler.repeat`)
                if done[0] == SHORT:
                    pool.ran_inline(time.perf_counter() - start)
                return done[1]
            call = self.decode(executor, body, length, short)
            ticket = self.admit(executor, call, SHORT_STEPS if idle else LIGHT_STEPS)
            if ticket.where == INLINE and short:
                return self.execute(executor, call, ticket)
            if ticket.where == SHORT and idle:
                start = time.perf_counter()
                try:
                    return self.execute(executor, call, ticket)
                finally:
                    pool.ran_inline(time.perf_counter() - start)
            fn, args = self.execute, (executor, call, ticket, not short)
        else:
            fn, args = self.compute, (executor, body, length)
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            return await pool.run(fn, *args, on_abandon=_discard_tape(executor), gone=gone, nbytes=len(body))
        finally:
            gone.cancel()

    # What a protocol on this endpoint says: how a body decodes, how it is admitted, how it runs and
    # answers. This one is `wire.handler`'s pipeline, the embedded client's too.

    def repeat(self, executor, body, length: int, idle: bool):
        """(where it ran, its answer) of a repeat of the last binary request (`handler.repeat`), else None."""
        return handler.repeat(executor, body, length, self.kind, idle)

    def decode(self, executor, body, length, aligned: bool = True):
        return handler.decode(executor, body, length, aligned)

    def admit(self, executor, request, cheap_steps: int | None = None):
        return executor.admit(request, self.kind, cheap_steps)

    def execute(self, executor, request, ticket, align: bool = False):
        """(body parts, header length, tape, (plan id, what ran it)) of an admitted request (its
        tensors `align`ed first when it was decoded without: `handler.decode`)."""
        if align:
            handler.align_tensors(request)
        result = handler.execute(executor, ticket)
        parts, length = handler.encode(request, result)
        return parts, length, result.tape, (result.plan, result.ran)

    def compute(self, executor, body, length):
        """On a compute thread: decode, admit, execute, encode."""
        call = self.decode(executor, body, length)
        return self.execute(executor, call, self.admit(executor, call))


async def _disconnected(receive) -> None:
    """Returns when the client disconnects (the body has been read: nothing else may come)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def shutting_down(settings) -> ApiError:
    return ApiError(
        503,
        f"the server is shutting down: the request was still running when the drain of "
        f"timeout_graceful_shutdown={settings.timeout_graceful_shutdown:g} s ended, and was cancelled; "
        "retry on another instance",
        headers={"Retry-After": "1", "Connection": "close"},
    )


def add_compute_routes(app) -> dict:
    """The compute endpoints, as plain ASGI routes (documented in the OpenAPI schema by
    `service.schema.compute_paths`, since FastAPI describes only its own routes); {path: endpoint}."""
    keep_heap_pad()  # the loop's large bodies and answers reuse the main heap's pages
    endpoints = {f"/{kind}": ComputeEndpoint(kind) for kind in ("forward", "backward")}
    for path, endpoint in endpoints.items():
        app.add_route(path, endpoint, methods=["POST"], include_in_schema=False)
    return endpoints
