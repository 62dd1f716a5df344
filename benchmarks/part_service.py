"""Part 2: the service over HTTP against the HTTP floor (echo apps) and the servers a user would run
instead: the hand-written FastAPI + torch and FastAPI + `jax.jit` endpoints (`benchmarks.endpoints`) and
LitServe + torch (`benchmarks.litserve_app`), with a concurrency sweep at 1, 4, 16 and 32 connections.

Each round starts every server afresh (the order alternating between rounds), all alive at once, and
loads them in turns, cell by cell of the sweep (a request at a connection count), the order rotating from
one cell to the next; a figure in a round is the service's ÷ the hand-written FastAPI + torch endpoint's
in that round."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile

from benchmarks import alternate, common, rounds, serving
from benchmarks.common import PY, fmt_time, table
from benchmarks.rounds import Target, run_rounds

CONNECTIONS = (1, 4, 16, 32)
LOADED = 4  # the connection count of the "loaded" figures of issues 6 and 14
TINY, SEED_JSON, SEED_BIN = "tiny graph /backward JSON", "seed net /backward JSON", "seed net /backward binary"
# (label, the endpoints' model, binary)
REQUESTS = ((TINY, "tiny", False), (SEED_JSON, "seed", False), (SEED_BIN, "seed", True))
ALL = tuple(r[0] for r in REQUESTS)
# key: (label, how it is started, module it needs, served with 1 worker only, the requests it serves)
SERVERS = {
    "bare": ("bare ASGI echo", "bare", None, False, (TINY, SEED_BIN)),
    "fast": ("FastAPI echo", "fast", None, False, (TINY, SEED_BIN)),
    "torch": ("hand-written FastAPI + torch", "benchmarks.endpoints:torch_app", "torch", True, ALL),
    "jax": ("hand-written FastAPI + jax.jit", "benchmarks.endpoints:jax_app", "jax", True, ALL),
    "litserve": ("LitServe + torch", "litserve", "litserve", True, (TINY, SEED_JSON)),
    "service": ("gradserve /backward", "service", None, False, ALL),
}
LOG_BURSTS = 12  # bursts a round of the access log's paired measurement, in which the servers take turns...
LOG_BLOCK = 50  # ... of this many requests
HAND = "torch"  # the baseline of the service's figures


def _bodies(tmp):
    """{(request label, server): (path, body file, headers, size)}: the echoes and the service get
    gradserve's body, the hand-written endpoints and LitServe only the input tensors (they know their model)."""
    from benchmarks import payloads

    made = {"tiny": payloads.tiny_request(), "seed": payloads.seed_request()}
    out = {}
    for label, model, binary in REQUESTS:
        header, arrays = made[model]
        for kind, hdr in (("graph", header), ("inputs", {})):
            body, headers = payloads.encode(hdr, arrays, binary)
            path = serving.write_body(tmp, f"{model}-{binary}-{kind}", body)
            for srv in SERVERS:
                if (kind == "inputs") == (srv in ("torch", "jax", "litserve")):
                    route = "/backward" if srv.startswith("service") else "/echo"
                    if srv in ("torch", "jax", "litserve"):
                        route = f"/{model}/backward"
                    out[(label, srv)] = (route, path, headers, len(body))
    return out


def _server(srv, port, workers, missing_service):
    """The context manager that starts `srv` (yields a `common.Started`)."""
    start = SERVERS[srv][1]
    if start == "service":
        return serving.maybe_service(missing_service, port, workers)
    if start == "litserve":
        cmd = [PY, "-m", "benchmarks.litserve_app", str(port)]
        return common.server(cmd, port, ready_path="/healthz", timeout=120)
    return common.server(serving.uvicorn_cmd(start, port, workers), port, ready_path="/healthz", timeout=120)


