"""The Open Inference Protocol (KServe v2 / Triton HTTP) endpoints under /v2.

Health and server metadata are open, like /healthz and /info; the model repository and the
models (metadata, config, infer) need the API key, like /forward and /backward. Infer is a
plain ASGI route built on `ComputeEndpoint`: the same admission, body limits, compute pool,
timeout and executor as /forward and /backward, with this protocol's decoding and encoding.
"""

from __future__ import annotations

import dataclasses
import time

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.datastructures import Headers
from starlette.responses import Response

from service import request_id
from service.auth import require_api_key
from service.body import BodyHold, read_body
from service.errors import ApiError, from_exception
from service.oip import onnx_models, schema
from service.oip.infer import admit, decode_infer, encode_infer, execute
from service.oip.model_config import parse_json
from service.oip.repository import check_name, model_of
from service.routes import ComputeEndpoint, json_response, require_body_type
from service.version import __version__
from wire.errors import GraphError, RequestError
from wire.handler import align_tensors
from wire.handler import read_body as read_message

EXTENSIONS = ["binary_tensor_data", "model_repository"]


def _api_key(request: Request) -> None:
    require_api_key(request.app.state.settings.api_key, request.headers)


router = APIRouter(prefix="/v2", tags=["open inference protocol"])
guarded = APIRouter(prefix="/v2", tags=["open inference protocol"], dependencies=[Depends(_api_key)])


@router.get("/health/live", responses=schema.responses("the server is live", schema.LIVE))
async def live() -> Response:
    return json_response({"live": True})


@router.get(
    "/health/ready",
    responses={
        **schema.responses("the server is ready", schema.READY),
        503: {"description": "not ready yet", "content": {schema.JSON: {"schema": schema.NOT_READY}}},
    },
)
async def ready(request: Request) -> Response:
    if not getattr(request.app.state, "ready", False):
        error = {"error": "not ready: the backend is not initialised", "node": None, "field": None}
        return json_response({**error, "request_id": request_id.of_scope(request.scope), "ready": False}, 503)
    return json_response({"ready": True})


@router.get("", responses=schema.responses("name, version and extensions", schema.SERVER_METADATA))
async def server_metadata() -> Response:
    return json_response({"name": "gradserve", "version": __version__, "extensions": EXTENSIONS})


def _json_only(request: Request) -> None:
    """415 unless a repository POST's body is declared as the compute endpoints' are: JSON, or
    octet-stream (what tritonclient's asyncio client declares), or no type from a client that
    sends no Origin (tritonclient's HTTP client). A web page can make a browser POST text/plain
    (or a form) anywhere without a CORS preflight; those types are refused."""
    require_body_type(request.headers)


@guarded.post("/repository/index", responses=schema.responses("the models loaded", schema.REPOSITORY_INDEX, 401))
async def repository_index(request: Request) -> Response:
    _json_only(request)
    return json_response(
        [
            {"name": m.name, "version": m.version, "state": "READY", "reason": ""}
            for m in request.app.state.models.models()
        ]
    )


async def _json_body(request: Request, limits=None) -> dict:
    _json_only(request)
    state = request.app.state
    hold = BodyHold(state.body_budget, request.client.host if request.client else None)
    try:
        body = bytes(
            await read_body(
                request.receive,
                request.headers,
                limits or state.executor.limits,
                None,
                hold,
                state.settings.body_timeout_s,
            )
        )
    finally:
        hold.release()
    if not body.strip():
        return {}
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ApiError(400, f"malformed JSON: {err}", field="body") from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object", field="body")
    return obj


