"""Part 3: tensor transfer through `/forward` (an identity graph, `clone`) against a raw echo, 4 KiB to 64 MiB.

Each round starts a fresh raw-echo server and a fresh service (1 worker), both alive at once, and times
round trips of every size on each in short bursts taken in turns (the order rotating), so both see the
same machine state; a size's figure in a round is the service's MB/s ÷ the echo's in that round."""

from __future__ import annotations

import contextlib
import statistics
import tempfile

from benchmarks import common, payloads, rounds, serving
from benchmarks.common import fmt_time, table
from benchmarks.rounds import Target, run_rounds

KIB = 1 / 1024
SIZES = ((4 * KIB, "4 KiB"), (64 * KIB, "64 KiB"), (1, "1 MiB"), (4, "4 MiB"), (64, "64 MiB"))
JSON_UP_TO_MIB = 1  # larger JSON bodies pass max_json_body_bytes (4 MiB) and are refused
TARGET_24 = {"4 KiB", "64 KiB", "1 MiB"}  # issue 24: 4 KiB-1 MiB binary requests ≥80% of the raw echo


def _bodies(tmp):
    """{(size name, path label): (route, body file, headers)}."""
    out = {}
    for mib, name in SIZES:
        header, arrays = payloads.identity_request(mib)
        raw = arrays["x"].tobytes()
        out[(name, "raw octet-stream echo")] = (
            "/echo",
            serving.write_body(tmp, f"raw{name}", raw),
            {"Content-Type": "application/octet-stream"},
        )
        for binary in (True, False):
            if not binary and mib > JSON_UP_TO_MIB:
                continue
            body, headers = payloads.encode(header, arrays, binary)
            out[(name, f"/forward {'binary' if binary else 'JSON'}")] = (
                "/forward",
                serving.write_body(tmp, f"f{binary}{name}", body),
                headers,
            )
    return out


BURSTS = 4  # alternating bursts per size and side in a round


def _start(side, missing):
    port = common.free_port()
    if side == "raw":
        return port, common.server(serving.uvicorn_cmd("bare", port, 1), port, ready_path="/healthz")
    return port, serving.maybe_service(missing, port, 1)


def _measure_round(sides, r, bodies, quick, missing):
    """One round: both servers started (in the round's order) and alive at once; for each size, every
    path's round trips in `BURSTS` bursts taken in turns (the order rotating each turn), so the echo
    and the service see the same machine state. {side: {"sizes": {(size, path): stats}} or {"error": why}}."""
    with contextlib.ExitStack() as stack:
        ports, out = {}, {}
        for side in sides:
            port, ctx = _start(side, missing)
            started = stack.enter_context(ctx)
            if started.ok:
                ports[side], out[side] = port, {"sizes": {}}
            else:
                out[side] = {"error": started.msg}
        for _, name in SIZES:
            paths = [(label, "raw" if label.startswith("raw") else "service") for size, label in bodies if size == name]
            paths = [(label, side) for label, side in paths if side in ports]
            got = {label: {"times": [], "errors": 0} for label, _ in paths}
            big = name == "64 MiB"
            seconds = ((1.0 if big else 0.5) if quick else (4.0 if big else 1.5)) / BURSTS
            for turn in range(BURSTS):
                k = turn % len(paths) if paths else 0
                for label, side in paths[k:] + paths[:k]:
                    if "times" not in got[label]:
                        continue  # refused or failed in an earlier burst
                    route, body_file, headers = bodies[(name, label)]
                    d = serving.load(ports[side], route, body_file, headers, seconds, 3 if big and quick else 100_000)
                    if "error" in d:
                        got[label] = {"error": d["error"]}
                    elif not d["latencies"]:
                        got[label] = {"refused": f"{d['errors']} of {d['count'] + d['failed']} answers not 2xx"}
                    else:
                        got[label]["times"] += d["latencies"]
                        got[label]["errors"] += d["errors"]
            for label, side in paths:
                out[side]["sizes"][(name, label)] = got[label]
        return out


