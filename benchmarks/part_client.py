"""Part 4: the client end-to-end, embedded and against a local server, next to the engine, PyTorch
and NumPy: the seed training loop (autograd through `client.Variable`) and the tutorials' tensor
program (its own backprop with plain tensor ops, nothing requires grad)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import urllib.request

from benchmarks import alternate, common, rounds, serving
from benchmarks.common import LABELS, PY, ROOT, fmt_time, table, timing_table
from benchmarks.loadgen import group_cpu_seconds, pin_group
from benchmarks.rounds import ratio_target, record, run_rounds, side_rounds

REMOTE = ("remote", "resident")  # the sides that talk to the server (`resident`: parameters kept there)
WARMUP_STEPS = 5  # the train case's untimed steps (`benchmarks.worker.case_train`)
TRAFFIC = re.compile(
    r'^gradserve_(requests_total|request_bytes_total|response_bytes_total)\{endpoint="/(?:forward|backward)"[^}]*\}'
    r"\s+(\S+)$",
    re.M,
)


def _traffic(url: str | None) -> dict | None:
    """The server's compute requests and body bytes each way so far ({"requests", "up", "down"}, from its
    /metrics), or None where it cannot be read."""
    if url is None:
        return None
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
            return traffic_of(answer.read().decode())
    except OSError:
        return None


def traffic_of(metrics: str) -> dict:
    """{"requests", "up", "down"}: the compute requests and their body bytes each way in a /metrics text."""
    names = {"requests_total": "requests", "request_bytes_total": "up", "response_bytes_total": "down"}
    totals = dict.fromkeys(names.values(), 0.0)
    for name, value in TRAFFIC.findall(metrics):
        totals[names[name]] += float(value)
    return totals


def _loops(case, sides, rounds_, max_s, env_remote, server_pgid=None, **params):
    """Run `case` on each side in `rounds_` rounds, a fresh process per side per round, the round's
    processes alive at once and stepping in alternating batches (`benchmarks.alternate`), each timing
    steps for at most `max_s` seconds; the client sides embedded (no GRADSERVE_URL) or remote
    (`env_remote`, whose server's CPU time over each side's own set-up and batches is counted when its
    process group `server_pgid` is given, and its requests and bytes each way per step from its /metrics).
    The round's sides share one CPU (`alternate.round_cpu`); the server is pinned to the others, where it
    runs beside its client as a server on another machine would, instead of wherever Linux puts it."""
    url = (env_remote or {}).get("GRADSERVE_URL")
    meters, commands = {}, {}
    for side in sides:
        remote = side in REMOTE
        commands[side] = (
            common.command(case, side, {**params, "max_s": max_s}),
            env_remote if remote else {"GRADSERVE_URL": None},
        )
        if remote and (server_pgid or url):
            meters[side] = lambda end: _meter(url, server_pgid, end)
    measure = common.together(commands, max_s, meters)

    def measure_round(live, r):
        if server_pgid and (cpus := alternate.other_cpus(r)):
            pin_group(server_pgid, cpus)  # the server on its own CPU, as on its own machine
        results = measure(live, r)
        for res in results.values():
            metered = res.pop("metered", None)
            if "error" in res or not metered:
                continue
            extra = res.get("extra") or {}
            ran = extra.get("ran", extra.get("steps", 1))
            if "server_cpu" in metered:  # the worker's warm-up steps included: an upper bound per step
                extra["server_cpu"] = metered["server_cpu"] / max(1, ran)
            # over every step, the warm-up's included (the first uploads what it sends once)
            extra.update({k: metered[k] / (ran + WARMUP_STEPS) for k in ("requests", "up", "down") if k in metered})
            res["extra"] = extra
        return results

    runs = run_rounds(sides, rounds_, measure_round, together=True)
    record(f"{case} {json.dumps(params, sort_keys=True)}", side_rounds(runs))
    return runs


def _meter(url: str | None, server_pgid: int | None, end: bool) -> dict | None:
    """The server's CPU seconds and its traffic counts so far (None where its /metrics cannot be read),
    its CPU read inside the /metrics requests (after the first at a window's start, before the last at
    its end), so that they are not counted."""
    cpu = {"server_cpu": group_cpu_seconds(server_pgid)} if server_pgid and end else {}
    traffic = _traffic(url) if url else {}
    if server_pgid and not end:
        cpu = {"server_cpu": group_cpu_seconds(server_pgid)}
    return None if traffic is None else {**traffic, **cpu}


def _totals(res, steps):
    def median_of(extras, key, show=fmt_time):
        values = [e[key] for e in extras if e.get(key) is not None]
        return show(statistics.median(values)) if values else "-"

    def kib(value):
        return f"{value / 1024:.1f} KiB"

    rows = [
        [
            LABELS[side],
            fmt_time(statistics.median([e["total"] for e in v["extra"]])),
            statistics.median([e["steps"] for e in v["extra"]]),
            len(v["extra"]),
            median_of(v["extra"], "cpu"),
            median_of(v["extra"], "server_cpu"),
            median_of(v["extra"], "requests", lambda n: f"{n:.2f}"),
            median_of(v["extra"], "up", kib),
            median_of(v["extra"], "down", kib),
        ]
        for side, v in res.items()
        if v["extra"]
    ]
    return table(
        [
            "side",
            f"loop total (up to {steps} steps)",
            "steps done",
            "rounds",
            "CPU / step (its process)",
            "server CPU / step",
            "requests / step",
            "up / step",
            "down / step",
        ],
        rows,
    )


def _target(targets, label, runs, side, base, limit):
    target = ratio_target("4", label, runs, side, base, limit)
    targets.append(target)
    return target.summary()


RESIDENT_TARGET = "seed loop remote with resident parameters ≤1.3x embedded (#24)"


def _train(quick, client_error, service, env_remote, targets):
    steps = 50 if quick else 500
    sides = ["engine", "torch", "numpy"] if client_error else ["embedded", *REMOTE, "engine", "torch", "numpy"]
    if env_remote is None:
        sides = [side for side in sides if side not in REMOTE]
    count = rounds.ROUNDS
    res = _loops("train", sides, count, 20 if quick else 60, env_remote, service.pgid, steps=steps)
    if client_error:
        res["embedded"] = {"times": [], "rounds": [], "extra": [], "error": client_error}
    for side in REMOTE:
        if side not in res:
            res[side] = {"times": [], "rounds": [], "extra": [], "error": client_error or service.msg}
    md, _ = timing_table(res, LABELS, ["embedded", "engine", "torch"])
    notes = [
        _target(targets, RESIDENT_TARGET, res, "resident", "embedded", 1.3),
        _target(targets, "remote training loop ≤1.3x embedded (#24)", res, "remote", "embedded", 1.3),
        _target(targets, "remote training loop ≤3x embedded", res, "remote", "embedded", 3.0),
        _target(targets, "remote training loop ≤2.5x embedded (#14)", res, "remote", "embedded", 2.5),
        _target(targets, "embedded client seed loop ≤1.15x engine (#14)", res, "embedded", "engine", 1.15),
    ]
    return [
        f"### (a) the seed training loop: {steps} steps (float32, SGD)\n",
        "Each side runs the loop in a fresh process each round (5 untimed warm-up steps), the sides stepping in "
        "alternating batches; one sample = one step, so the table is per step (median, robust to a busy "
        "machine's spikes) and *loop total* is the wall time of the side's batches, their dropped first steps "
        "included (median over rounds). Engine, embedded and remote run one program, the seed's "
        "(`w.data -= lr * w.grad.data`), with `engine` or `client` as the module; remote talks to a local "
        "1-worker server via `GRADSERVE_URL`. The resident side runs the seed loop as a user writes it with "
        "resident parameters (`client/README.md`): `optimizer = client.optim.SGD([w1, w2], lr, resident=True)`, "
        "then `loss.backward(); optimizer.step(); optimizer.zero_grad()` each step, so the parameters stay on "
        "the server and a step is one request carrying the batch. *CPU / step* is the side's own process "
        "(user + system, `time.process_time`) over the steps of its batches; *server CPU / step* is the server "
        "process group's over the remote side's own set-up and batches (its 5 warm-up steps included) ÷ the "
        "steps its batches ran; *requests*, *up* and *down* (request and answer bodies) are the server's "
        "`/metrics` counts over those windows per step, the warm-up's included (the resident side's first step "
        "uploads the parameters).\n",
        md,
        "",
        _totals(res, steps),
        "\nTargets (per-step medians): " + "; ".join(notes) + "\n",
    ]


def _tensor_program(quick, client_error, targets):
    steps = 20 if quick else 100
    sides = ["engine", "torch"] if client_error else ["embedded", "engine", "torch"]
    present, missing = common.installed(sides, {"torch": "torch"})
    count = rounds.ROUNDS
    res = _loops("tensorprog", present, count, 20 if quick else 60, None, steps=steps)
    res.update({side: {**m, "rounds": []} for side, m in missing.items()})
    if client_error:
        res["embedded"] = {"times": [], "rounds": [], "extra": [], "error": client_error}
    md, _ = timing_table(res, LABELS, ["engine", "torch"])
    note = _target(targets, "tensor program embedded ≤1.3x engine (#13)", res, "embedded", "engine", 1.3)
    return [
        f"### (b) a tensor program: the tutorials' `two_layer_net_tensor`, up to {steps} steps\n",
        "Its own backprop with plain tensor ops (`h.clamp(min=0)`, `grad_h[h < 0] = 0`, `.t().mm(...)`, "
        "`loss.item()` every step, nothing requires grad), written once (`benchmarks/programs.py`) and run "
        "with `torch`, `engine` or `client` (embedded: no server) as the module. 2 untimed warm-up steps; "
        "one sample = one step; a side stops early after its time budget (see *steps done*). Remote is not "
        "run here: issue 13 sets its target on the seed loop, which (a) measures.\n",
        md,
        "",
        _totals(res, steps),
        f"\nTarget (per-step medians): {note}\n",
    ]


def part4(quick: bool):
    out = ["## Part 4: client end-to-end\n"]
    targets = []
    probe = subprocess.run(
        [PY, "-c", "import client; client.Variable"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    client_error = (
        None
        if probe.returncode == 0
        else "client not importable: " + (probe.stderr.strip().splitlines() or ["?"])[-1][:120]
    )
    port = common.free_port()
    with serving.maybe_service(serving.service_available(), port, 1) as service:
        env_remote = {"GRADSERVE_URL": f"http://127.0.0.1:{port}"} if service.ok and not client_error else None
        out += _train(quick, client_error, service, env_remote, targets)
    out += _tensor_program(quick, client_error, targets)
    return "\n".join(out), targets
