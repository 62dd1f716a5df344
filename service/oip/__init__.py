"""The Open Inference Protocol (KServe v2 / Triton HTTP) face of the service: health, server
and model metadata, graphs registered as models, and infer (gradients as `grad:<input>`
outputs). See docs/protocol.md."""

from __future__ import annotations

import logging

from service.oip.metrics import ModelMetrics
from service.oip.onnx_models import load_repository
from service.oip.repository import ModelRepository
from service.oip.routes import add_oip_routes, mark_secured
from service.oip.schema import infer_paths

log = logging.getLogger("gradserve")

__all__ = ["infer_paths", "install", "mark_secured"]


def install(app, settings, metrics) -> None:
    """The model repository, its metrics and the /v2 routes on `app`."""
    app.state.models = ModelRepository(settings.max_models, settings.max_model_bytes)
    app.state.model_metrics = ModelMetrics(metrics.registry, app.state.models)
    add_oip_routes(app)
    if settings.model_repository is not None:
        load_repository(settings.model_repository, app.state.models, app.state.executor, settings, log)