def _sweep_round(servers, r, workers, bodies, requests, connections, seconds, missing_service):
    """One round: every server in `servers` started afresh (in the round's order) and alive at once; then
    for each request and connection count, each server that serves it loaded in turn (the order rotating
    from one cell to the next), so the servers compared in a cell see the same machine state seconds
    apart. {srv: {"m": {"request @c": {"ok_rps", "non2xx", "failed", "p50", "p99", "cpu_per_request"}}}
    or {"error"}}."""
    with contextlib.ExitStack() as stack:
        live, out = {}, {}
        for srv in servers:
            port = common.free_port()
            started = stack.enter_context(_server(srv, port, workers, missing_service))
            if started.ok:
                live[srv], out[srv] = (port, started), {"m": {}}
            else:
                out[srv] = {"error": started.msg or "not started"}
        turn = 0
        for label in requests:
            for c in connections:
                procs, each = serving.spread(c)
                cell = [srv for srv in live if label in SERVERS[srv][4]]
                k = turn % len(cell) if cell else 0
                turn += 1
                for srv in cell[k:] + cell[:k]:
                    if srv not in live:
                        continue  # failed in an earlier cell
                    port, started = live[srv]
                    route, body_file, headers, _ = bodies[(label, srv)]
                    pgid = started.pgid if c == 1 else None
                    d = serving.load(port, route, body_file, headers, seconds, 10_000_000, procs, pgid, each)
                    if "error" in d:
                        out[srv] = {"error": d["error"]}
                        del live[srv]
                        continue
                    out[srv]["m"][f"{label} @{c}"] = {
                        "ok_rps": d["ok_rps"],
                        "non2xx": d["non2xx"],
                        "failed": d["failed"],
                        "statuses": d["statuses"],
                        "p50": d["p50"],
                        "p99": d["p99"],
                        "cpu_per_request": d["cpu_s"] / d["count"]
                        if d.get("cpu_s") is not None and d["count"]
                        else None,
                    }
        return out


def _sweep(servers, workers, bodies, requests, connections, seconds, count, missing_service):
    present = {}
    for srv in servers:
        _, _, module, one_worker, _ = SERVERS[srv]
        if one_worker and workers != 1:
            continue
        present[srv] = None if not module or common.have(module) else f"not installed ({module})"
    runnable = [s for s, why in present.items() if why is None]
    runs = run_rounds(
        runnable,
        count,
        lambda srvs, r: _sweep_round(srvs, r, workers, bodies, requests, connections, seconds, missing_service),
        together=True,
    )
    for srv, why in present.items():
        if why:
            runs[srv] = {"rounds": [], "times": [], "extra": [], "error": why}
    rounds.record(f"service {workers} worker(s)", {"loads": runs.loads, **{s: v["rounds"] for s, v in runs.items()}})
    return runs


def _metric(runs, srv, r, key, stat):
    value = runs[srv]["rounds"][r]["m"][key][stat]
    if value is None:
        raise KeyError(stat)
    return value


def _per_round(runs, srv, key, stat, base=None):
    """Per round: `srv`'s `stat` at `key` ("request @c"), ÷ `base`'s when given."""
    if base is None:
        return rounds.round_values(runs, lambda r: _metric(runs, srv, r, key, stat))
    return rounds.round_values(runs, lambda r: _metric(runs, srv, r, key, stat) / _metric(runs, base, r, key, stat))


def _of_rounds(runs, srv, key, stat, pick=statistics.median):
    got = [v for v in _per_round(runs, srv, key, stat) if v is not None]
    return pick(got) if got else None


def _refusals(found: list) -> str:
    """'0', or the count of non-2xx answers and broken connections over the rounds with each status's share."""
    statuses, failed = {}, 0
    for m in found:
        failed += m["failed"]
        for status, n in m["statuses"].items():
            if not status.startswith("2"):
                statuses[status] = statuses.get(status, 0) + n
    total = failed + sum(statuses.values())
    parts = [f"{status}: {n}" for status, n in sorted(statuses.items())] + ([f"failed: {failed}"] if failed else [])
    return f"{total} ({', '.join(parts)})" if total else "0"


