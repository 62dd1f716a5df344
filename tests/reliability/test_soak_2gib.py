"""Sizing that is measured (issue 21): the default server in a 2 GiB memory cgroup, fed good and hostile
traffic at once, is never OOM-killed, never answers 5xx, and answers `/healthz` within its liveness probe.

The cgroup is made where the machine lets this process (cgroup v2 `memory.max`, or v1
`memory.limit_in_bytes`); the server's peak RSS (VmHWM) is held under 2 GiB in any case, so the bound is
checked on every machine. Traffic: light requests, 16 MiB binary seed-net-sized backwards, retained tapes,
`/v2` model loads, and the hostile requests of the hardening rounds (grad nodes sharing an output, a
20,000-input `cat`, an FP16 2048x2048 matmul, bodies declared and never sent, lists nested 1,000 deep,
a wrong-shaped custom gradient). `GRADSERVE_SOAK_2GIB_S` sets the duration (default 30 s); the RSS curve is
recorded for docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from .conftest import HEADER_LENGTH, binary_body, record_figure, simple_request
from .edge_kit import HealthProbe

SOAK_S = float(os.environ.get("GRADSERVE_SOAK_2GIB_S", "30"))
LIMIT = 2 * 2**30
PROBE_TIMEOUT_S = 5.0  # deploy/k8s: the liveness probe's timeoutSeconds
CLIENTS = 5


def confine(pid: int) -> tuple[str, Path | None]:
    """Move `pid` into a new memory cgroup of 2 GiB: (how it was confined or why not, the group)."""
    own = Path("/proc/self/cgroup").read_text().splitlines()
    for line in own:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base, limit_file = Path("/sys/fs/cgroup") / path.lstrip("/"), "memory.max"
        elif "memory" in controllers.split(","):
            base, limit_file = Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.limit_in_bytes"
        else:
            continue
        group = base / f"gradserve-soak-{pid}"
        try:
            group.mkdir()
            (group / limit_file).write_text(str(LIMIT))
            (group / "cgroup.procs").write_text(str(pid))
            return f"cgroup {group} ({limit_file}={LIMIT})", group
        except OSError as err:
            with contextlib.suppress(OSError):
                group.rmdir()
            return f"no cgroup ({type(err).__name__}: {err}); the peak RSS bound is checked instead", None
    return "no memory cgroup controller here; the peak RSS bound is checked instead", None


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _grad_fan_in(n=3000):
    nodes = [{"id": "x", "op": "input", "requires_grad": True}, {"id": "s", "op": "sum", "inputs": ["x"]}]
    nodes += [{"id": f"a{i}", "op": "neg", "inputs": ["x"]} for i in range(n)]
    nodes += [{"id": f"g{i}", "op": "grad", "inputs": ["s", f"a{i}"]} for i in range(n)]
    graph = {"version": "1.1", "nodes": nodes, "outputs": ["g0"]}
    return {"graph": graph, "inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}


def _cat_fan_in(k=20_000):
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "c", "op": "cat", "inputs": ["x"] * k, "attrs": {"dim": 0}},
        {"id": "s", "op": "sum", "inputs": ["c"]},
    ]
    return {
        "graph": {"version": 1, "nodes": nodes, "outputs": ["s"]},
        "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
    }


def _fp16_matmul(n=2048):
    nodes = [{"id": "a", "op": "input"}, {"id": "h", "op": "mm", "inputs": ["a", "a"]}]
    return {
        "graph": {"version": 1, "nodes": nodes, "outputs": ["h"]},
        "inputs": [{"name": "a", "shape": [n, n], "datatype": "FP16", "parameters": {"binary_data_size": 2 * n * n}}],
    }


def _seed_net(rng):
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    w1 = rng.standard_normal((1000, 4096)).astype(np.float32) * 0.01  # 16 MiB: a large binary upload
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input"},
            {"id": "w1", "op": "input", "requires_grad": True},
            {"id": "h", "op": "mm", "inputs": ["x", "w1"]},
            {"id": "r", "op": "relu", "inputs": ["h"]},
            {"id": "s", "op": "sum", "inputs": ["r"]},
        ],
        "outputs": ["s"],
    }
    return binary_body({"graph": graph, "parameters": {"binary_data_output": True}}, {"x": x, "w1": w1})


def _declared_and_never_sent(port):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        f"POST /backward HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{HEADER_LENGTH}: 10\r\n"
        f"Content-Length: {128 * 2**20}\r\n\r\n".encode()
    )
    return sock


def _one(client, rng, kind, port, held):
    """(status, expected statuses) of one request of `kind`."""
    if kind == "light":
        return client.post("/backward", json=simple_request(rng.random(2).tolist())).status_code, {200}
    if kind == "seed_net":
        body, headers = _seed_net(rng)
        return client.post("/backward", content=body, headers=headers).status_code, {200, 503}
    if kind == "tape":
        request = simple_request(rng.random(2).tolist())
        request["parameters"] = {"retain_graph": True}
        return client.post("/backward", json=request).status_code, {200}
    if kind == "model":
        name = f"m{rng.integers(8)}"
        config = {"config": json.dumps(simple_request()["graph"])}
        return client.post(f"/v2/repository/models/{name}/load", json={"parameters": config}).status_code, {200, 409}
    if kind == "grad_fan_in":
        return client.post("/forward", json=_grad_fan_in()).status_code, {200, 413}
    if kind == "cat_fan_in":
        return client.post("/backward", json=_cat_fan_in()).status_code, {200, 413}
    if kind == "fp16_matmul":
        request = _fp16_matmul()
        body = json.dumps(request).encode() + b"\0" * (2 * 2048 * 2048)
        headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(json.dumps(request)))}
        return client.post("/forward", content=body, headers=headers).status_code, {413}
    if kind == "declared":
        held.append(_declared_and_never_sent(port))
        while len(held) > 4:
            held.pop(0).close()
        return 200, {200}
    if kind == "deep":
        text = '{"graph": {"version": 1, "nodes": [{"id": "x", "op": "input", "attrs": ' + "[" * 1000 + "]" * 1000
        text += '}], "outputs": ["x"]}, "inputs": []}'
        return client.post("/forward", content=text, headers={"Content-Type": "application/json"}).status_code, {
            400,
            422,
        }
    raise AssertionError(kind)


KINDS = ["light"] * 8 + ["seed_net"] * 2 + ["tape", "model", "grad_fan_in", "cat_fan_in", "fp16_matmul"]
KINDS += ["declared", "deep"]


def test_the_default_server_in_2_gib_survives_mixed_good_and_hostile_traffic(server_factory):
    server = server_factory()  # the defaults, nothing overridden
    how, group = confine(server.proc.pid)
    print(f"[soak 2 GiB] {how}")
    try:
        soak(server, how)
    finally:
        server.stop()
        if group is not None:
            with contextlib.suppress(OSError):
                group.rmdir()


def soak(server, how):
    curve, stop = [], threading.Event()
    bad, lock = [], threading.Lock()
    counts: dict = {}

    def sample():
        t0 = time.monotonic()
        while not stop.is_set():
            curve.append((round(time.monotonic() - t0, 1), server.rss_kb() // 1024))
            stop.wait(0.5)

    def client_loop(seed):
        rng, held = np.random.default_rng(seed), []
        random.seed(seed)
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while not stop.is_set():
                kind = random.choice(KINDS)
                try:
                    status, expected = _one(client, rng, kind, server.port, held)
                except httpx.HTTPError as err:
                    status, expected = f"{type(err).__name__}", {200}
                with lock:
                    counts[kind] = counts.get(kind, 0) + 1
                    if status not in expected:
                        bad.append((kind, status))
        for sock in held:
            sock.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    with HealthProbe(server.url, period=0.1) as probe:
        threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in range(CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(SOAK_S)
        stop.set()
        for t in threads:
            t.join(180)
    sampler.join(10)
    peak_mib = vm_hwm_kb(server.proc.pid) // 1024
    assert server.proc.poll() is None, f"the server died (OOM kill?): {server.output()[-2000:]}"
    assert not bad, bad[:10]  # no 5xx, and every hostile request its 4xx
    assert not probe.failures, probe.failures[:3]
    p99 = probe.percentile(99)
    assert p99 < PROBE_TIMEOUT_S, f"/healthz p99 {p99:.2f} s"
    assert peak_mib * 2**20 < LIMIT, f"peak RSS {peak_mib} MiB"
    record_figure(
        "soak_2gib",
        {
            "confined": how,
            "seconds": SOAK_S,
            "requests": counts,
            "healthz_p50_ms": round(probe.percentile(50) * 1e3, 1),
            "healthz_p99_ms": round(p99 * 1e3, 1),
            "peak_rss_mib": peak_mib,
            "rss_mib_curve": curve[:: max(1, len(curve) // 20)],
        },
    )
