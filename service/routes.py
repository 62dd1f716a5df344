"""The HTTP endpoints. Compute endpoints read their body by hand and hand it, unparsed, to a
compute thread: parsing, decoding, running and encoding never block the event loop."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from engine import backend, codec
from engine.graph import SPECIAL_OPS, SUBGRAPH_OPS, VERSION
from engine.protocol import decode_request, encode_result
from engine.registry import OPS
from service.auth import require_api_key
from service.body import header_length, read_body
from service.errors import ApiError, from_exception
from service.schema import ERROR, compute_openapi
from service.version import __version__

router = APIRouter()
JSON = "application/json"


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


@router.get("/readyz", tags=["health"], responses={
    **_doc("the backend is initialised", {"status": "ready", "device": "cpu"}),
    503: {"description": "not ready yet", "content": {JSON: {"schema": ERROR}}}})
async def readyz(request: Request) -> Response:
    if not getattr(request.app.state, "ready", False):
        return json_response({"error": "not ready: the backend is not initialised", "node": None, "field": None}, 503)
    return json_response({"status": "ready", "device": backend.device})


@router.get("/info", tags=["metadata"], responses=_doc("version, backend, limits"))
async def info(request: Request) -> Response:
    state = request.app.state
    settings = state.settings
    return json_response({
        "name": "gradserve",
        "version": __version__,
        "graph_format_version": VERSION,
        "backend": {"device": backend.device, "array_module": backend.xp.__name__,
                    "memory_in_use_bytes": backend.memory_in_use()},
        "ops_count": len(OPS),
        "datatypes": list(codec.DATATYPES),
        "limits": {**state.executor.limits.as_dict(), "max_concurrency": settings.max_concurrency,
                   "compute_timeout_s": settings.compute_timeout_s},
        "binary_extension": {"header": codec.HEADER_LENGTH},
        "auth": {"api_key_required": settings.api_key is not None, "scheme": "Bearer"},
    })


@router.get("/ops", tags=["metadata"], responses=_doc("the ops a graph may use"))
async def ops() -> Response:
    return json_response({
        "graph_format_version": VERSION,
        "ops": [op.describe() for op in OPS.values()],
        "special": [{"name": name, "doc": doc} for name, doc in SPECIAL_OPS.items()],
        "subgraph": [{"name": name, "doc": doc} for name, doc in SUBGRAPH_OPS.items()],
    })


@router.get("/metrics", tags=["metadata"], responses={200: {"description": "Prometheus text format",
                                                             "content": {"text/plain": {"schema": {"type": "string"}}}}})
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def _compute(executor, kind: str, body: bytes, head_length: int | None):
    """Runs on a compute thread: split, parse, decode, execute, encode."""
    head, tail = codec.split_body(body, head_length)
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError as err:
        raise ApiError(400, f"malformed JSON: {err}", field="body") from None
    request = decode_request(header, tail, executor.limits)
    result = executor.forward(request) if kind == "forward" else executor.backward(request)
    content, length = encode_result(result, request.binary_output)
    return content, length, result.tape


async def _serve(request: Request, kind: str) -> Response:
    state = request.app.state
    pool, executor = state.pool, state.executor
    try:
        pool.admit()  # refuse (503) before reading a body we could not compute anyway
        length = header_length(request)
        body = await read_body(request, executor.limits.max_body_bytes)

        def discard_tape(result):
            tape = result[2]
            if tape is not None:
                try:
                    executor.tapes.take(tape)
                except Exception:  # noqa: BLE001 - already evicted
                    pass

        content, head_length, _ = await pool.run(_compute, executor, kind, body, length, on_abandon=discard_tape)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the one error shape
        return from_exception(exc)
    if head_length is None:
        return Response(content, media_type=JSON)
    return Response(content, media_type="application/octet-stream", headers={codec.HEADER_LENGTH: str(head_length)})


@router.post("/forward", tags=["compute"], dependencies=[Depends(require_api_key)],
             openapi_extra=compute_openapi("forward"),
             summary="Run a graph: its outputs (optionally retaining the tape)")
async def forward(request: Request) -> Response:
    return await _serve(request, "forward")


@router.post("/backward", tags=["compute"], dependencies=[Depends(require_api_key)],
             openapi_extra=compute_openapi("backward"),
             summary="Run a graph (or reuse a tape) and return outputs and gradients")
async def backward(request: Request) -> Response:
    return await _serve(request, "backward")
