"""Shared plumbing: worker subprocesses, statistics, machine facts, target verdicts, servers."""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from benchmarks import alternate
from benchmarks.rounds import Runs, ratios, record, run_rounds, side_rounds

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
LABELS = {
    "engine": "engine",
    "torch": "PyTorch CPU eager",
    "numpy": "NumPy manual (floor)",
    "embedded": "client embedded",
    "remote": "client remote (1 worker)",
    "resident": "client remote, resident parameters (1 worker)",
    "executor": "gradserve Executor (server compute, in-process)",
    "autograd": "HIPS autograd",
    "jax": "JAX eager (no jit)",
    "jaxjit": "JAX jax.jit (compiled ahead)",
    "first": "first request of a new graph",
    "repeat": "repeat of a planned graph",
}


def have(module: str) -> bool:
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, timeout=60).returncode == 0


def environment(env: dict | None) -> dict:
    """This process's environment with `env`'s changes (a None value removes a variable)."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return full_env


def command(case: str, side: str, params: dict) -> list[str]:
    return [PY, "-m", "benchmarks.worker", case, side, json.dumps(params)]


def worker(case: str, side: str, timeout: float = 600, env: dict | None = None, **params) -> dict:
    """Run one case on one side alone in a fresh process; returns the worker's JSON ({"times": [...],
    ...}) or {"error": "..."}."""
    try:
        proc = subprocess.run(
            command(case, side, params), cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=environment(env)
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    return alternate.result_of(proc.returncode, proc.stdout, proc.stderr)


def together(commands: dict, round_s: float, meters: dict | None = None) -> Callable:
    """A `run_rounds(..., together=True)` measure: the round's sides, `commands` {side: (argv, env
    changes)}, alive at once and sampled in alternating batches (`benchmarks.alternate.run`), each
    for at most `round_s` seconds of its own sampling, all pinned to one CPU (`alternate.round_cpu`)."""

    def measure(sides, r):
        live = {side: (commands[side][0], environment(commands[side][1])) for side in sides}
        return alternate.run(live, ROOT, timeout=3 * round_s + 120, meters=meters, cpu=alternate.round_cpu(r))

    return measure


def interleave(case: str, sides: list[str], rounds: int, round_s: float, **params) -> Runs:
    """Run `case` on every side in `rounds` rounds (`benchmarks.rounds.run_rounds`): in a round, one
    fresh worker process per side, all alive at once and sampled in alternating short batches
    (`benchmarks.alternate`), the sides' order alternating between rounds. Every round runs: a side's
    sampling stops after `round_s` seconds of it (the worker's `max_s`), so a slow side takes fewer
    samples instead of cutting rounds short. The per-round figures are kept for the results JSON."""
    commands = {side: (command(case, side, {**params, "max_s": round_s}), None) for side in sides}
    runs = run_rounds(sides, rounds, together(commands, round_s), together=True)
    record(f"{case} {json.dumps(params, sort_keys=True)}", side_rounds(runs))
    return runs


def rtext(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def installed(sides: list[str], module_of: dict) -> tuple[list[str], dict]:
    """(the sides whose module is installed, {side: result saying "not installed"} for the others)."""
    found = {m: have(m) for m in set(module_of.values())}
    missing = {
        s: {"times": [], "extra": [], "error": f"not installed ({module_of[s]})"}
        for s in sides
        if s in module_of and not found[module_of[s]]
    }
    return [s for s in sides if s not in missing], missing


def stats(times: list[float]) -> dict | None:
    if not times:
        return None
    return {"median": statistics.median(times), "min": min(times), "max": max(times), "n": len(times)}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def verdict(value: float | None, target: float, kind: str = "<=") -> str:
    """'met' or 'missed by X%' for `value` against `target` (value <= target, or >= for kind '>=')."""
    if value is None or value != value:
        return "n/a"
    if kind == "<=":
        return f"met (≤{target:g})" if value <= target else f"missed (≤{target:g}) by {100 * (value / target - 1):.0f}%"
    return f"met (≥{target:g})" if value >= target else f"missed (≥{target:g}) by {100 * (1 - value / target):.0f}%"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def timing_table(
    result: dict, labels: dict, baselines: list[str], scale: float = 1.0, unit=fmt_time
) -> tuple[str, dict]:
    """A table of median/min/max per side (every round's samples) and its ratio to each baseline:
    the median of the per-round ratios where `result` has rounds (`Runs`), else of the medians;
    returns (markdown, ratios)."""
    med = {s: (stats(r["times"]) or {}).get("median") for s, r in result.items()}
    per_round = isinstance(result, Runs) and len(result.loads) > 0
    headers = ["side", "median", "min", "max", "n"] + [
        f"÷ {labels[b]}{' (median of rounds)' if per_round else ''}" for b in baselines
    ]
    rows, ratios_found = [], {}
    for side, r in result.items():
        st = stats(r["times"])
        if st is None:
            why = r["error"] or "no samples"
            rows.append(
                [labels[side], why if why.startswith("not installed") else f"skipped: {why}", "", "", ""]
                + ["" for _ in baselines]
            )
            continue
        row = [labels[side], unit(st["median"] * scale), unit(st["min"] * scale), unit(st["max"] * scale), st["n"]]
        for b in baselines:
            ratio = None
            if per_round and b in result:
                got = [x for x in ratios(result, side, b) if x is not None]
                ratio = statistics.median(got) if got else None
            elif med.get(b):
                ratio = st["median"] / med[b]
            if ratio is None:
                row.append("-")
            else:
                ratios_found[(side, b)] = ratio
                row.append(f"{ratio:.2f}x")
        rows.append(row)
    return table(headers, rows), ratios_found


# --- machine facts --------------------------------------------------------------------------

FACTS_CODE = r"""
import json, os, platform, sys, io, contextlib
facts = {}
import numpy
facts["numpy"] = numpy.__version__
buf = io.StringIO()
try:
    cfg = numpy.show_config(mode="dicts")
    blas = cfg.get("Build Dependencies", {}).get("blas", {})
    facts["numpy BLAS"] = f"{blas.get('name')} {blas.get('version', '')}".strip()
except Exception as err:
    facts["numpy BLAS"] = f"unknown ({err})"
try:
    import threadpoolctl
    facts["threadpools"] = "; ".join(f"{p['internal_api']} {p.get('version')} ({p['num_threads']} threads)" for p in threadpoolctl.threadpool_info())
except Exception:
    facts["threadpools"] = "threadpoolctl not installed"
for mod in ("torch", "fastapi", "uvicorn", "httpx", "orjson", "cupy"):
    try:
        m = __import__(mod)
        facts[mod] = m.__version__
        if mod == "torch":
            facts["torch threads"] = m.get_num_threads()
            facts["torch BLAS/parallel"] = m.__config__.parallel_info().splitlines()[0:6]
    except Exception:
        facts[mod] = "not installed"
print(json.dumps(facts, default=str))
"""


def machine_facts() -> dict:
    facts = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cores (os.cpu_count)": os.cpu_count(),
        "cores usable (sched_getaffinity)": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?",
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    facts["cpu model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if hasattr(os, "getloadavg"):
        facts["load average at start (1, 5, 15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GRADSERVE_DEVICE"):
        facts[var] = os.environ.get(var, "unset")
    try:
        proc = subprocess.run([PY, "-c", FACTS_CODE], capture_output=True, text=True, timeout=120, cwd=ROOT)
        facts.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except Exception as err:  # noqa: BLE001
        facts["libraries"] = f"unknown ({err})"
    try:
        proc = subprocess.run(
            [PY, "-c", "from engine.backend import gpu_available; print(gpu_available())"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        facts["GPU (engine.backend.gpu_available)"] = proc.stdout.strip() or proc.stderr.strip()[-200:]
    except Exception as err:  # noqa: BLE001
        facts["GPU (engine.backend.gpu_available)"] = f"unknown ({err})"
    return facts


# --- servers --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0, path: str | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                if path is None:
                    return True
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                data = s.recv(64)
                if b" 200 " in data:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


class Started(NamedTuple):
    """A started server: whether it answers, why not, and its process group (its pid)."""

    ok: bool
    msg: str
    pgid: int | None = None


@contextmanager
def server(
    cmd: list[str],
    port: int,
    env: dict | None = None,
    ready_path: str | None = None,
    timeout: float = 60.0,
    cpu: int | None = None,
):
    """Start a server process (its own process group; with `cpu`, pinned to that CPU), wait until it
    answers, stop it after.

    Yields a `Started` (ok, message, process group)."""
    log = open(os.devnull, "w")
    errlog_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"gradserve-bench-{port}.log"
    errlog = open(errlog_path, "w")
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=log,
        stderr=errlog,
        env=dict(os.environ, **(env or {})),
        start_new_session=True,
        preexec_fn=alternate.pinned(None if cpu is None else {cpu}),
    )
    try:
        ok = wait_port(port, proc, timeout, ready_path)
        msg = ""
        if not ok:
            errlog.flush()
            tail = errlog_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            msg = f"server did not come up: {tail[0][:200]}"
        yield Started(ok, msg, proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()
        errlog.close()
        try:
            errlog_path.unlink()
        except OSError:
            pass
