"""A round's sides under one machine state: their worker processes alive together, sampling in turns.

The coordinator (`run`) starts each side's worker, one after another, and waits until it has done its
set-up and warm-up and says it is ready (`samples` in the worker). Then it hands out short batches:
it writes a batch's length in seconds to one side's stdin, and that side times samples for about
that long and answers on stdout with how many it has and whether it is done; the next side in the
turn's order goes next, the order rotating by one each turn. Only one side runs at any moment: the
others block reading their pipe. A side is done when it has its `reps` samples or has spent its
`max_s` seconds of sampling (its batches' time, not the time it waited); then its stdin is closed,
and it prints its result and exits as it always did. A worker whose case does not sample through
`samples` (one timed build, a custom loop) runs to its end at its turn in the set-up, the others
waiting. The first sample of a batch is run as that side's warm-up after the others' batches
(caches, branch predictors) and dropped, unless it alone takes longer than a batch (a sample that
long is its own warm-up); every side is treated alike. Where the coordinator is given a `cpu`, every
side of the round is pinned to that one CPU (`os.sched_setaffinity`), so the sides of a ratio also
share a core: on a VM, one process can land on a faster or slower vCPU than its peer.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

BATCH_S = 0.02  # seconds of samples a side takes per turn
TAG = "@batch "  # the prefix of a worker's protocol lines on stdout
PACED = "GRADSERVE_BENCH_PACED"  # set in a worker's environment: sample in batches the coordinator hands out


# --- the worker's side ------------------------------------------------------------------------------


def _say(message: dict) -> None:
    sys.stdout.write(TAG + json.dumps(message) + "\n")
    sys.stdout.flush()


def samples(step: Callable, reps: int, warmup: int, max_s: float) -> tuple[list, dict]:
    """`step`'s timed samples after `warmup` untimed calls: up to `reps` of them, stopping once
    `max_s` seconds of sampling are spent; and {"ran": calls timed or dropped, "wall": seconds
    sampling, "cpu": this process's CPU seconds sampling}. In batches handed out over stdin
    where the coordinator asked for it (`PACED` set), else in one go."""
    for _ in range(warmup):
        step()
    times: list = []
    spent = {"ran": 0, "wall": 0.0, "cpu": 0.0}
    paced = os.environ.get(PACED) == "1"
    if paced:
        _say({"ready": True})
    while len(times) < reps and spent["wall"] < max_s:
        batch_s = max_s
        if paced:
            line = sys.stdin.readline()
            if not line.strip():
                break  # the coordinator closed the pipe: stop here
            batch_s = float(line)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(reps - len(times) + (1 if paced else 0)):
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            spent["ran"] += 1
            if not (paced and i == 0 and t1 - t0 <= batch_s):
                times.append(t1 - t0)
            if t1 - wall >= batch_s or len(times) >= reps:
                break
        spent["wall"] += time.perf_counter() - wall
        spent["cpu"] += time.process_time() - cpu
        if paced:
            _say({"n": len(times), "done": len(times) >= reps or spent["wall"] >= max_s})
    return times, spent


# --- the coordinator --------------------------------------------------------------------------------


def result_of(returncode: int, stdout: str, stderr: str) -> dict:
    """A worker's result: its last JSON line, or {"error": ...} from its exit status and last words."""
    if returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {returncode}: {tail[0][:200]}"}
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "worker printed no result"}


