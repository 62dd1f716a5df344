"""A bounded load test against a real server process: no failures, flat RSS, bounded tapes."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import numpy as np

from .conftest import (
    binary_body,
    decode_response,
    json_tensor,
    record_figure,
    simple_graph,
)

CLIENTS = 6
SECONDS = 6.0


def _live_tapes(server) -> int | None:
    """Live tapes from /metrics (a gauge with 'tape' in its name) or /info."""
    text = httpx.get(server.url + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^(\w*tapes?\w*)(\{[^}]*\})?\s+([0-9.eE+-]+)$", line)
        if m and "byte" not in m.group(1) and "total" not in m.group(1) and "created" not in m.group(1):
            return int(float(m.group(3)))
    info = httpx.get(server.url + "/info", timeout=5).json()
    for key in ("live_tapes", "tapes"):
        value = info.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, dict):
            for k in ("live", "count", "retained"):
                if isinstance(value.get(k), int):
                    return value[k]
    return None


def _worker(url, seed, stop_at, latencies, failures, counts):
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=url, timeout=30) as client:
        i = 0
        while time.monotonic() < stop_at and i < 100_000:
            i += 1
            x = rng.standard_normal(rng.integers(1, 64)).astype(np.float32)
            header = {"graph": simple_graph(shape=x.shape), "id": i}
            kind = i % 5
            if kind == 0:
                endpoint, header["inputs"] = "forward", [json_tensor("x", x)]
            elif kind == 1:
                endpoint, header["inputs"] = "backward", [json_tensor("x", x)]
            elif kind == 2:  # retained and never used again: must expire / be evicted
                endpoint, header["inputs"], header["parameters"] = (
                    "forward",
                    [json_tensor("x", x)],
                    {"retain_graph": True},
                )
            else:
                endpoint = "backward" if kind == 3 else "forward"
                header["parameters"] = {"binary_data_output": True, "retain_graph": kind == 4}
            t0 = time.perf_counter()
            try:
                if "inputs" in header:
                    response = client.post(
                        f"/{endpoint}", content=json.dumps(header), headers={"Content-Type": "application/json"}
                    )
                else:
                    body, headers = binary_body(header, {"x": x})
                    response = client.post(f"/{endpoint}", content=body, headers=headers)
                latencies.append(time.perf_counter() - t0)
                got = decode_response(response)
                assert got["id"] == i
                assert np.isclose(got["outputs"]["s"], 2 * x.sum(dtype=np.float32), rtol=1e-4, atol=1e-4)
                if endpoint == "backward":
                    np.testing.assert_array_equal(got["grads"]["x"], np.full_like(x, 2.0))
                counts[endpoint] = counts.get(endpoint, 0) + 1
            except Exception as err:  # noqa: BLE001 - every failure is collected and reported
                failures.append(f"{endpoint}#{i}: {err!r}"[:300])


def _run_load(server, seconds, clients):
    latencies, failures, counts = [], [], {}
    stop_at = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_worker, args=(server.url, s, stop_at, latencies, failures, counts), daemon=True)
        for s in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    assert not any(t.is_alive() for t in threads), "a load client hung"
    return latencies, failures, counts


def test_load_mixed_traffic(server_factory):
    # the default max_concurrency and queue_timeout_s (fewer slots than clients): the README's figure
    server = server_factory(tape_ttl_s=0.5, max_tapes=32, log_level="warning")
    _run_load(server, 1.0, CLIENTS)  # warm-up: imports, caches, thread pools, allocator arenas
    rss_before = server.rss_kb()
    latencies, failures, counts = _run_load(server, SECONDS, CLIENTS)
    rss_after = server.rss_kb()
    tapes = _live_tapes(server)
    assert not failures, f"{len(failures)} failed requests, e.g. {failures[:5]}"
    lat = np.array(latencies) * 1000
    p50, p90, p99, pmax = np.percentile(lat, [50, 90, 99, 100])
    limits = httpx.get(server.url + "/info", timeout=10).json()["limits"]
    figures = {
        "clients": CLIENTS,
        "seconds": SECONDS,
        "max_concurrency": limits["max_concurrency"],
        "requests": len(latencies),
        "by_endpoint": counts,
        "rps": round(len(latencies) / SECONDS, 1),
        "p50_ms": round(p50, 2),
        "p90_ms": round(p90, 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(pmax, 2),
        "rss_before_mb": round(rss_before / 1024, 1),
        "rss_after_mb": round(rss_after / 1024, 1),
        "rss_delta_mb": round((rss_after - rss_before) / 1024, 1),
        "live_tapes_at_end": tapes,
    }
    print("\nload:", json.dumps(figures))
    record_figure("load", figures)
    assert len(latencies) > 100
    assert rss_after - rss_before < 50 * 1024, f"RSS grew by {(rss_after - rss_before) / 1024:.1f} MB"
    assert tapes is not None, "neither /metrics nor /info reports the live tape count"
    assert tapes <= 32
    time.sleep(1.2)  # > 2 x tape_ttl_s: the sweeper must have dropped every never-reused tape
    assert _live_tapes(server) == 0
    assert server.stop() == 0
