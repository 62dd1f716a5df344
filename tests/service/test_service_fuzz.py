"""Schemathesis fuzzes every operation of the OpenAPI document through the ASGI app:
no 5xx for any generated input, and every error in the one JSON shape."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402

from service.app import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402

app = create_app(Settings(device="cpu", max_body_bytes=200_000, max_nodes=200, compute_timeout_s=10))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_fuzzed_requests_get_no_server_error(case):
    response = case.call()
    assert response.status_code < 500 or response.status_code in (503, 507), response.text
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error", "node", "field", "request_id"}, body
        assert "Traceback" not in body["error"]
