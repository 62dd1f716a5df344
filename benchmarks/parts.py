"""The five parts. Each returns (markdown section, [target rows]); a target row is
(part, target, value text, verdict)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks import common
from benchmarks.common import (
    PY,
    ROOT,
    fmt_time,
    interleave,
    stats,
    table,
    timing_table,
    verdict,
)

LABELS = {"engine": "engine", "torch": "PyTorch CPU eager", "numpy": "NumPy manual (floor)",
          "embedded": "client embedded", "remote": "client remote (1 worker)"}


def _ratio(ratios, a, b):
    return ratios.get((a, b))


def _rtext(r):
    return "-" if r is None else f"{r:.2f}x"


# --- part 1: engine vs PyTorch vs NumPy ----------------------------------------------------------

def part1(quick: bool):
    out, targets = ["## Part 1: engine vs PyTorch CPU eager vs NumPy with manual gradients\n"], []
    sides = ["engine", "torch", "numpy"]
    rounds = 2 if quick else 4

    res = interleave("chain100", sides, rounds, 60 if quick else 150, reps=100 if quick else 300, warmup=20)
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    r = _ratio(ratios, "engine", "torch")
    out += ["### (a) per-op overhead: a chain of 100 ops on 2x2 float32 (alternating mul, add), then backward\n",
            "One sample = build the chain + `sum().backward()`.\n", md,
            f"\nTarget: engine ≤ 0.8x PyTorch: {_rtext(r)} → **{verdict(r, 0.8)}**\n"]
    targets.append(("1a", "100-op chain ≤0.8x PyTorch", _rtext(r), verdict(r, 0.8)))

    for dtype in ("float32", "float64"):
        res = interleave("seed", sides, rounds, 60 if quick else 150, dtype=dtype, reps=40 if quick else 150, warmup=10)
        md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
        rn, rt = _ratio(ratios, "engine", "numpy"), _ratio(ratios, "engine", "torch")
        out += [f"### (b) seed two-layer net (N=64, D_in=1000, H=100, D_out=10), forward + backward, {dtype}\n", md,
                f"\nTargets: ≤ 1.1x NumPy floor: {_rtext(rn)} → **{verdict(rn, 1.1)}**; "
                f"≤ 1.0x PyTorch: {_rtext(rt)} → **{verdict(rt, 1.0)}**\n"]
        targets.append(("1b", f"seed net {dtype} ≤1.1x NumPy", _rtext(rn), verdict(rn, 1.1)))
        targets.append(("1b", f"seed net {dtype} ≤1.0x PyTorch", _rtext(rt), verdict(rt, 1.0)))

    res = interleave("large", sides, 1 if quick else 3, 150 if quick else 300, reps=2 if quick else 4, warmup=1)
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    rn = _ratio(ratios, "engine", "numpy")
    out += ["### (c) large MLP (N=512, 4096, 4096, 1024) float32, forward + backward (x does not require grad)\n", md,
            f"\nTarget: ≤ 1.05x NumPy floor: {_rtext(rn)} → **{verdict(rn, 1.05)}**\n"]
    targets.append(("1c", "large MLP ≤1.05x NumPy", _rtext(rn), verdict(rn, 1.05)))

    res = interleave("chain100k", sides, 1 if quick else 3, 120 if quick else 240, length=100_000)
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    mem_rows = []
    for side, r in res.items():
        if r["extra"]:
            growth = [e["peak_rss_growth_mib"] for e in r["extra"]]
            peak = [e["peak_rss_mib"] for e in r["extra"]]
            mem_rows.append([LABELS[side], f"{statistics.median(growth):.1f} MiB", f"{statistics.median(peak):.1f} MiB", len(growth)])
        else:
            mem_rows.append([LABELS[side], f"skipped: {r['error']}", "", ""])
    out += ["### (d) a 100,000-op chain (2x2), build + backward: time and peak memory\n",
            "One fresh worker process per sample; memory = growth of `ru_maxrss` over the process's "
            "baseline after imports and a 10-op warm-up chain.\n", md, "",
            table(["side", "peak RSS growth (median)", "peak RSS", "n"], mem_rows), ""]
    return "\n".join(out), targets


# --- HTTP plumbing ----------------------------------------------------------------------------

def _service_available() -> str | None:
    proc = subprocess.run([PY, "-c", "import service.cli, service.app"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["import failed"])[-1][:160]
    return None


def _service_cmd(port, workers):
    return [PY, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
            "--log-level", "warning"]


def _service_env(port, workers):
    return {"GRADSERVE_HOST": "127.0.0.1", "GRADSERVE_PORT": str(port), "GRADSERVE_WORKERS": str(workers),
            "GRADSERVE_DEVICE": "cpu", "GRADSERVE_LOG_LEVEL": "warning"}


def _uvicorn_cmd(app, port, workers):
    return [PY, "-m", "uvicorn", f"benchmarks.apps:{app}", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--log-level", "warning", "--no-access-log"]


def _load(port, path, body_file, headers, seconds, max_requests, procs):
    """Run `procs` load-generator processes at once; returns aggregated stats."""
    spec = json.dumps({"port": port, "path": path, "body_file": body_file, "headers": headers,
                       "seconds": seconds, "max_requests": max_requests, "connections": 1})
    ps = [subprocess.Popen([PY, "-m", "benchmarks.loadgen", spec], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for _ in range(procs)]
    lat, count, errors, elapsed = [], 0, 0, 0.0
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
        count += d["count"]
        errors += d["errors"]
        elapsed = max(elapsed, d["elapsed"])
    if not lat:
        return {"error": failure or "no requests"}
    return {"rps": count / elapsed if elapsed else 0.0, "p50": common.percentile(lat, 50), "p99": common.percentile(lat, 99),
            "count": count, "errors": errors, "latencies": lat}


def _write_body(tmp, name, body):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(body)
    return path


# --- part 2: service over HTTP ---------------------------------------------------------------

def part2(quick: bool):
    from benchmarks import payloads

    out = ["## Part 2: service over HTTP on 127.0.0.1\n"]
    targets = []
    missing = _service_available()
    seconds = 1.5 if quick else 3.0
    rounds = 1 if quick else 2
    procs = 4
    out.append(f"Load: the raw-socket keep-alive generator (`benchmarks/loadgen.py`; `wrk` "
               f"{'found but not used' if subprocess.run(['which', 'wrk'], capture_output=True).returncode == 0 else 'not installed'}). "
               f"*Latency* = 1 connection, sequential requests; *throughput* = {procs} generator processes with one "
               f"keep-alive connection each. {seconds:g}s per measurement, {rounds} interleaved round(s); "
               f"the generators share the machine's {os.cpu_count()} cores with the server.\n")
    if missing:
        out.append(f"Service: skipped: `python -m service` not importable ({missing}); the HTTP floor is still measured.\n")
    with tempfile.TemporaryDirectory() as tmp:
        bodies = {}
        for label, (header, arrays), binary in (("tiny graph /backward JSON", payloads.tiny_request(), False),
                                                ("seed net /backward JSON", payloads.seed_request(), False),
                                                ("seed net /backward binary", payloads.seed_request(), True)):
            body, headers = payloads.encode(header, arrays, binary)
            bodies[label] = (_write_body(tmp, f"b{len(bodies)}", body), headers, len(body))
        for workers in (1, 2):
            ports = {"bare": common.free_port(), "fast": common.free_port(), "service": common.free_port()}
            results = {}
            with common.server(_uvicorn_cmd("bare", ports["bare"], workers), ports["bare"], ready_path="/healthz") as (ok_b, msg_b), \
                 common.server(_uvicorn_cmd("fast", ports["fast"], workers), ports["fast"], ready_path="/healthz") as (ok_f, msg_f), \
                 _maybe_service(missing, ports["service"], workers) as (ok_s, msg_s):
                status = {"bare": (ok_b, msg_b), "fast": (ok_f, msg_f), "service": (ok_s, msg_s)}
                for _ in range(rounds):
                    for label, (path_file, headers, size) in bodies.items():
                        for srv in ("bare", "fast", "service"):
                            ok, msg = status[srv]
                            key = (label, srv)
                            if not ok:
                                results.setdefault(key, {"error": msg or "not started"})
                                continue
                            path = "/backward" if srv == "service" else "/echo"
                            lat = _load(ports[srv], path, path_file, headers, seconds / 2, 100_000, 1)
                            thr = _load(ports[srv], path, path_file, headers, seconds, 1_000_000, procs)
                            prev = results.get(key)
                            if "error" in lat or "error" in thr:
                                results.setdefault(key, {"error": lat.get("error") or thr.get("error")})
                                continue
                            if prev and "error" not in prev:
                                lat["latencies"] = prev["lat"]["latencies"] + lat["latencies"]
                                thr["latencies"] = prev["thr"]["latencies"] + thr["latencies"]
                                thr["rps"] = statistics.median([prev["thr"]["rps"], thr["rps"]]) if rounds == 2 else thr["rps"]
                                thr["errors"] += prev["thr"]["errors"]
                            for d in (lat, thr):
                                d["p50"], d["p99"] = common.percentile(d["latencies"], 50), common.percentile(d["latencies"], 99)
                            results[key] = {"lat": lat, "thr": thr}
            rows = []
            names = {"bare": "bare ASGI echo", "fast": "FastAPI echo", "service": "gradserve /backward"}
            for label, (_, _, size) in bodies.items():
                for srv in ("bare", "fast", "service"):
                    r = results.get((label, srv), {"error": "not run"})
                    if "error" in r:
                        rows.append([label, names[srv], f"{size / 1024:.1f} KiB", f"skipped: {r['error']}", "", "", "", "", "", ""])
                        continue
                    fast = results.get((label, "fast"), {})
                    rel = f"{r['thr']['rps'] / fast['thr']['rps']:.0%}" if "thr" in fast else "-"
                    rows.append([label, names[srv], f"{size / 1024:.1f} KiB", fmt_time(r["lat"]["p50"]), fmt_time(r["lat"]["p99"]),
                                 f"{r['thr']['rps']:.0f}", fmt_time(r["thr"]["p50"]), fmt_time(r["thr"]["p99"]), rel,
                                 r["thr"]["errors"]])
            out += [f"### {workers} worker{'s' if workers > 1 else ''}\n",
                    table(["request", "server", "body", "p50 (1 conn)", "p99 (1 conn)", "req/s (loaded)", "p50 (loaded)",
                           "p99 (loaded)", "req/s ÷ FastAPI echo", "errors"], rows), ""]
            if workers == 1:
                svc = results.get(("tiny graph /backward JSON", "service"), {})
                fast = results.get(("tiny graph /backward JSON", "fast"), {})
                if "thr" in svc and "thr" in fast:
                    share = svc["thr"]["rps"] / fast["thr"]["rps"]
                    p50 = svc["lat"]["p50"]
                    targets.append(("2", "tiny graph, 1 worker: ≥50% of FastAPI echo req/s", f"{share:.0%}", verdict(share, 0.5, ">=")))
                    targets.append(("2", "tiny graph, 1 worker: p50 < 1 ms", fmt_time(p50), verdict(p50 * 1e3, 1.0)))
                    out.append(f"Targets (1 worker, tiny graph): req/s ≥ 50% of FastAPI echo: {share:.0%} → **{verdict(share, 0.5, '>=')}**; "
                               f"p50 < 1 ms: {fmt_time(p50)} → **{verdict(p50 * 1e3, 1.0)}**\n")
                else:
                    targets.append(("2", "tiny graph, 1 worker: ≥50% of FastAPI echo req/s; p50 < 1 ms", "-", "n/a (service not measured)"))
    return "\n".join(out), targets


class _Skip:
    def __init__(self, msg):
        self.msg = msg

    def __enter__(self):
        return False, self.msg

    def __exit__(self, *exc):
        return False


def _maybe_service(missing, port, workers):
    if missing:
        return _Skip(f"service not available ({missing})")
    return common.server(_service_cmd(port, workers), port, env=_service_env(port, workers), ready_path="/healthz", timeout=90)


# --- part 3: tensor transfer -------------------------------------------------------------------

def part3(quick: bool):
    from benchmarks import payloads

    out = ["## Part 3: tensor transfer through `/forward` (identity graph: `clone`), 1 worker\n",
           "One round trip = the tensor goes up and comes back; MB/s = tensor MB (one way) ÷ round-trip time "
           "(median over the samples). The raw echo is the bare ASGI app echoing the tensor's bytes as "
           "`application/octet-stream`, served by uvicorn the same way, in the same run.\n"]
    targets = []
    missing = _service_available()
    sizes = (4, 64)
    reps = {4: 5 if quick else 20, 64: 2 if quick else 6}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ports = {"bare": common.free_port(), "service": common.free_port()}
        with common.server(_uvicorn_cmd("bare", ports["bare"], 1), ports["bare"], ready_path="/healthz") as (ok_b, msg_b), \
             _maybe_service(missing, ports["service"], 1) as (ok_s, msg_s):
            for mib in sizes:
                header, arrays = payloads.identity_request(mib)
                raw = arrays["x"].tobytes()
                cases = {"raw octet-stream echo": ("bare", "/echo", _write_body(tmp, "raw", raw), {"Content-Type": "application/octet-stream"}, ok_b, msg_b)}
                for binary in (True, False):
                    if not binary and mib == 64 and quick:
                        continue
                    body, headers = payloads.encode(header, arrays, binary)
                    cases[f"/forward {'binary' if binary else 'JSON'}"] = ("service", "/forward", _write_body(tmp, f"f{binary}", body), headers, ok_s, msg_s)
                measured = {}
                n = reps[mib]
                for _ in range(2):  # interleave: raw, binary, JSON, raw, binary, JSON
                    for label, (srv, path, body_file, headers, ok, msg) in cases.items():
                        if not ok:
                            measured[label] = {"error": msg}
                            continue
                        count = max(1, n // 2) if "JSON" not in label or mib == 4 else 1
                        d = _load(ports[srv], path, body_file, headers, 300, count, 1)
                        prev = measured.get(label)
                        if "error" in d:
                            measured.setdefault(label, d)
                            continue
                        if prev and "latencies" in prev:
                            d["latencies"] = prev["latencies"] + d["latencies"]
                        measured[label] = d
                raw_rate = None
                for label, d in measured.items():
                    if "error" in d:
                        rows.append([f"{mib} MiB", label, f"skipped: {d['error']}", "", "", "", ""])
                        continue
                    st = stats(d["latencies"])
                    rate = mib * 1.048576 / st["median"]
                    if label.startswith("raw"):
                        raw_rate = rate
                    rel = f"{rate / raw_rate:.0%}" if raw_rate else "-"
                    rows.append([f"{mib} MiB", label, fmt_time(st["median"]), fmt_time(st["min"]), fmt_time(st["max"]),
                                 f"{rate:.0f}", rel])
                    if label == "/forward binary" and raw_rate:
                        share = rate / raw_rate
                        targets.append(("3", f"binary transfer {mib} MiB ≥80% of raw echo MB/s", f"{share:.0%}", verdict(share, 0.8, ">=")))
                if "/forward binary" not in measured or "error" in measured.get("/forward binary", {}):
                    targets.append(("3", f"binary transfer {mib} MiB ≥80% of raw echo MB/s", "-", "n/a (service not measured)"))
    out += [table(["tensor", "path", "median round trip", "min", "max", "MB/s", "÷ raw echo"], rows), ""]
    if quick:
        out.append("(`--quick` skips the 64 MiB JSON round trip.)\n")
    return "\n".join(out), targets


# --- part 4: client end-to-end -----------------------------------------------------------------

def part4(quick: bool):
    steps = 50 if quick else 500
    out = [f"## Part 4: client end-to-end: {steps} steps of the seed training loop (float32, SGD)\n",
           "Each side runs the loop in its own process (5 untimed warm-up steps); one sample = one step, so "
           "the table is per step (median, robust to a busy machine's spikes) and *loop total* is the whole "
           "loop's wall time (median over rounds). The client sides use only `client.Variable` (weights "
           "re-wrapped from NumPy each step); remote talks to a local 1-worker server via `GRADSERVE_URL`.\n"]
    targets = []
    have_client = subprocess.run([PY, "-c", "import client; client.Variable"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    missing = _service_available()
    sides = ["engine", "torch", "numpy"]
    env_remote = None
    rounds = 1 if quick else 3
    if have_client.returncode == 0:
        sides.insert(0, "embedded")
    port = common.free_port()
    with _maybe_service(missing, port, 1) as (ok, msg):
        if have_client.returncode == 0 and ok:
            sides.insert(1, "remote")
            env_remote = {"GRADSERVE_URL": f"http://127.0.0.1:{port}"}
        res = {s: {"times": [], "extra": [], "error": None} for s in sides}
        end = time.monotonic() + (150 if quick else 400)
        for _ in range(rounds):
            for side in sides:
                if res[side]["error"] or time.monotonic() > end:
                    continue
                env = env_remote if side == "remote" else {"GRADSERVE_URL": None}
                r = common.worker("train", side, timeout=max(60, end - time.monotonic()), env=env, steps=steps)
                if "error" in r:
                    res[side]["error"] = r["error"]
                else:
                    res[side]["times"] += r["times"]
                    res[side]["extra"].append(r.get("extra") or {})
    if have_client.returncode != 0:
        res["embedded"] = {"times": [], "extra": [], "error": "client not importable: " + (have_client.stderr.strip().splitlines() or ['?'])[-1][:120]}
    if "remote" not in res:
        res["remote"] = {"times": [], "extra": [], "error": msg if have_client.returncode == 0 else "client not importable"}
    md, ratios = timing_table(res, LABELS, ["embedded", "engine", "torch"])
    r = _ratio(ratios, "remote", "embedded")
    totals = [[LABELS[side], fmt_time(statistics.median([e["total"] for e in v["extra"]])), len(v["extra"])]
              for side, v in res.items() if v["extra"]]
    out += [md, "", table(["side", f"loop total ({steps} steps)", "rounds"], totals),
            f"\nTarget: remote ≤ 3x embedded (per-step medians): {_rtext(r)} → **{verdict(r, 3.0)}**\n"]
    targets.append(("4", "remote training loop ≤3x embedded", _rtext(r), verdict(r, 3.0)))
    return "\n".join(out), targets


# --- part 5: GPU -------------------------------------------------------------------------------

def part5(quick: bool):
    out = ["## Part 5: GPU (CuPy engine vs PyTorch CUDA)\n"]
    proc = subprocess.run([PY, "-c", "from engine.backend import gpu_available; print(gpu_available())"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    torch_cuda = subprocess.run([PY, "-c", "import torch; print(torch.cuda.is_available())"], cwd=ROOT,
                                capture_output=True, text=True, timeout=120).stdout.strip() == "True"
    if proc.stdout.strip() != "True":
        out.append("skipped: no GPU (`engine.backend.gpu_available()` is False: CuPy missing or no device)\n")
        return "\n".join(out), [("5", "GPU MLP ≤1.2x PyTorch CUDA", "-", "skipped: no GPU")]
    sides = ["engine", "torch"] if torch_cuda else ["engine"]
    labels = {"engine": "engine (CuPy)", "torch": "PyTorch CUDA"}
    res = interleave("gpu_large", sides, 2 if quick else 4, 120 if quick else 240, reps=5 if quick else 20)
    md, ratios = timing_table(res, labels, ["torch"])
    r = ratios.get(("engine", "torch"))
    out += ["### large MLP (N=512, 4096, 4096, 1024) float32, forward + backward, synchronized\n", md,
            f"\nTarget: ≤ 1.2x PyTorch CUDA: {_rtext(r)} → **{verdict(r, 1.2)}**\n"]
    res = interleave("gpu_transfer", sides, 2, 120, mib=64, reps=5 if quick else 10)
    md, _ = timing_table(res, labels, ["torch"])
    out += ["### host → device → host round trip, 64 MiB float32\n", md, ""]
    return "\n".join(out), [("5", "GPU MLP ≤1.2x PyTorch CUDA", _rtext(r), verdict(r, 1.2))]


PARTS = {"1": part1, "2": part2, "3": part3, "4": part4, "5": part5}

# Why a target is missed when it is, from the profiles recorded in benchmarks/CHANGES.md
# (keyed by the start of the target's label).
MISSED_BECAUSE = {
    "100-op chain": "CPython bookkeeping per op (~2 µs forward, ~3.5 µs per backward node incl. version "
                    "counters, edges, gradient fitting, freeing); PyTorch does it in C++ (Changes, round 2)",
    "seed net": "the 5 matmuls equal the floor's; the rest is the engine's dispatch of 12 ops and 6 "
                "backward nodes, run right after a cache-evicting matmul (Changes, round 2)",
    "large MLP": "~99% of the step is the floor's own 5 BLAS calls: run-to-run noise of few ~0.5 s "
                 "samples on a shared 2-core machine (Changes, round 1)",
    "tiny graph": "per request: engine forward+backward ~27 µs plus decode/plan/encode ~35 µs on top "
                  "of the routing FastAPI's echo also pays (Changes, round 2)",
    "binary transfer": "the server's decode + one encode pass over the tensor on top of the echo's "
                       "body read and write (Changes, round 2)",
    "remote training loop": "each step is a 650 KB request: the HTTP round trip plus a ~250 µs hand-off to a "
                            "compute thread and back, which the embedded loop doesn't pay (Changes, round 2)",
}


def why(target: str, verdict_text: str) -> str:
    """The recorded reason for a missed target ('' when it is met or has none)."""
    if not verdict_text.startswith("missed"):
        return ""
    return next((reason for key, reason in MISSED_BECAUSE.items() if target.startswith(key)), "")