def _sweep_table(runs, requests, connections, bodies):
    rows = []
    for label in requests:
        for c in connections:
            key = f"{label} @{c}"
            for srv, slot in runs.items():
                if label not in SERVERS[srv][4]:
                    continue
                name = SERVERS[srv][0]
                if not any(r and key in r["m"] for r in slot["rounds"]):
                    rows.append([label, c, name, f"skipped: {slot['error'] or 'not measured'}"] + [""] * 8)
                    continue
                bad = sum(r["m"][key]["non2xx"] + r["m"][key]["failed"] for r in slot["rounds"] if r and key in r["m"])
                cells = [
                    label,
                    c,
                    name,
                    f"{_of_rounds(runs, srv, key, 'ok_rps'):.0f}",
                    bad,
                    fmt_time(_of_rounds(runs, srv, key, "p50")),
                    fmt_time(_of_rounds(runs, srv, key, "p99")),
                ]
                for stat in ("ok_rps", "p50", "p99"):
                    ratio = Target("2", "", None, values=_per_round(runs, srv, key, stat, HAND))
                    cells.append("-" if srv == HAND or HAND not in runs else ratio.spread())
                cpu = _of_rounds(runs, srv, f"{label} @1", "cpu_per_request")
                cells.append(fmt_time(cpu) if c == 1 and cpu is not None else "")
                cells.append(f"{bodies[(label, srv)][3] / 1024:.1f} KiB")
                rows.append(cells)
    return table(
        [
            "request",
            "connections",
            "server",
            "successful req/s",
            "non-2xx + failed (all rounds; by status)",
            "p50",
            "p99",
            "req/s ÷ hand-written torch",
            "p50 ÷ hand-written torch",
            "p99 ÷ hand-written torch",
            "server CPU / req",
            "body",
        ],
        rows,
    )


def _worst(runs, label, connections, stat, pick):
    """Per round: the worst over the connection counts of the service's `stat` ÷ the hand-written endpoint's."""
    per_c = [_per_round(runs, "service", f"{label} @{c}", stat, HAND) for c in connections]
    out = []
    for values in zip(*per_c):
        out.append(None if any(v is None for v in values) else pick(values))
    return out


def _of_minimums(runs, label, connections, stat, pick):
    """The service's minimum over the rounds ÷ the hand-written endpoint's, the worst over connection counts."""
    values = []
    for c in connections:
        a = _of_rounds(runs, "service", f"{label} @{c}", stat, min)
        b = _of_rounds(runs, HAND, f"{label} @{c}", stat, min)
        if a is None or not b:
            return None
        values.append(a / b)
    return pick(values)


def _serve_who_waits(runs, connections):
    """Issue 24, item 1, per request: 0 non-2xx; successful req/s ≥1.2x and p99 ≤1.5x the hand-written endpoint's at
    every connection count."""
    targets, span = [], f"{connections[0]}-{connections[-1]} connections"
    for label, _, _ in REQUESTS:
        bad = rounds.round_values(
            runs,
            lambda r, label=label: sum(
                _metric(runs, "service", r, f"{label} @{c}", "non2xx")
                + _metric(runs, "service", r, f"{label} @{c}", "failed")
                for c in connections
            ),
        )
        targets += [
            Target("2", f"serve who waits, {label}: 0 non-2xx at {span} (#24)", 0, "<=", "n", bad, None, runs.loads),
            Target(
                "2",
                f"serve who waits, {label}: successful req/s ≥1.2x hand-written FastAPI+torch at each of {span} (#24)",
                1.2,
                ">=",
                "x",
                _worst(runs, label, connections, "ok_rps", min),
                _of_minimums(runs, label, connections, "ok_rps", min),
                list(runs.loads),
            ),
            Target(
                "2",
                f"serve who waits, {label}: p99 ≤1.5x hand-written FastAPI+torch at each of {span} (#24)",
                1.5,
                "<=",
                "x",
                _worst(runs, label, connections, "p99", max),
                _of_minimums(runs, label, connections, "p99", max),
                list(runs.loads),
            ),
        ]
    return targets


