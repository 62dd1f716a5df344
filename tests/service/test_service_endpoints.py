"""The read-only endpoints: health, readiness, info, ops, metrics, OpenAPI."""

from __future__ import annotations

import re

import numpy as np
import pytest
from service_testkit import EXAMPLE, SETTINGS, assert_error

from engine.registry import OPS
from service.app import create_app
from service.settings import Settings
from wire.graph import SPECIAL_OPS, VERSION
from wire.limits import Limits


def test_healthz(api):
    response = api.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_when_started(api):
    response = api.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "device": "cpu"}


def test_readyz_is_503_before_startup():
    from service_testkit import TestClient

    app = create_app(Settings(**SETTINGS))
    client = TestClient(app)  # not entered: the lifespan (backend initialisation) has not run
    assert_error(client.get("/readyz"), 503, "not ready")
    assert client.get("/healthz").status_code == 200


def test_info(api):
    info = api.get("/info").json()
    assert info["graph_format_version"] == VERSION
    assert info["ops_count"] == len(OPS)
    assert info["backend"]["device"] == "cpu"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", info["version"])
    limits = info["limits"]
    assert set(Limits().as_dict()) <= set(limits)
    assert limits["max_body_bytes"] == SETTINGS["max_body_bytes"]
    assert limits["max_nodes"] == SETTINGS["max_nodes"]
    assert limits["max_concurrency"] == SETTINGS["max_concurrency"]
    assert limits["compute_timeout_s"] == SETTINGS["compute_timeout_s"]
    assert info["auth"]["api_key_required"] is False
    assert "FP32" in info["datatypes"]


def test_ops(api):
    body = api.get("/ops").json()
    names = [op["name"] for op in body["ops"]]
    assert sorted(names) == sorted(OPS)
    by_name = {op["name"]: op for op in body["ops"]}
    assert by_name["mm"] == OPS["mm"].describe()
    assert by_name["clamp"]["attrs"]["min"]["kind"]
    assert {s["name"] for s in body["special"]} == set(SPECIAL_OPS)
    assert {s["name"] for s in body["subgraph"]} == {"arg", "grad_output", "forward_value"}


