"""Soak (issue 11): 6 clients mix good and bad requests, light and heavy, JSON and binary, against
a real server with the DEFAULT settings. No 5xx at all, no 503 for a request that runs inline,
correct answers, and a flat RSS. `GRADSERVE_SOAK_S` sets the duration (default 20 s)."""

from __future__ import annotations

import json
import os
import random
import threading
import time

import httpx
import numpy as np

from .conftest import (
    HEADER_LENGTH,
    binary_body,
    decode_response,
    json_tensor,
    matmul_chain,
    record_figure,
    simple_request,
    strict_json,
)
from .edge_kit import HealthProbe

SOAK_S = float(os.environ.get("GRADSERVE_SOAK_S", "20"))
CLIENTS = 6
RSS_GROWTH_KB = 40_000


def _heavy_binary(rng):
    n = 192
    x = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    return binary_body({"graph": matmul_chain(n, 4)}, {"x": x})


def _heavy_json(rng):
    x = rng.standard_normal(3000).astype(np.float32)  # a body over 8 KiB: parsed on a compute thread
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True},
            {"id": "t", "op": "tanh", "inputs": ["x"]},
            {"id": "s", "op": "sum", "inputs": ["t"]},
        ],
        "outputs": ["s"],
    }
    return {"graph": graph, "inputs": [json_tensor("x", x)]}, x


def _one(client: httpx.Client, rng, kind: str):
    """Send one request of `kind`; (inline?, status, ok?) where ok means the answer was right."""
    if kind == "light":
        values = rng.random(2).astype(np.float32)
        path = random.choice(("/forward", "/backward"))
        response = client.post(path, json=simple_request(values))
        if response.status_code != 200:
            return True, response.status_code, False
        out = decode_response(response)
        return True, 200, abs(float(out["outputs"]["s"]) - 2 * float(values.sum())) < 1e-4
    if kind == "heavy_binary":
        body, headers = _heavy_binary(rng)
        response = client.post(random.choice(("/forward", "/backward")), content=body, headers=headers)
        return False, response.status_code, response.status_code == 200 and "s" in decode_response(response)["outputs"]
    if kind == "heavy_json":
        request, x = _heavy_json(rng)
        response = client.post("/backward", json=request)
        if response.status_code != 200:
            return False, response.status_code, False
        grads = decode_response(response)["grads"]["x"]
        return False, 200, np.allclose(grads, 1 - np.tanh(x) ** 2, atol=1e-5)
    # bad requests: each must be its 4xx with the JSON error shape
    if kind == "malformed":
        response, expected = (
            client.post("/forward", content=b'{"graph": ', headers={"Content-Type": "application/json"}),
            400,
        )
    elif kind == "unknown_op":
        request = simple_request()
        request["graph"]["nodes"][2]["op"] = "__import__"
        response, expected = client.post("/forward", json=request), 422
    elif kind == "huge_shape":
        request = {
            "graph": {"version": 1, "nodes": [{"id": "x", "op": "input"}], "outputs": ["x"]},
            "inputs": [{"name": "x", "shape": [2**40, 2**40], "datatype": "FP32", "data": [1.0]}],
        }
        response, expected = client.post("/forward", json=request), 413
    elif kind == "json_answer_too_big":
        graph = {
            "version": 1,
            "nodes": [
                {"id": "x", "op": "input"},
                {"id": "y", "op": "expand", "inputs": ["x"], "attrs": {"shape": [1024, 1024]}},
            ],
            "outputs": ["y"],
        }
        request = {"graph": graph, "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]}
        response, expected = client.post("/forward", json=request), 413
    else:  # lying binary framing
        body, headers = binary_body({"graph": simple_request()["graph"]}, {"x": np.ones(2, np.float32)})
        response, expected = (
            client.post("/forward", content=body, headers={**headers, HEADER_LENGTH: str(len(body) + 9)}),
            400,
        )
    ok = response.status_code == expected and isinstance(strict_json(response.content).get("error"), str)
    return True, response.status_code, ok


KINDS = (
    ["light"] * 6
    + ["heavy_binary"] * 2
    + ["heavy_json"] * 2
    + ["malformed", "unknown_op", "huge_shape", "json_answer_too_big", "lying_framing"]
)


def test_soak_mixed_clients_under_default_settings(server_factory):
    server = server_factory()  # the defaults, nothing overridden
    info = httpx.get(server.url + "/info", timeout=10).json()["limits"]
    records, lock = [], threading.Lock()
    stop = threading.Event()
    rss = {"start": server.rss_kb()}

    def client_loop(seed: int):
        rng, local = np.random.default_rng(seed), []
        random.seed(seed)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                kind = random.choice(KINDS)
                t0 = time.perf_counter()
                inline, status, ok = _one(client, rng, kind)
                local.append((kind, inline, status, ok, time.perf_counter() - t0))
        with lock:
            records.extend(local)

    with HealthProbe(server.url, period=0.05) as probe:
        threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in range(CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(min(5.0, SOAK_S / 4))
        rss["warm"] = server.rss_kb()
        time.sleep(SOAK_S - min(5.0, SOAK_S / 4))
        stop.set()
        for t in threads:
            t.join(120)
    rss["end"] = server.rss_kb()
    latencies = np.array([r[4] for r in records]) * 1e3
    statuses = {}
    for r in records:
        statuses[r[2]] = statuses.get(r[2], 0) + 1
    figures = {
        "seconds": SOAK_S,
        "clients": CLIENTS,
        "requests": len(records),
        "statuses": statuses,
        "max_concurrency": info["max_concurrency"],
        "queue_timeout_s": info["queue_timeout_s"],
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p99_ms": round(float(np.percentile(latencies, 99)), 1),
        "max_ms": round(float(latencies.max()), 1),
        "p99_ms_by_kind": {
            kind: round(float(np.percentile([r[4] * 1e3 for r in records if r[0] == kind], 99)), 1)
            for kind in sorted({r[0] for r in records})
        },
        "healthz_p99_ms": round(probe.percentile(99) * 1e3, 1),
        "rss_start_mb": round(rss["start"] / 1024, 1),
        "rss_warm_mb": round(rss["warm"] / 1024, 1),
        "rss_end_mb": round(rss["end"] / 1024, 1),
    }
    record_figure("soak", figures)
    print("soak:", json.dumps(figures))
    assert len(records) > 10 * CLIENTS
    server_errors = [r for r in records if r[2] >= 500]
    assert not server_errors, f"{len(server_errors)} 5xx, e.g. {server_errors[:5]}"
    wrong = [r for r in records if not r[3]]
    assert not wrong, f"{len(wrong)} wrong answers, e.g. {wrong[:5]}"
    assert {r[0] for r in records} >= {"light", "heavy_binary", "heavy_json", "malformed"}
    assert not probe.failures, probe.failures[:3]
    assert rss["end"] - rss["warm"] < RSS_GROWTH_KB, rss
    assert server.proc.poll() is None