def _graph_of(body: dict) -> tuple[dict, int]:
    """(graph, its bytes) from a load request's `parameters.config`: the graph's JSON as a
    string (what tritonclient's load_model(config=...) sends) or as an object."""
    params = body.get("parameters")
    if not isinstance(params, dict) or "config" not in params:
        raise RequestError(
            "the graph goes in parameters.config (a JSON string of graph format v1)", field="parameters.config"
        )
    extra = sorted(set(params) - {"config"})
    if extra:
        raise RequestError(
            f"parameters.{extra[0]} is not supported: send a graph as parameters.config, or an ONNX model as "
            "parameters['file:1/model.onnx'] (base64)",
            field=f"parameters.{extra[0]}",
        )
    config = params["config"]
    if isinstance(config, str):
        try:
            graph = orjson.loads(config)
        except orjson.JSONDecodeError as err:
            raise ApiError(400, f"parameters.config is not valid JSON: {err}", field="parameters.config") from None
        return graph, len(config.encode())
    if isinstance(config, dict):
        try:
            return config, len(orjson.dumps(config))
        except orjson.JSONEncodeError:  # nested deeper than any graph: orjson writes 254 levels
            raise RequestError("parameters.config is nested too deeply", field="parameters.config") from None
    raise RequestError(
        "parameters.config must be the graph's JSON, as a string or an object", field="parameters.config"
    )


@guarded.post(
    "/repository/models/{name}/load",
    summary="Load a graph as a model (replacing one of the same name)",
    responses=schema.responses("loaded", schema.EMPTY, 400, 401, 409, 413, 422, 503, 507),
    openapi_extra=schema.LOAD_BODY,
)
async def load(name: str, request: Request) -> Response:
    state = request.app.state
    check_name(name)
    body = await _json_body(request, _load_limits(state))
    params = body.get("parameters")
    if isinstance(params, dict) and onnx_models.is_file_load(params):
        version, data = onnx_models.files_of(params, state.settings.max_onnx_model_bytes)
        config = parse_json(params.get("config", ""), "parameters.config")
        state.models.check_room(name, len(data), "ONNX model file")
        try:
            model = await state.pool.run(
                onnx_models.load_onnx, state.executor, state.settings, name, version, data, config
            )
        except GraphError as err:
            if err.field != "model":
                raise
            file = next(key for key in params if key.startswith("file:"))
            raise GraphError(str(err), node=err.node, field=f"parameters.{file}", kind=err.kind) from None
        state.models.add(model)
        return json_response({})
    graph, nbytes = _graph_of(body)
    state.models.check_room(name, nbytes)
    state.models.add(await state.pool.run(_parsed_model, state.executor, name, graph))
    return json_response({})


