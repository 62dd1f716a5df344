"""Prometheus metrics, one registry per app instance (so several apps in one process never mix).

Request metrics come from an ASGI middleware; the engine's state (tapes, plan cache, backend
memory, computations in flight) is read at scrape time by a collector.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from engine import backend
from wire import compile as compiled

ENDPOINTS = frozenset(
    {"/healthz", "/readyz", "/info", "/ops", "/metrics", "/forward", "/backward", "/docs", "/openapi.json"}
)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class EngineCollector:
    """Gauges and counters read from the executor and the compute pool when scraped."""

    def __init__(self, executor, pool):
        self.executor = executor
        self.pool = pool

    def describe(self):
        return []

    def collect(self):
        tapes = self.executor.tapes
        tapes.sweep()
        plans = self.executor.plans
        yield GaugeMetricFamily("gradserve_tapes", "Retained tapes held in memory", value=len(tapes))
        yield GaugeMetricFamily(
            "gradserve_tape_bytes", "Bytes held by retained tapes: values, recorded nodes, plans", value=tapes.nbytes
        )
        yield CounterMetricFamily("gradserve_plan_cache_hits", "Graphs found already planned", value=plans.hits)
        yield CounterMetricFamily("gradserve_plan_cache_misses", "Graphs parsed and planned", value=plans.misses)
        yield GaugeMetricFamily("gradserve_plan_cache_entries", "Planned graphs cached", value=len(plans))
        yield GaugeMetricFamily(
            "gradserve_cached_plan_bytes",
            "Bytes the plan cache counts: plans, constants, per-signature shapes and compiled programs",
            value=plans.nbytes,
        )
        yield GaugeMetricFamily(
            "gradserve_backend_memory_bytes",
            f"Bytes held by the {backend.device} backend's allocator",
            value=backend.memory_in_use(),
        )
        yield GaugeMetricFamily(
            "gradserve_computations_in_flight", "Computations running on compute threads", value=self.pool.in_flight
        )
        yield GaugeMetricFamily(
            "gradserve_max_concurrency", "Computations allowed at once", value=self.pool.max_concurrency
        )
        yield GaugeMetricFamily(
            "gradserve_computations_queued", "Computations waiting for a compute slot", value=self.pool.queued
        )
        yield GaugeMetricFamily(
            "gradserve_queued_bytes", "Bytes of request bodies waiting for a compute slot", value=self.pool.queued_bytes
        )
        yield CounterMetricFamily(
            "gradserve_computations_on_loop",
            "Short computations run on the event loop instead of a compute thread",
            value=self.pool.on_loop,
        )
        yield CounterMetricFamily(
            "gradserve_computations_rejected",
            "Computations refused with 503 (busy: the wait queue full, or no slot within queue_timeout_s)",
            value=self.pool.rejected,
        )
        yield CounterMetricFamily(
            "gradserve_computations_timed_out", "Computations cancelled by compute_timeout_s", value=self.pool.timed_out
        )
        yield _by_executor(
            "gradserve_plan_runs",
            "Requests of cached plans (not retained) by what ran them: the engine, the recorded program "
            "interpreted, or its generated code (this process)",
            compiled.RUNS,
        )
        yield _by_executor(
            "gradserve_program_failures",
            "Recorded programs that failed as they ran (logged with their traceback, dropped; the engine "
            "answered the request)",
            compiled.FAILURES,
        )


def _by_executor(name, documentation, counts):
    family = CounterMetricFamily(name, documentation, labels=["executor"])
    for executor in ("engine", "interpreted", "compiled"):
        family.add_metric([executor], counts.get(executor, 0))
    return family


class Metrics:
    def __init__(self, executor, pool):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "gradserve_requests",
            "HTTP requests by endpoint and status",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gradserve_request_duration_seconds",
            "HTTP request latency",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "gradserve_request_bytes", "Request body bytes received", ["endpoint"], registry=self.registry
        )
        self.bytes_out = Counter(
            "gradserve_response_bytes", "Response body bytes sent", ["endpoint"], registry=self.registry
        )
        self.registry.register(EngineCollector(executor, pool))
        ProcessCollector(registry=self.registry)  # process_* (CPU, memory, fds), as other servers expose
        PlatformCollector(registry=self.registry)  # python_info
        GCCollector(registry=self.registry)  # python_gc_*
        self._by_endpoint: dict[str, tuple] = {}
        self._by_status: dict[tuple, object] = {}

    def observe(self, endpoint: str, method: str, status: int, seconds: float, bytes_in: int, bytes_out: int):
        """Record one request. Labelled children are looked up once per label set, not per request."""
        children = self._by_endpoint.get(endpoint)
        if children is None:
            children = self._by_endpoint[endpoint] = (
                self.latency.labels(endpoint),
                self.bytes_in.labels(endpoint),
                self.bytes_out.labels(endpoint),
            )
        key = (endpoint, method, status)
        counter = self._by_status.get(key)
        if counter is None:
            counter = self._by_status[key] = self.requests.labels(endpoint, method, str(status))
        latency, received, sent = children
        counter.inc()
        latency.observe(seconds)
        received.inc(bytes_in)
        sent.inc(bytes_out)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def route_label(scope) -> str:
    """The template of the route a request matched (e.g. /v2/models/{name}/infer; bounded, unlike
    paths): a FastAPI route's path, or a plain ASGI endpoint's `route_path`; else "other"."""
    path = getattr(scope.get("route"), "path", None) or getattr(scope.get("endpoint"), "route_path", None)
    return path or "other"


class MetricsMiddleware:
    """Pure ASGI middleware: counts, latency and body bytes of every HTTP request."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        counts = {"in": 0, "out": 0, "status": 500}

        async def counting_receive():
            message = await receive()
            if message["type"] == "http.request":
                counts["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message):
            if message["type"] == "http.response.start":
                counts["status"] = message["status"]
            elif message["type"] == "http.response.body":
                counts["out"] += len(message.get("body", b""))
            await send(message)

        start = time.perf_counter()
        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            endpoint = path if path in ENDPOINTS else route_label(scope)
            self.metrics.observe(
                endpoint,
                scope.get("method", ""),
                counts["status"],
                time.perf_counter() - start,
                counts["in"],
                counts["out"],
            )
