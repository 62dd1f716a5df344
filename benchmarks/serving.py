"""Serving plumbing of the HTTP parts: the servers' command lines, request bodies on disk, and
load runs (`benchmarks.loadgen` processes) against a started server."""

from __future__ import annotations

import json
import os
import subprocess

from benchmarks import alternate, common
from benchmarks.common import PY, ROOT


def service_available() -> str | None:
    proc = subprocess.run(
        [PY, "-c", "import service.cli, service.app"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["import failed"])[-1][:160]
    return None


def service_cmd(port, workers, log_level="warning"):
    """The service's command line; `log_level` "info" (the default of `gradserve serve`) turns the access
    log on, "warning" keeps it off."""
    return [
        PY,
        "-m",
        "service",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        log_level,
    ]


def service_env(port, workers):
    return {
        "GRADSERVE_HOST": "127.0.0.1",
        "GRADSERVE_PORT": str(port),
        "GRADSERVE_WORKERS": str(workers),
        "GRADSERVE_DEVICE": "cpu",
        "GRADSERVE_LOG_LEVEL": "warning",
    }


def uvicorn_cmd(app, port, workers):
    """uvicorn serving `app` ("module:attribute", or a name in `benchmarks.apps`) as the service is served."""
    target = app if ":" in app else f"benchmarks.apps:{app}"
    return [
        PY,
        "-m",
        "uvicorn",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        "--no-access-log",
    ]


PROCS = 4  # load-generator processes at most; more connections are threads within them


def spread(connections: int) -> tuple[int, int]:
    """(processes, connections each) for `connections` concurrent connections."""
    procs = min(connections, PROCS)
    if connections % procs:
        raise ValueError(f"{connections} connections do not split evenly over {procs} processes")
    return procs, connections // procs


def load(port, path, body_file, headers, seconds, max_requests, procs=1, cpu_pgid=None, connections=1, cpus=None):
    """Run `procs` load-generator processes at once, `connections` connections each; returns aggregated
    stats: "rps" (answers/s), "ok_rps" (2xx answers/s), "p50"/"p99" (of the 2xx answers), "count",
    "ok", "non2xx", "failed", "errors", "statuses", "latencies". With `cpu_pgid` (a server's process
    group) also "cpu_s": the server's CPU time over the measured requests. With `cpus`, the load
    generators run pinned to those CPUs."""
    spec = json.dumps(
        {
            "port": port,
            "path": path,
            "body_file": body_file,
            "headers": headers,
            "seconds": seconds,
            "max_requests": max_requests,
            "connections": connections,
            "cpu_pgid": cpu_pgid,
        }
    )
    ps = [
        subprocess.Popen(
            [PY, "-m", "benchmarks.loadgen", spec],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=alternate.pinned(cpus),
        )
        for _ in range(procs)
    ]
    lat, elapsed, cpu = [], 0.0, 0.0
    sums = dict.fromkeys(("count", "ok", "non2xx", "failed", "errors"), 0)
    statuses: dict = {}
    failure = None
    for p in ps:
        try:
            so, se = p.communicate(timeout=seconds * 4 + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        if p.returncode != 0:
            failure = (se.strip().splitlines() or ["loadgen failed"])[-1][:160]
            continue
        d = json.loads(so.strip().splitlines()[-1])
        lat += d["latencies"]
        for key in sums:
            sums[key] += d[key]
        for status, n in d["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
        elapsed = max(elapsed, d["elapsed"])
        cpu += d.get("cpu_s", 0.0)
    if not sums["count"] and not sums["failed"]:
        return {"error": failure or "no requests"}
    return {
        "rps": sums["count"] / elapsed if elapsed else 0.0,
        "ok_rps": sums["ok"] / elapsed if elapsed else 0.0,
        "p50": common.percentile(lat, 50) if lat else None,
        "p99": common.percentile(lat, 99) if lat else None,
        **sums,
        "statuses": statuses,
        "latencies": lat,
        "cpu_s": cpu if cpu_pgid else None,
    }


def load_alternating(ports, path, body_file, headers, seconds, bursts, pgids, block, cpus=None) -> dict:
    """`loadgen.alternating` in a load-generator process (pinned to `cpus`): {"cpu": [[CPU seconds per
    request, a burst each], a server each]} or {"error"}."""
    spec = {"ports": ports, "path": path, "body_file": body_file, "headers": headers, "seconds": seconds}
    spec.update(bursts=bursts, cpu_pgids=pgids, block=block)
    p = subprocess.run(
        [PY, "-m", "benchmarks.loadgen", json.dumps(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=seconds * bursts * 4 + 120,
        preexec_fn=alternate.pinned(cpus),
    )
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["loadgen failed"])[-1][:160]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def write_body(tmp, name, body):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(body)
    return path


class Skip:
    def __init__(self, msg):
        self.msg = msg

    def __enter__(self):
        return common.Started(False, self.msg)

    def __exit__(self, *exc):
        return False


def maybe_service(missing, port, workers, log_level="warning", cpu=None):
    if missing:
        return Skip(f"service not available ({missing})")
    env = dict(service_env(port, workers), GRADSERVE_LOG_LEVEL=log_level)
    return common.server(
        service_cmd(port, workers, log_level), port, env=env, ready_path="/healthz", timeout=90, cpu=cpu
    )
