"""The OpenAPI document describes every /v2 route, infer included, and what it describes is what
the server does: tritonclient's requests fit the documented request bodies, and the server's
answers (successes and errors) fit the documented response schemas (JSON Schema 2020-12, as
OpenAPI 3.1 uses it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as tritonclient_http
from jsonschema import Draft202012Validator, ValidationError
from starlette.routing import Route

from tests.oip.oip_testkit import MLP, W, X, infer_input, mlp_expected, requested
from tests.service.service_testkit import HEADER_LENGTH, asgi_client


@pytest.fixture(scope="module")
def client():
    with asgi_client() as client:
        yield client


@pytest.fixture(scope="module")
def spec(client):
    return client.get("/openapi.json").json()


def request_schema(spec, method: str, path: str) -> dict:
    return spec["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


def check_answer(spec, method: str, path: str, response) -> None:
    """`response` fits what the document says `method path` answers with its status."""
    documented = spec["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code, response.text)
    content = documented[str(response.status_code)]["content"]
    media = response.headers["content-type"].split(";")[0]
    assert media in content, (path, media, list(content))
    if media == "application/json":
        Draft202012Validator(content[media]["schema"]).validate(response.json())


def test_every_v2_route_is_documented(client, spec):
    routes = [r for r in client.app.routes if isinstance(r, Route) and r.path.startswith("/v2")]
    assert {"/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"} <= {r.path for r in routes}
    for route in routes:
        for method in route.methods - {"HEAD"}:
            assert method.lower() in spec["paths"].get(route.path, {}), (method, route.path)


def _triton_body(inputs, outputs, **params) -> tuple[bytes, dict, dict]:
    """(body, headers, its JSON header) as tritonclient sends an infer request."""
    body, json_size = tritonclient_http.InferenceServerClient.generate_request_body(inputs, outputs, **params)
    headers = {"Content-Type": "application/octet-stream" if json_size else "application/json"}
    if json_size:
        headers[HEADER_LENGTH] = str(json_size)
    return body, headers, json.loads(body[:json_size] if json_size else body)


def test_documented_bodies_and_answers_match_the_server(client, spec):
    load = "/v2/repository/models/{name}/load"
    body = {"parameters": {"config": json.dumps(MLP)}}  # what tritonclient's load_model(config=...) sends
    Draft202012Validator(request_schema(spec, "post", load)).validate(body)
    check_answer(spec, "post", load, client.post("/v2/repository/models/mlp/load", json=body))
    try:
        for path, url in (
            ("/v2/repository/index", "/v2/repository/index"),
            ("/v2/models/{name}", "/v2/models/mlp"),
            ("/v2/models/{name}/versions/{version}", "/v2/models/mlp/versions/1"),
            ("/v2/models/{name}/ready", "/v2/models/mlp/ready"),
            ("/v2/models/{name}/config", "/v2/models/mlp/config"),
            ("/v2/models/{name}/versions/{version}/config", "/v2/models/mlp/versions/1/config"),
            ("/v2", "/v2"),
            ("/v2/health/live", "/v2/health/live"),
            ("/v2/health/ready", "/v2/health/ready"),
        ):
            method = "post" if "repository" in path else "get"
            check_answer(spec, method, path, client.request(method.upper(), url))

        infer = "/v2/models/{name}/infer"
        infer_body = request_schema(spec, "post", infer)
        for binary in (False, True):
            inputs = [infer_input("x", X, binary), infer_input("w", W, binary)]
            body, headers, header = _triton_body(inputs, requested("loss", "grad:w", binary=binary), request_id="r1")
            Draft202012Validator(infer_body).validate(header)
            answer = client.post("/v2/models/mlp/infer", content=body, headers=headers)
            check_answer(spec, "post", infer, answer)
            if not binary:
                outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
                np.testing.assert_allclose(outputs["grad:w"], mlp_expected()[1].ravel(), rtol=1e-5)
        versioned = "/v2/models/{name}/versions/{version}/infer"
        check_answer(
            spec, "post", versioned, client.post("/v2/models/mlp/versions/1/infer", content=body, headers=headers)
        )

        # errors: the documented status, in the one error shape
        check_answer(spec, "post", infer, client.post("/v2/models/nowhere/infer", json=header))
        check_answer(spec, "get", "/v2/models/{name}", client.get("/v2/models/nowhere"))
        bad = {**header, "priority": 1}
        with pytest.raises(ValidationError):  # the document refuses a key the server refuses
            Draft202012Validator(infer_body).validate(bad)
        check_answer(spec, "post", infer, refused := client.post("/v2/models/mlp/infer", json=bad))
        assert refused.status_code == 422 and refused.json()["field"] == "priority"
    finally:
        unload = client.post("/v2/repository/models/mlp/unload")
    check_answer(spec, "post", "/v2/repository/models/{name}/unload", unload)
    assert unload.status_code == 200
