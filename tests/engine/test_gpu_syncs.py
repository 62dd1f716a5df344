"""What the server's compiled program for a request reads back from the GPU: nothing but its results. Each read of a
device value (`.item()`, `bool()`) waits for every queued kernel, so one in a program would stall the device's
pipeline on every request. Checked here without a GPU: a NumPy stand-in for CuPy (`standin/cupy`) counts the reads,
in a subprocess whose engine takes it for CuPy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "standin"

SERVED_STEPS = """
import json, numpy, cupy
from engine import backend
backend.use("cuda")
from benchmarks import payloads
from benchmarks.worker import executor_step
header, arrays = payloads.seed_request("float32")
step = executor_step(header, arrays, "loss", 1)
for _ in range(5):  # the first requests are planned and the program compiled: reads are allowed there
    step()
cupy.COUNTS.clear()
outputs = [step() for _ in range(10)]
print(json.dumps({**cupy.COUNTS, "on_device": all(type(a).__module__ == "cupy" for a in outputs[-1])}))
"""


def test_a_served_seed_request_reads_nothing_back_but_its_results():
    env = {**os.environ, "PYTHONPATH": f"{STANDIN}{os.pathsep}{ROOT}", "GRADSERVE_DEVICE": "cpu"}
    run = subprocess.run([sys.executable, "-c", SERVED_STEPS], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert counts["on_device"]  # the stand-in is the engine's array module: the program ran on it
    assert counts.get("read", 0) == 0, counts
    assert counts["upload"] == 10 * 4, counts  # each request's four inputs, nothing else