def _earlier_targets(runs):
    """Issue 6's and 14's targets, on the 1-worker runs."""
    loads = list(runs.loads)
    loaded, one = f"{TINY} @{LOADED}", f"{TINY} @1"
    share = _per_round(runs, "service", loaded, "ok_rps", "fast")
    p50 = _per_round(runs, "service", one, "p50")
    min_off = _of_rounds(runs, "service", loaded, "ok_rps", min)

    def hand(label, key):
        return (
            _per_round(runs, "service", key, "p50", HAND),
            _of_minimums(runs, label, (int(key.rsplit("@", 1)[1]),), "p50", max),
        )

    seed_p50, seed_min = hand(SEED_BIN, f"{SEED_BIN} @1")
    tiny_p50, tiny_min = hand(TINY, one)
    share_min = None
    fast_min = _of_rounds(runs, "fast", loaded, "ok_rps", min)
    if fast_min and min_off:
        share_min = min_off / fast_min
    return [
        Target(
            "2",
            f"tiny graph, 1 worker: ≥50% of FastAPI echo req/s ({LOADED} connections)",
            0.5,
            ">=",
            "%",
            share,
            share_min,
            loads,
        ),
        Target(
            "2",
            "tiny graph, 1 worker: p50 < 1 ms (1 connection)",
            1e-3,
            "<=",
            "ms",
            p50,
            _of_rounds(runs, "service", one, "p50", min),
            loads,
        ),
        Target(
            "2",
            f"tiny graph, 1 worker: ≥60% of FastAPI echo req/s ({LOADED} connections) (#14)",
            0.6,
            ">=",
            "%",
            share,
            share_min,
            loads,
        ),
        Target(
            "2",
            "service seed net binary /backward p50 ≤0.8x hand-written FastAPI+torch (#14)",
            0.8,
            "<=",
            "x",
            seed_p50,
            seed_min,
            loads,
        ),
        Target(
            "2",
            "service tiny graph p50 ≤1.0x hand-written FastAPI+torch (#14)",
            1.0,
            "<=",
            "x",
            tiny_p50,
            tiny_min,
            loads,
        ),
    ]


def _log_pair(bodies, seconds, missing_service, r):
    """One round of the access log's cost: the service with the log off (`--log-level warning`) and on
    (`info`), started side by side, both pinned to one CPU (the usable CPUs in turn by round) and the load
    generator to the others, and sent tiny-graph requests in turns of LOG_BLOCK, one connection each, one
    request in flight (`loadgen.alternating`), in LOG_BURSTS bursts of `seconds`, so both see the same
    machine, the same core, milliseconds apart; {"m": {"off"|"on": [server CPU seconds per request, a burst each]}}."""
    route, body_file, headers, _ = bodies[(TINY, "service")]
    cpu = alternate.round_cpu(r)
    others = None if cpu is None else (set(os.sched_getaffinity(0)) - {cpu} or None)
    port_off = common.free_port()
    with serving.maybe_service(missing_service, port_off, 1, "warning", cpu) as off:
        port_on = common.free_port()
        with serving.maybe_service(missing_service, port_on, 1, "info", cpu) as on:
            if not (off.ok and on.ok):
                return {"error": off.msg or on.msg or "not started"}
            pgids = [off.pgid, on.pgid]
            d = serving.load_alternating(
                [port_off, port_on], route, body_file, headers, seconds, LOG_BURSTS, pgids, LOG_BLOCK, others
            )
            return {"error": d["error"]} if "error" in d else {"m": {"off": d["cpu"][0], "on": d["cpu"][1]}}


def _log_target(pairs) -> tuple[Target, str]:
    """Issue 24 item 5: the access log's cost, server CPU per request with it on ÷ off, less 1, per round."""

    def pairs_of(r):
        m = pairs["log"]["rounds"][r]["m"]
        return list(zip(m["off"], m["on"]))

    cost = rounds.round_values(pairs, lambda r: statistics.median(on / off for off, on in pairs_of(r)) - 1)
    lines = [
        f"round {r + 1}: "
        + ", ".join(f"{fmt_time(off)} → {fmt_time(on)}" for off, on in pairs_of(r))
        + f" ({cost[r]:+.1%})"
        for r in range(len(pairs.loads))
        if pairs["log"]["rounds"][r]
    ]
    target = Target(
        "2",
        "access log on costs <5% of the server's CPU per tiny-graph request (paired bursts, 1 connection) (#24)",
        0.05,
        "<=",
        "%",
        cost,
        None,
        list(pairs.loads),
    )
    return target, "; ".join(lines) or f"not measured: {pairs['log']['error']}"