class _Side:
    """One side's worker process and the lines it has written so far."""

    def __init__(self, cmd: list, env: dict, cwd, timeout: float, meter: Callable | None, cpu: int | None = None):
        self.errors = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env={**env, PACED: "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            preexec_fn=pinned({cpu} if cpu is not None else None),
        )
        self.timeout, self.meter, self.metered = timeout, meter, {}
        self.buffer, self.lines, self.result = b"", [], None

    def _window(self, action: Callable) -> dict | None:
        """`action()`'s reply, the meter's growth over it added to `metered`."""
        before = self.meter(False) if self.meter else None
        reply = action()
        after = self.meter(True) if self.meter else None
        if before is not None and after is not None:
            for key, value in after.items():
                self.metered[key] = self.metered.get(key, 0.0) + value - before[key]
        return reply

    def _reply(self) -> dict | None:
        """The worker's next protocol message; None once it has ended (`result` then set)."""
        deadline = time.monotonic() + self.timeout
        out = self.proc.stdout
        assert out is not None
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(TAG):
                    return json.loads(text[len(TAG) :])
                self.lines.append(text)
            left = deadline - time.monotonic()
            if left <= 0:
                self.finish(f"timed out after {self.timeout:.0f}s")
                return None
            if select.select([out], [], [], left)[0]:
                chunk = os.read(out.fileno(), 65536)
                if not chunk:
                    self.finish()
                    return None
                self.buffer += chunk

    def ready(self) -> bool:
        """Wait for the worker's set-up; False where it ended instead (its result kept)."""
        return self._window(self._reply) is not None

    def batch(self, seconds: float) -> bool:
        """One batch of samples; True while the side wants more."""

        def ask():
            try:
                self.proc.stdin.write(f"{seconds}\n".encode())  # type: ignore[union-attr]
                self.proc.stdin.flush()  # type: ignore[union-attr]
            except OSError:
                pass  # it has ended: its exit says why
            return self._reply()

        reply = self._window(ask)
        if reply is not None and reply.get("done"):
            self.finish()
        return self.result is None

    def finish(self, error: str | None = None) -> None:
        """Close its stdin, wait for its end and keep its result (or `error`)."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.stdin = None  # communicate() must not flush it
        if error is not None:
            self.proc.kill()
        try:
            rest, _ = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
            error = error or f"timed out after {self.timeout:.0f}s"
        stdout = "\n".join(self.lines) + "\n" + (self.buffer + (rest or b"")).decode(errors="replace")
        self.errors.seek(0)
        self.result = {"error": error} if error else result_of(self.proc.returncode, stdout, self.errors.read())
        self.errors.close()
        if self.metered and "error" not in self.result:
            self.result["metered"] = self.metered


def pinned(cpus: set | None) -> Callable | None:
    """A `subprocess.Popen` `preexec_fn` that pins the child to `cpus` (None: no pinning)."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


def round_cpu(r: int) -> int | None:
    """The CPU round `r`'s sides are pinned to: the usable CPUs in turn, one a round (None where the
    platform cannot pin)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[r % len(cpus)]


def other_cpus(r: int) -> set | None:
    """The usable CPUs but round `r`'s (`round_cpu`): where a round's server runs, as on its own machine
    (None where the platform cannot pin or has one CPU)."""
    cpu = round_cpu(r)
    rest = None if cpu is None else set(os.sched_getaffinity(0)) - {cpu}
    return rest or None


def run(
    commands: dict,
    cwd,
    timeout: float,
    batch_s: float = BATCH_S,
    meters: dict | None = None,
    log: list | None = None,
    cpu: int | None = None,
) -> dict:
    """{side: result} of one round: `commands` {side: (argv, env)} in the round's order, set up one
    after another, then sampled in alternating batches of `batch_s` seconds (see the module's text).
    `meters` {side: (end) -> {name: number} or None}, read before (end False) and after (True) each
    of that side's windows: its result gets "metered", the growth over its own set-up and batches. `log` gets the sides in the order batches ran. With `cpu`, every side runs pinned to that CPU."""
    live, started = [], []
    try:
        for side, (cmd, env) in commands.items():
            started.append((side, _Side(cmd, env, cwd, timeout, (meters or {}).get(side), cpu)))
            if started[-1][1].ready():
                live.append(started[-1])
        turn = 0
        while live:
            k = turn % len(live)
            for side, worker in live[k:] + live[:k]:
                if log is not None:
                    log.append(side)
                worker.batch(batch_s)
            live = [(side, worker) for side, worker in live if worker.result is None]
            turn += 1
    finally:
        for _, worker in started:
            if worker.result is None:
                worker.finish("stopped: the coordinator failed")
    return {side: worker.result for side, worker in started}