def _sample(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_counters_rise(api):
    before = api.get("/metrics").text
    assert api.post("/backward", json=EXAMPLE).status_code == 200
    assert api.post("/forward", content=b"{oops", headers={"Content-Type": "application/json"}).status_code == 400
    after = api.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text
    for name in (
        "gradserve_tapes",
        "gradserve_tape_bytes",
        "gradserve_backend_memory_bytes",
        "gradserve_computations_in_flight",
        "gradserve_plan_cache_hits_total",
        "gradserve_plan_cache_misses_total",
        "gradserve_request_duration_seconds_bucket",
        "gradserve_request_bytes_total",
        "gradserve_response_bytes_total",
    ):
        assert name in text, name
    ok = dict(endpoint="/backward", status="200")
    assert _sample(text, "gradserve_requests_total", **ok) == _sample(before, "gradserve_requests_total", **ok) + 1
    bad = dict(endpoint="/forward", status="400")
    assert _sample(text, "gradserve_requests_total", **bad) == _sample(before, "gradserve_requests_total", **bad) + 1
    for name in ("gradserve_request_bytes_total", "gradserve_response_bytes_total"):
        assert _sample(text, name, endpoint="/backward") > _sample(before, name, endpoint="/backward")
    assert _sample(text, "gradserve_request_duration_seconds_count", endpoint="/backward") >= 1
    assert _sample(text, "gradserve_computations_in_flight") == 0


def test_metrics_count_every_byte_of_a_binary_response(api):
    from service_testkit import binary_body, binary_tensor

    buffers = []
    header = {
        "graph": {
            "version": 1,
            "nodes": [{"id": "x", "op": "input"}, {"id": "y", "op": "clone", "inputs": ["x"]}],
            "outputs": ["y"],
        },
        "inputs": [binary_tensor("x", np.arange(1000, dtype=np.float64), buffers)],
        "parameters": {"binary_data_output": True},
    }
    content, headers = binary_body(header, buffers)
    before = api.get("/metrics").text
    response = api.post("/forward", content=content, headers=headers)
    assert response.status_code == 200, response.text
    text = api.get("/metrics").text
    for name, size in (
        ("gradserve_request_bytes_total", len(content)),
        ("gradserve_response_bytes_total", len(response.content)),
    ):
        assert _sample(text, name, endpoint="/forward") == _sample(before, name, endpoint="/forward") + size


def test_metrics_count_the_bytes_of_refused_requests(api):
    """The compute endpoints count their own requests (service.routes.CountedEndpoint): a body
    refused before it is read counts 0 bytes in, one refused after it counts all of it, and an
    error answer counts its body out."""

    def counts(text, status):
        return (
            _sample(text, "gradserve_requests_total", endpoint="/forward", status=status),
            _sample(text, "gradserve_request_bytes_total", endpoint="/forward"),
            _sample(text, "gradserve_response_bytes_total", endpoint="/forward"),
        )

    before = api.get("/metrics").text
    unsupported = api.post("/forward", content=b"{}", headers={"Content-Type": "text/plain"})
    assert unsupported.status_code == 415
    after = api.get("/metrics").text
    assert counts(after, "415") == (
        counts(before, "415")[0] + 1,
        counts(before, "415")[1],
        counts(before, "415")[2] + len(unsupported.content),
    )
    malformed = b'{"graph": 1}'
    refused = api.post("/forward", content=malformed, headers={"Content-Type": "application/json"})
    assert refused.status_code == 422
    last = api.get("/metrics").text
    assert counts(last, "422") == (
        counts(after, "422")[0] + 1,
        counts(after, "422")[1] + len(malformed),
        counts(after, "422")[2] + len(refused.content),
    )


def test_plan_cache_hit_on_repeated_graph(api):
    def counters():
        text = api.get("/metrics").text
        return _sample(text, "gradserve_plan_cache_hits_total"), _sample(text, "gradserve_plan_cache_misses_total")

    graph = {
        "version": 1,
        "nodes": [
            {"id": "a", "op": "input", "requires_grad": True},
            {"id": "e", "op": "exp", "inputs": ["a"]},
            {"id": "t", "op": "sum", "inputs": ["e"]},
        ],
        "outputs": ["t"],
    }
    request = {"graph": graph, "inputs": [{"name": "a", "shape": [2], "datatype": "FP64", "data": [0.5, 1.5]}]}
    hits0, misses0 = counters()
    assert api.post("/backward", json=request).status_code == 200
    hits1, misses1 = counters()
    assert api.post("/backward", json=request).status_code == 200
    hits2, misses2 = counters()
    assert hits1 + misses1 == hits0 + misses0 + 1  # first sight: a miss, unless an earlier test planned it
    assert (hits2, misses2) == (hits1 + 1, misses1)


def test_unknown_path_and_method_use_the_error_shape(api):
    assert_error(api.get("/nope"), 404, "Not Found")
    response = api.get("/forward")
    assert_error(response, 405)
    assert response.headers["allow"] == "POST"


def test_openapi_documents_json_and_binary_bodies(api):
    spec = api.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    for path in ("/forward", "/backward"):
        op = spec["paths"][path]["post"]
        content = op["requestBody"]["content"]
        assert content["application/json"]["schema"]["properties"]["graph"]["required"] == ["nodes", "outputs"]
        assert content["application/octet-stream"]["schema"]["format"] == "binary"
        assert any(p["name"] == "Inference-Header-Content-Length" for p in op["parameters"])
        assert {"200", "400", "413", "422", "503"} <= set(op["responses"])
        assert "security" not in op  # no key configured on this instance
    assert (
        "tape"
        in spec["paths"]["/backward"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    )
    for path in ("/healthz", "/readyz", "/info", "/ops", "/metrics"):
        assert "get" in spec["paths"][path]
    docs = api.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


@pytest.mark.parametrize("origin_setting", ["https://app.example", '["https://app.example"]'])
def test_cors_only_when_configured(monkeypatch, origin_setting):
    from service_testkit import TestClient

    monkeypatch.setenv("GRADSERVE_CORS_ORIGINS", origin_setting)
    app = create_app(Settings(device="cpu"))
    with TestClient(app) as client:
        pre = client.options(
            "/backward", headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "https://app.example"
        other = client.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        for path in ("/forward", "/backward"):  # the compute endpoints, called past FastAPI's stack, too
            allowed = client.post(path, json=EXAMPLE, headers={"Origin": "https://app.example"})
            assert (
                allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
            )
            assert allowed.headers["access-control-expose-headers"]
            refused = client.post(path, json=EXAMPLE, headers={"Origin": "https://evil.example"})
            assert "access-control-allow-origin" not in refused.headers
    monkeypatch.delenv("GRADSERVE_CORS_ORIGINS")
    with TestClient(create_app(Settings(device="cpu"))) as client:
        response = client.get("/healthz", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in response.headers
