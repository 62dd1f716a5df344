"""The app factory: `create_app(settings=None)` (settings from the environment when None)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from contextlib import asynccontextmanager

import numpy
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.middleware.cors import CORSMiddleware

from engine import backend
from service import docs, errors, oip, plans
from service.auth import SCHEME
from service.body import BodyBudget
from service.compute import ComputePool
from service.logs import RequestLogMiddleware
from service.metrics import Metrics, MetricsMiddleware
from service.routes import Runtime, add_compute_routes, router
from service.schema import ERROR, compute_paths
from service.settings import Settings
from service.version import __version__
from wire import codegen
from wire.codec import HEADER_LENGTH
from wire.executor import Executor

log = logging.getLogger("gradserve")
DESCRIPTION = """Gradients of expression graphs (graph format v1) over HTTP.
See docs/protocol.md for the request and response bodies, the binary tensor extension,
tapes, errors and limits."""


async def _sweep_tapes(executor: Executor, period: float):
    """Drop expired tapes periodically so their memory goes back even when no request comes."""
    while True:
        await asyncio.sleep(period)
        executor.tapes.sweep()


class Gradserve(FastAPI):
    """FastAPI whose compute endpoints (`POST /forward`, `/backward`: `direct`, {path: ASGI app})
    are called straight from here, past FastAPI's middleware stack and router. They answer
    every error themselves (service.routes.ComputeEndpoint) and are wrapped in the app's own
    middleware (metrics, CORS), so what they skip is only what they do not use: FastAPI's error
    pages, exception handlers, body limit and telemetry wrappers, and the router's scan of the
    routes (~40 µs of a tiny request's ~225 µs in process). Any other method or path, and the
    same paths under a root_path, go through FastAPI as usual."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.direct = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.direct.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


GEN0_THRESHOLD = 50_000  # container allocations between two passes of the youngest generation (Python's: 700)


@contextlib.contextmanager
def serving_collector():
    """The cyclic garbage collector as a server runs it, put back on exit (a test process starts many apps).
    What start-up made lives as long as the process, so it is frozen: never scanned again. And a request
    allocates ~10^5 container objects of which almost none are in cycles (issue 24: no reference cycles per
    request), so the youngest generation is collected every GEN0_THRESHOLD allocations, not every 700: at
    700 a new 1,000-node graph's first request paid ~140 passes, ~11% of its time (in-process, 20 interleaved
    requests each way). Cyclic garbage still goes, a few MB of it at most later."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    executor = Executor(settings.limits())
    pool = ComputePool(
        settings.max_concurrency, settings.compute_timeout_s, settings.queue_timeout_s, settings.max_queued_bytes
    )
    metrics = Metrics(executor, pool)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        numpy.seterr(all="ignore")
        device = backend.use(settings.device)
        log.info("gradserve %s ready on %s (%d compute threads)", __version__, device, settings.max_concurrency)
        app.state.ready = True
        sweeper = asyncio.create_task(_sweep_tapes(executor, max(0.05, min(settings.tape_ttl_s / 2, 10.0))))
        try:
            with serving_collector():  # start-up frozen, the collector's passes out of the requests' way
                yield
        finally:
            app.state.ready = False
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            pool.shutdown()
            executor.tapes.clear()
            codegen.GENERATOR.cancel()  # drop queued code generation, stop the one under way

    # redirect_slashes=False: Starlette's `/forward/` -> `/forward` redirect builds its Location from the Host header
    # docs_url=None, redoc_url=None: FastAPI's own pages load their scripts from a CDN; service.docs serves local ones
    app = Gradserve(
        title="gradserve",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redirect_slashes=False,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.executor = executor
    app.state.pool = pool
    app.state.body_budget = BodyBudget(
        settings.max_inflight_body_bytes, settings.peer_body_bytes(), settings.body_idle_timeout_s
    )
    app.state.metrics = metrics
    app.runtime = Runtime(settings, executor, pool, app.state.body_budget)
    app.state.ready = False
    errors.install(app)
    compute = add_compute_routes(app)
    app.include_router(router)
    app.include_router(plans.router)  # GET /plans/{id}.dot
    oip.install(app, settings, metrics)
    docs.install(app)
    cors = {}
    if settings.cors_origins:
        cors = {
            "allow_origins": settings.cors_origins,
            "allow_methods": ["GET", "POST"],
            "allow_headers": ["Authorization", "Content-Type", HEADER_LENGTH],
            "expose_headers": [HEADER_LENGTH, "Retry-After"],
        }
        app.add_middleware(CORSMiddleware, **cors)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # sees every response
    app.add_middleware(RequestLogMiddleware)  # outermost: request ids and log lines (compute routes do their own)
    app.direct = {
        path: MetricsMiddleware(CORSMiddleware(endpoint, **cors), metrics=metrics)
        if cors
        else endpoint.counted(metrics)
        for path, endpoint in compute.items()
    }
    app.openapi = lambda: _openapi(app)
    return app


def _openapi(app: FastAPI) -> dict:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schema["paths"].update(compute_paths())
        schema["paths"].update(oip.infer_paths())
        _reshape_validation_errors(schema)
        if app.state.settings.api_key is not None:  # describe this instance: the key is optional
            schema.setdefault("components", {}).setdefault("securitySchemes", {})[SCHEME] = {
                "type": "http",
                "scheme": "bearer",
                "description": "GRADSERVE_API_KEY, on /forward and /backward",
            }
            for path in ("/forward", "/backward"):
                schema["paths"][path]["post"]["security"] = [{SCHEME: []}]
            oip.mark_secured(schema, SCHEME)
            if "/metrics" in schema["paths"]:
                schema["paths"]["/metrics"]["get"]["security"] = [{SCHEME: []}]
            plans.mark_secured(schema, SCHEME)
        app.openapi_schema = schema
    return app.openapi_schema


VALIDATION_ERROR = "#/components/schemas/HTTPValidationError"


def _reshape_validation_errors(schema: dict) -> None:
    """FastAPI documents its 422 (a path parameter it could not parse) as `HTTPValidationError`;
    service.errors answers it in the one error shape, so the document says that instead."""
    for item in schema["paths"].values():
        for operation in item.values():
            content = operation.get("responses", {}).get("422", {}).get("content", {}).get("application/json")
            if content is not None and content.get("schema", {}).get("$ref") == VALIDATION_ERROR:
                content["schema"] = ERROR
    schemas = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    if "components" in schema and not schemas:
        schema["components"].pop("schemas", None)
        if not schema["components"]:
            del schema["components"]
