"""Per-model metrics of registered graphs, on the app's registry (labels bounded by max_models:
a model's series go when it is unloaded)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from service.metrics import LATENCY_BUCKETS


class RepositoryCollector:
    """The repository's size, read when scraped."""

    def __init__(self, models):
        self.models = models

    def describe(self):
        return []

    def collect(self):
        yield GaugeMetricFamily("gradserve_models", "Graphs registered as models", value=len(self.models))
        yield GaugeMetricFamily(
            "gradserve_model_bytes",
            "Bytes held by registered models: plans, constants, JSON, kept shapes",
            value=self.models.nbytes,
        )


class ModelMetrics:
    def __init__(self, registry, models):
        self.inferences = Counter(
            "gradserve_model_inferences", "Infer requests by model and status", ["model", "status"], registry=registry
        )
        self.latency = Histogram(
            "gradserve_model_infer_duration_seconds",
            "Infer latency by model",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        registry.register(RepositoryCollector(models))
        self._statuses: dict[str, set] = {}

    def observe(self, model: str, status: int, seconds: float) -> None:
        self.inferences.labels(model, str(status)).inc()
        self.latency.labels(model).observe(seconds)
        self._statuses.setdefault(model, set()).add(str(status))

    def forget(self, model: str) -> None:
        """Drop an unloaded model's series."""
        for status in self._statuses.pop(model, ()):
            self.inferences.remove(model, status)
        try:
            self.latency.remove(model)
        except KeyError:
            pass