def part2(quick: bool):
    out = ["## Part 2: service over HTTP on 127.0.0.1\n"]
    missing = serving.service_available()
    seconds = 0.6 if quick else 1.5
    count = rounds.ROUNDS
    out += [
        f"Load: the raw-socket keep-alive generator (`benchmarks/loadgen.py`): *c connections* = up to "
        f"{serving.PROCS} generator processes with c ÷ processes connections each (a thread per connection), "
        f"every connection sending its next request when the last is answered; {seconds:g}s per measurement "
        f"after a 0.5s warm-up. The generators share the machine's {os.cpu_count()} cores with the server. "
        f"{count} rounds; each round starts every server afresh (the order reversed every other round), all "
        "alive at once, and loads them in turns cell by cell of the sweep (a request at a connection count; "
        "the order rotating from cell to cell), then stops them. *successful req/s* counts 2xx answers only; *non-2xx + failed* "
        "counts refusals (503 and other statuses) and broken connections; p50/p99 are of the 2xx answers. "
        "Columns *÷ hand-written torch* are the per-round ratios (min / median / max) to the hand-written "
        "FastAPI + torch endpoint measured in the same round; the other columns are medians over the rounds. "
        "*Server CPU / req* = the server process group's user + system CPU time (its CPU-time clocks) over the "
        "1-connection run ÷ its requests.\n",
        "The peers are what a user would run instead of gradserve: the hand-written endpoints "
        "(`benchmarks/endpoints.py`, 1 worker): FastAPI, one fixed model per route, the same tensors in the "
        "same encoding (without the graph, which they don't need), torch autograd or a `jax.jit`-compiled "
        "`value_and_grad` run in the `async` route, the answer in gradserve's shape; and LitServe + torch "
        "(`benchmarks/litserve_app.py`: the same torch functions in LitServe's inference worker process; LitServe "
        "takes JSON bodies only, so it has no binary rows). The service runs with `--log-level warning` (access "
        "log off) except in the access log's measurement below.\n",
    ]
    if missing:
        out.append(
            f"Service: skipped: `python -m service` not importable ({missing}); the other servers are still measured.\n"
        )
    with tempfile.TemporaryDirectory() as tmp:
        bodies = _bodies(tmp)
        runs = _sweep(list(SERVERS), 1, bodies, ALL, CONNECTIONS, seconds, count, missing)
        two = _sweep(["fast", "service"], 2, bodies, (TINY, SEED_BIN), (LOADED, 16), seconds, min(count, 2), missing)
        pairs = run_rounds(["log"], count, lambda side, r: _log_pair(bodies, seconds, missing, r))
    rounds.record("access log", {"loads": pairs.loads, "rounds": pairs["log"]["rounds"]})
    log_target, log_text = _log_target(pairs)
    targets = _serve_who_waits(runs, CONNECTIONS) + _earlier_targets(runs) + [log_target]
    out += [
        "### 1 worker: the concurrency sweep\n",
        _sweep_table(runs, ALL, CONNECTIONS, bodies),
        "",
        f"### 2 workers ({min(count, 2)} rounds, {LOADED} and 16 connections)\n",
        _sweep_table(two, (TINY, SEED_BIN), (LOADED, 16), bodies),
        "",
        f"### Access log ({count} rounds)\n",
        "Its cost is the server's CPU per request, not req/s (which swings more than 5% between runs on a "
        "loaded machine): each round starts the service twice side by side, with the log off "
        "(`--log-level warning`) and on (`--log-level info`, the default; text lines to stderr, here a file), "
        "both pinned to one CPU (the usable CPUs in turn by round) and the load generator to the other(s), "
        f"and sends them tiny-graph `/backward` requests in turns of {LOG_BLOCK}, one connection each and one "
        f"request in flight, in {LOG_BURSTS} bursts of {seconds:g}s; a round's figure is the "
        "median over its bursts of the CPU per request on ÷ off, less 1 (CPU from each process's CPU-time clock, "
        f"in ns). CPU per request, off → on, burst by burst: {log_text}.\n",
        "Targets (1 worker; the values of every round): " + "; ".join(t.summary() for t in targets) + "\n",
    ]
    return "\n".join(out), targets
