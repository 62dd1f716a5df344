"""Part 2: the service over HTTP against the HTTP floor (echo apps) and against the endpoint a user
would write instead (`benchmarks.endpoints`: FastAPI + torch, and FastAPI + `jax.jit`)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from contextlib import ExitStack

from benchmarks import common, serving
from benchmarks.common import fmt_time, table, verdict

# key: (label, uvicorn app or None for the service, module it needs, served with 1 worker only)
SERVERS = {
    "bare": ("bare ASGI echo", "bare", None, False),
    "fast": ("FastAPI echo", "fast", None, False),
    "torch": ("hand-written FastAPI + torch", "benchmarks.endpoints:torch_app", "torch", True),
    "jax": ("hand-written FastAPI + jax.jit", "benchmarks.endpoints:jax_app", "jax", True),
    "service": ("gradserve /backward", None, None, False),
}
# (label, the endpoints' model, binary)
REQUESTS = (
    ("tiny graph /backward JSON", "tiny", False),
    ("seed net /backward JSON", "seed", False),
    ("seed net /backward binary", "seed", True),
)


def _bodies(tmp):
    """{(request label, server): (path, body file, headers, size)}: the echoes get gradserve's body,
    the hand-written endpoints only the input tensors (they know their model)."""
    from benchmarks import payloads

    made = {"tiny": payloads.tiny_request(), "seed": payloads.seed_request()}
    out = {}
    for label, model, binary in REQUESTS:
        header, arrays = made[model]
        for kind, hdr in (("graph", header), ("inputs", {})):
            body, headers = payloads.encode(hdr, arrays, binary)
            path = serving.write_body(tmp, f"{model}-{binary}-{kind}", body)
            for srv in SERVERS:
                if (kind == "inputs") == (srv in ("torch", "jax")):
                    route = {"service": "/backward", "torch": f"/{model}/backward", "jax": f"/{model}/backward"}.get(
                        srv, "/echo"
                    )
                    out[(label, srv)] = (route, path, headers, len(body))
    return out


def _start(stack, srv, port, workers, missing_service):
    _, app, module, one_worker = SERVERS[srv]
    if one_worker and workers != 1:
        return None
    if module and not common.have(module):
        return common.Started(False, f"not installed ({module})")
    if app is None:
        return stack.enter_context(serving.maybe_service(missing_service, port, workers))
    return stack.enter_context(
        common.server(serving.uvicorn_cmd(app, port, workers), port, ready_path="/healthz", timeout=120)
    )


def _merge(prev, lat, thr):
    """One round's measurements added to the previous rounds'."""
    if prev is None:
        return {"lat": lat, "thr": thr, "rps": [thr["rps"]]}
    prev["lat"]["latencies"] += lat["latencies"]
    prev["lat"]["count"] += lat["count"]
    prev["lat"]["cpu_s"] += lat["cpu_s"]
    prev["thr"]["latencies"] += thr["latencies"]
    prev["thr"]["errors"] += thr["errors"]
    prev["rps"].append(thr["rps"])
    return prev


def _measure(started, ports, bodies, seconds, rounds, procs):
    results = {}
    for _ in range(rounds):
        for label, _, _ in REQUESTS:
            for srv, st in started.items():
                if (label, srv) in results and "error" in results[(label, srv)]:
                    continue
                if not st.ok:
                    results[(label, srv)] = {"error": st.msg or "not started"}
                    continue
                route, body_file, headers, _ = bodies[(label, srv)]
                lat = serving.load(ports[srv], route, body_file, headers, seconds / 2, 100_000, 1, cpu_pgid=st.pgid)
                thr = serving.load(ports[srv], route, body_file, headers, seconds, 1_000_000, procs)
                if "error" in lat or "error" in thr:
                    results[(label, srv)] = {"error": lat.get("error") or thr.get("error")}
                    continue
                results[(label, srv)] = _merge(results.get((label, srv)), lat, thr)
    for r in results.values():
        if "error" not in r:
            for d in (r["lat"], r["thr"]):
                d["p50"], d["p99"] = common.percentile(d["latencies"], 50), common.percentile(d["latencies"], 99)
            r["thr"]["rps"] = statistics.median(r["rps"])
            r["cpu_per_request"] = r["lat"]["cpu_s"] / r["lat"]["count"] if r["lat"]["count"] else None
    return results


def _rows(results, bodies, servers):
    rows = []
    for label, _, _ in REQUESTS:
        fast, hand = results.get((label, "fast"), {}), results.get((label, "torch"), {})
        for srv in servers:
            r = results.get((label, srv), {"error": "not run"})
            size = f"{bodies[(label, srv)][3] / 1024:.1f} KiB"
            if "error" in r:
                rows.append([label, SERVERS[srv][0], size, f"skipped: {r['error']}"] + [""] * 8)
                continue
            vs_hand = f"{r['lat']['p50'] / hand['lat']['p50']:.2f}x" if "lat" in hand else "-"
            rel = f"{r['thr']['rps'] / fast['thr']['rps']:.0%}" if "thr" in fast else "-"
            cpu = fmt_time(r["cpu_per_request"]) if r["cpu_per_request"] is not None else "-"
            rows.append(
                [
                    label,
                    SERVERS[srv][0],
                    size,
                    fmt_time(r["lat"]["p50"]),
                    fmt_time(r["lat"]["p99"]),
                    vs_hand,
                    cpu,
                    f"{r['thr']['rps']:.0f}",
                    fmt_time(r["thr"]["p50"]),
                    fmt_time(r["thr"]["p99"]),
                    rel,
                    r["thr"]["errors"],
                ]
            )
    return table(
        [
            "request",
            "server",
            "body",
            "p50 (1 conn)",
            "p99 (1 conn)",
            "p50 ÷ hand-written torch",
            "server CPU / req",
            "req/s (loaded)",
            "p50 (loaded)",
            "p99 (loaded)",
            "req/s ÷ FastAPI echo",
            "errors",
        ],
        rows,
    )


def _ratio(results, a, b, key="lat", stat="p50"):
    ra, rb = results.get(a, {}), results.get(b, {})
    return ra[key][stat] / rb[key][stat] if key in ra and key in rb else None


def _targets(results):
    """Issue 6's and issue 14's targets on the 1-worker run."""
    tiny, seed = "tiny graph /backward JSON", "seed net /backward binary"
    svc, fast = results.get((tiny, "service"), {}), results.get((tiny, "fast"), {})
    rows = []
    if "thr" in svc and "thr" in fast:
        share, p50 = svc["thr"]["rps"] / fast["thr"]["rps"], svc["lat"]["p50"]
        rows += [
            ("2", "tiny graph, 1 worker: ≥50% of FastAPI echo req/s", f"{share:.0%}", verdict(share, 0.5, ">=")),
            ("2", "tiny graph, 1 worker: p50 < 1 ms", fmt_time(p50), verdict(p50 * 1e3, 1.0)),
            ("2", "tiny graph, 1 worker: ≥60% of FastAPI echo req/s (#14)", f"{share:.0%}", verdict(share, 0.6, ">=")),
        ]
    else:
        rows.append(
            (
                "2",
                "tiny graph, 1 worker: ≥50% / ≥60% (#14) of FastAPI echo req/s; p50 < 1 ms",
                "-",
                "n/a (service not measured)",
            )
        )
    for target, a, b, limit in (
        (
            "service seed net binary /backward p50 ≤0.8x hand-written FastAPI+torch (#14)",
            (seed, "service"),
            (seed, "torch"),
            0.8,
        ),
        ("service tiny graph p50 ≤1.0x hand-written FastAPI+torch (#14)", (tiny, "service"), (tiny, "torch"), 1.0),
    ):
        r = _ratio(results, a, b)
        rows.append(
            (
                "2",
                target,
                "-" if r is None else f"{r:.2f}x",
                verdict(r, limit) if r is not None else "n/a (a side not measured)",
            )
        )
    return rows


def part2(quick: bool):
    out = ["## Part 2: service over HTTP on 127.0.0.1\n"]
    targets = []
    missing = serving.service_available()
    seconds = 1.5 if quick else 3.0
    rounds = 1 if quick else 2
    procs = 4
    wrk = subprocess.run(["which", "wrk"], capture_output=True).returncode == 0
    out += [
        f"Load: the raw-socket keep-alive generator (`benchmarks/loadgen.py`; `wrk` "
        f"{'found but not used' if wrk else 'not installed'}). "
        f"*Latency* = 1 connection, sequential requests; *throughput* = {procs} generator processes with one "
        f"keep-alive connection each. {seconds:g}s per measurement, {rounds} interleaved round(s); "
        f"the generators share the machine's {os.cpu_count()} cores with the server. Every server is its own "
        f"process (group), all started at once and measured in turn. *Server CPU / req* = the server process "
        f"group's user + system CPU time (`/proc/<pid>/stat`) over the latency run ÷ its requests.\n",
        "The hand-written endpoints (`benchmarks/endpoints.py`, 1 worker only) are what a user would write "
        "instead of gradserve: FastAPI, one fixed model per route, the same tensors in the same encoding "
        "(without the graph, which they don't need), torch autograd or a `jax.jit`-compiled "
        "`value_and_grad` run in the `async` route, the answer in gradserve's shape.\n",
    ]
    if missing:
        out.append(
            f"Service: skipped: `python -m service` not importable ({missing}); the other servers are still measured.\n"
        )
    with tempfile.TemporaryDirectory() as tmp:
        bodies = _bodies(tmp)
        for workers in (1, 2):
            ports = {srv: common.free_port() for srv in SERVERS}
            with ExitStack() as stack:
                started = {
                    srv: st for srv in SERVERS if (st := _start(stack, srv, ports[srv], workers, missing)) is not None
                }
                results = _measure(started, ports, bodies, seconds, rounds, procs)
            out += [f"### {workers} worker{'s' if workers > 1 else ''}\n", _rows(results, bodies, list(started)), ""]
            if workers == 1:
                targets += _targets(results)
                out.append("Targets (1 worker): " + "; ".join(f"{t[1]}: {t[2]} → **{t[3]}**" for t in targets) + "\n")
    return "\n".join(out), targets
