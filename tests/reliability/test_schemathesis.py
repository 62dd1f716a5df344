"""Schemathesis (v4) against the app's own OpenAPI schema: no 5xx, responses conform."""

from __future__ import annotations

import os

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from service.app import create_app
from service.settings import Settings

from .conftest import record_figure

_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("GRADSERVE_")}
APP = create_app(Settings(max_body_bytes=2**20, max_concurrency=2, compute_timeout_s=10))
os.environ.update(_env)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
CALLS = {"n": 0}


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_and_never_5xx(case):
    response = case.call()
    CALLS["n"] += 1
    record_figure("schemathesis_calls", CALLS["n"])
    if case.path == "/readyz" and response.status_code == 503:  # no lifespan under schemathesis' ASGI client
        return
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance, content_type_conformance])