def _load_limits(state):
    """A load request's body bounds: room for an ONNX model file in base64 (max_onnx_model_bytes),
    within max_body_bytes."""
    limits = state.executor.limits
    room = min(state.settings.max_onnx_model_bytes * 4 // 3 + 2**16, limits.max_body_bytes)
    if room <= limits.max_json_body_bytes:
        return limits
    return dataclasses.replace(limits, max_json_body_bytes=room)


def _parsed_model(executor, name: str, graph: dict):
    """On a compute thread: the Model of a graph, planned and cached by the executor's plan cache."""
    return model_of(name, *executor.plans.hold(graph, executor.limits))


@guarded.post(
    "/repository/models/{name}/unload",
    responses=schema.responses("unloaded", schema.EMPTY, 400, 401, 404, 413),
    openapi_extra=schema.OPTIONAL_BODY,
)
async def unload(name: str, request: Request) -> Response:
    await _json_body(request)
    request.app.state.models.remove(name)
    request.app.state.model_metrics.forget(name)
    return json_response({})


@guarded.get("/models/{name}", responses=schema.responses("its inputs and outputs", schema.MODEL_METADATA, 401, 404))
@guarded.get(
    "/models/{name}/versions/{version}",
    responses=schema.responses("its inputs and outputs", schema.MODEL_METADATA, 401, 404),
)
async def model_metadata(name: str, request: Request, version: str | None = None) -> Response:
    return json_response(request.app.state.models.get(name, version).metadata())


@guarded.get("/models/{name}/ready", responses=schema.responses("the model is ready", schema.MODEL_READY, 401, 404))
@guarded.get(
    "/models/{name}/versions/{version}/ready",
    responses=schema.responses("the model is ready", schema.MODEL_READY, 401, 404),
)
async def model_ready(name: str, request: Request, version: str | None = None) -> Response:
    model = request.app.state.models.get(name, version)
    return json_response({"name": model.name, "ready": True})


@guarded.get("/models/{name}/config", responses=schema.responses("its configuration", schema.MODEL_CONFIG, 401, 404))
@guarded.get(
    "/models/{name}/versions/{version}/config",
    responses=schema.responses("its configuration", schema.MODEL_CONFIG, 401, 404),
)
async def model_config(name: str, request: Request, version: str | None = None) -> Response:
    return json_response(request.app.state.models.get(name, version).config())


# --------------------------------------------------------------------------- infer


def _decode(executor, model, body: bytes, head_length: int | None, admits=None, aligned: bool = True):
    return decode_infer(model, *read_message(body, head_length), executor.limits, admits, aligned)


def _execute(executor, model, infer, ticket, align: bool = False):
    if align:
        align_tensors(infer.request)
    result = execute(executor, ticket)
    parts, length = encode_infer(model, infer, result)
    return parts, length, None, (result.plan, result.ran)


class ModelInference(ComputeEndpoint):
    """One infer request on one model: `ComputeEndpoint`'s checks, body reading, admission
    (`wire.admission`, inline or pooled) and disconnect handling, with this protocol's decoding and
    encoding."""

    def __init__(self, model, admits=None):
        super().__init__("infer")
        self.model = model
        self.admits = admits  # the repository's room for the Shapes the model's plan keeps

    def repeat(self, executor, body, length: int, idle: bool):
        return None  # (an infer request's layouts are its model's own)

    def decode(self, executor, body, length, aligned: bool = True):
        return _decode(executor, self.model, body, length, self.admits, aligned)

    def admit(self, executor, infer, cheap_steps: int | None = None):
        return admit(executor, infer, cheap_steps)

    def execute(self, executor, infer, ticket, align: bool = False):
        return _execute(executor, self.model, infer, ticket, align)


class InferRoute:
    """`POST /v2/models/{name}[/versions/{version}]/infer` as a plain ASGI app: the API key,
    then the model (404), then `ModelInference`; each answer counted under the model's name."""

    def __init__(self, route_path: str):
        self.route_path = route_path  # the endpoint label of its requests in /metrics

    async def __call__(self, scope, receive, send):
        state = scope["app"].state
        params = scope["path_params"]
        try:
            require_api_key(state.settings.api_key, Headers(scope=scope))
            model = state.models.get(params["name"], params.get("version"))
        except Exception as exc:  # noqa: BLE001 - every failure becomes the one error shape
            await from_exception(exc, request_id.of_scope(scope))(scope, receive, send)
            return
        status = [500]

        async def noting_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.perf_counter()
        try:
            await ModelInference(model, state.models.admits)(scope, receive, noting_send)
        finally:
            if state.models.registered(model):  # an unloaded model's series are gone and stay gone
                state.model_metrics.observe(model.name, status[0], time.perf_counter() - start)


def mark_secured(document: dict, scheme: str) -> None:
    """Mark the guarded /v2 operations of an OpenAPI `document` (infer's included) as needing `scheme`."""
    operations = [(route.path, method) for route in guarded.routes for method in route.methods]
    for path, method in [*operations, *((path, "POST") for path in schema.INFER_PATHS)]:
        operation = document["paths"].get(path, {}).get(method.lower())
        if operation is not None:
            operation["security"] = [{scheme: []}]


def add_oip_routes(app) -> None:
    app.include_router(router)
    app.include_router(guarded)
    for path in schema.INFER_PATHS:  # described by schema.infer_paths()
        app.add_route(path, InferRoute(path), methods=["POST"], include_in_schema=False)
