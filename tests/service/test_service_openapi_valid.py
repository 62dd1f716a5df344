"""/openapi.json is a valid OpenAPI 3.1 document (openapi-spec-validator), with and without an
API key (the key adds a security scheme), as served by a real server and by the app."""

from __future__ import annotations

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from service_testkit import asgi_client


def test_the_served_openapi_document_is_valid_openapi_3_1(http):
    spec = http.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    validate(spec)
    content = spec["paths"]["/forward"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/octet-stream"}
    assert "415" in spec["paths"]["/backward"]["post"]["responses"]


def test_the_openapi_document_with_an_api_key_is_valid():
    with asgi_client(api_key="s3cret") as client:
        spec = client.get("/openapi.json").json()
    validate(spec)
    assert spec["paths"]["/backward"]["post"]["security"] == [{"bearerAuth": []}]


def test_the_validator_catches_a_misplaced_description():
    """The check can fail: a media type object has no `description` (the bug this guards against)."""
    with asgi_client() as client:
        spec = client.get("/openapi.json").json()
    spec["paths"]["/forward"]["post"]["requestBody"]["content"]["application/octet-stream"]["description"] = "x"
    with pytest.raises(OpenAPIValidationError):
        validate(spec)