def _median(runs, side, r, key):
    return statistics.median(runs[side]["rounds"][r]["sizes"][key]["times"])


def _shares(runs, raw_key, side, key):
    """Per round: the echo's median round trip ÷ `side`'s (= `side`'s MB/s ÷ the echo's)."""
    return rounds.round_values(runs, lambda r: _median(runs, "raw", r, raw_key) / _median(runs, side, r, key))


def part3(quick: bool):
    out = [
        "## Part 3: tensor transfer through `/forward` (identity graph: `clone`), 1 worker\n",
        "One round trip = the tensor goes up and comes back; MB/s = tensor MB (one way) ÷ round-trip time. "
        "The raw echo is the bare ASGI app echoing the tensor's bytes as `application/octet-stream`, served by "
        f"uvicorn the same way. {rounds.ROUNDS} rounds; each starts a fresh echo server and a fresh service, both "
        f"alive at once, and times each size on both in {BURSTS} bursts a path taken in turns (the order rotating), "
        "1 connection, sequential requests. *÷ raw echo* = the service's "
        "MB/s ÷ the echo's in the same round (rounds min / median / max). JSON bodies above "
        f"{JSON_UP_TO_MIB} MiB are not sent (the service refuses JSON bodies over `max_json_body_bytes`).\n",
    ]
    targets = []
    missing = serving.service_available()
    with tempfile.TemporaryDirectory() as tmp:
        bodies = _bodies(tmp)
        runs = run_rounds(
            ["raw", "service"],
            rounds.ROUNDS,
            lambda sides, r: _measure_round(sides, r, bodies, quick, missing),
            together=True,
        )
    record = {"loads": runs.loads}
    rows = []
    for mib, name in SIZES:
        raw_key = (name, "raw octet-stream echo")
        for (size, label), _ in bodies.items():
            if size != name:
                continue
            side = "raw" if label.startswith("raw") else "service"
            slot = runs[side]
            got = [r["sizes"].get((size, label), {}) if r else {} for r in slot["rounds"]]
            times = [t for g in got for t in g.get("times", ())]
            record[f"{name} {label}"] = [
                {"median": statistics.median(g["times"]), "min": min(g["times"]), "n": len(g["times"])}
                if g.get("times")
                else g or None
                for g in got
            ]
            if not times:
                why = slot["error"] or next((g.get("refused") or g.get("error") for g in got if g), "not measured")
                rows.append([name, label, f"skipped: {why}", "", "", "", "", ""])
                shares = []
            else:
                shares = _shares(runs, raw_key, side, (size, label))
                share = Target("3", label, 0.8, ">=", "%", shares)
                rows.append(
                    [
                        name,
                        label,
                        fmt_time(statistics.median(times)),
                        fmt_time(min(times)),
                        fmt_time(max(times)),
                        f"{mib * 1.048576 / statistics.median(times):.0f}",
                        "-" if side == "raw" else share.spread(),
                        sum(g.get("errors", 0) for g in got),
                    ]
                )
            if label != "/forward binary":
                continue
            raw_times = [t for r in runs["raw"]["rounds"] if r for t in r["sizes"].get(raw_key, {}).get("times", ())]
            label24 = " (#24)" if name in TARGET_24 else ""
            targets.append(
                Target(
                    "3",
                    f"binary transfer {name} ≥80% of raw echo MB/s{label24}",
                    0.8,
                    ">=",
                    "%",
                    shares,
                    min(raw_times) / min(times) if raw_times and times else None,
                    list(runs.loads),
                    note="n/a (service not measured)",
                )
            )
    rounds.record("transfer", record)
    out += [
        table(
            ["tensor", "path", "median round trip", "min", "max", "MB/s (median)", "÷ raw echo MB/s", "non-2xx"], rows
        ),
        "",
        "Targets: " + "; ".join(t.summary() for t in targets) + "\n",
    ]
    return "\n".join(out), targets
