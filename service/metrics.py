"""Prometheus metrics, one registry per app instance (so several apps in one process never mix).

Request metrics come from an ASGI middleware (and the compute endpoints themselves, `service.routes.ComputeEndpoint`)
as plain integers and floats updated on the event loop, rendered in Prometheus' format when scraped
(`RequestCollector`): prometheus_client's `inc()`/`observe()` take a lock and walk a value object each,
~6% of a small request's CPU. The engine's state (tapes, plan cache, backend memory, computations in flight)
is read at scrape time by a collector too.
"""

from __future__ import annotations

import time
from bisect import bisect_left

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

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


class RequestCollector:
    """HTTP request counts, latency and body bytes, kept as plain numbers by `Metrics.observe` (on the
    event loop) and rendered as Prometheus families when scraped: gradserve_requests_total by endpoint,
    method and status; gradserve_request_duration_seconds (histogram over LATENCY_BUCKETS),
    gradserve_request_bytes_total and gradserve_response_bytes_total by endpoint."""

    def __init__(self):
        self.counts: dict[tuple, int] = {}  # (endpoint, method, status) -> requests
        self.by_endpoint: dict[str, list] = {}  # endpoint -> [bucket counts (+Inf last), seconds, bytes in, out]

    def describe(self):
        return []

    def collect(self):
        requests = CounterMetricFamily(
            "gradserve_requests", "HTTP requests by endpoint and status", labels=["endpoint", "method", "status"]
        )
        for (endpoint, method, status), count in list(self.counts.items()):
            requests.add_metric([endpoint, method, str(status)], count)
        latency = HistogramMetricFamily(
            "gradserve_request_duration_seconds", "HTTP request latency", labels=["endpoint"]
        )
        received = CounterMetricFamily("gradserve_request_bytes", "Request body bytes received", labels=["endpoint"])
        sent = CounterMetricFamily("gradserve_response_bytes", "Response body bytes sent", labels=["endpoint"])
        for endpoint, (buckets, seconds, bytes_in, bytes_out) in list(self.by_endpoint.items()):
            cumulative, total = [], 0
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), list(buckets)):
                total += count
                cumulative.append((floatToGoString(bound), total))
            latency.add_metric([endpoint], cumulative, seconds)
            received.add_metric([endpoint], bytes_in)
            sent.add_metric([endpoint], bytes_out)
        yield from (requests, latency, received, sent)


class Metrics:
    def __init__(self, executor, pool):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = RequestCollector()
        self.registry.register(self.requests)
        self.registry.register(EngineCollector(executor, pool))
        ProcessCollector(registry=self.registry)  # process_* (CPU, memory, fds), as other servers expose
        PlatformCollector(registry=self.registry)  # python_info
        GCCollector(registry=self.registry)  # python_gc_*

    def observe(self, endpoint: str, method: str, status: int, seconds: float, bytes_in: int, bytes_out: int):
        """Record one request (on the event loop: plain additions, no locks)."""
        counts = self.requests.counts
        key = (endpoint, method, status)
        counts[key] = counts.get(key, 0) + 1
        slot = self.requests.by_endpoint.get(endpoint)
        if slot is None:
            slot = self.requests.by_endpoint[endpoint] = [[0] * (len(LATENCY_BUCKETS) + 1), 0.0, 0, 0]
        slot[0][bisect_left(LATENCY_BUCKETS, seconds)] += 1
        slot[1] += seconds
        slot[2] += bytes_in
        slot[3] += bytes_out

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
