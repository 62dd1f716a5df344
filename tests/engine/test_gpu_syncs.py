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


EAGER_STEPS = """
import json, numpy, cupy
from engine import backend
backend.use("cuda")
import engine
from engine import nn, optim
rng = numpy.random.default_rng(0)
x = engine.tensor(rng.standard_normal((8, 5)).astype(numpy.float32))
y = engine.tensor(rng.standard_normal((8, 3)).astype(numpy.float32))
model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
reads = {}
for name in OPTIMIZERS:
    opt = getattr(optim, name)(model.parameters(), lr=0.01)
    def step():
        opt.zero_grad()
        ((model(x) - y).pow(2).mean()).backward()
        opt.step()
    step()  # the first step makes the optimizer's state
    cupy.COUNTS.clear()
    for _ in range(3):
        step()
    reads[name] = cupy.COUNTS.get("read", 0)
on_device = type(next(model.parameters()).data).__module__ == "cupy"
print(json.dumps({"reads": reads, "on_device": on_device}))
"""
OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "ASGD", "Rprop")


def test_an_eager_training_step_reads_nothing_back_from_the_device():
    """`x.pow(2)`'s gradient reads its exponent, and every optimizer its per-parameter `step` count (NAdam its
    `mu_product`, ASGD its `eta` and `mu`), each step. PyTorch keeps those on the host; read from a device they
    would each wait for the queued kernels (before: 1 read a step with SGD, 5 with Adam, 13 with ASGD)."""
    program = f"OPTIMIZERS = {OPTIMIZERS!r}\n{EAGER_STEPS}"
    env = {**os.environ, "PYTHONPATH": f"{STANDIN}{os.pathsep}{ROOT}", "GRADSERVE_DEVICE": "cpu"}
    run = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["on_device"]
    assert result["reads"] == dict.fromkeys(OPTIMIZERS, 0)
