"""The benchmark suite measures what it claims: every side of a comparison computes the same
loss and gradients (the NumPy floor's hand-written ones included), verdicts read right, and
`python -m benchmarks` writes a report with its targets table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import parts, worker
from benchmarks.common import verdict

ROOT = Path(__file__).resolve().parents[1]

try:
    import torch
except ImportError:
    torch = None

SIDES = ["engine", "numpy"] + (["torch"] if torch is not None else [])


def _host(values):
    return [np.asarray(v.detach().numpy() if hasattr(v, "detach") else getattr(v, "data", v), dtype=np.float64)
            for v in values]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed_net_sides_compute_the_same_loss_and_gradients(dtype):
    results = {side: _host(worker.net_step(side, worker.SEED, np.dtype(dtype))()) for side in SIDES}
    reference = results["engine"]
    rtol = 1e-4 if dtype == "float32" else 1e-10
    for side, values in results.items():
        assert len(values) == 3, side
        for got, want in zip(values, reference):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max(), err_msg=side)


def test_chain_sides_compute_the_same_loss_and_gradient():
    results = {side: _host(worker.chain_step(side, 100)()) for side in SIDES}
    for side, (loss, grad) in results.items():
        np.testing.assert_allclose(loss, results["engine"][0], rtol=1e-5, err_msg=side)
        np.testing.assert_allclose(grad, results["engine"][1], rtol=1e-5, err_msg=side)


def test_verdicts_and_reasons():
    assert verdict(0.9, 1.0) == "met (≤1)"
    assert verdict(1.3, 1.1) == "missed (≤1.1) by 18%"
    assert verdict(0.4, 0.5, ">=") == "missed (≥0.5) by 20%"
    assert verdict(0.6, 0.5, ">=") == "met (≥0.5)"
    assert verdict(None, 1.0) == "n/a"
    assert parts.why("100-op chain ≤0.8x PyTorch", "missed (≤0.8) by 73%").startswith("CPython")
    assert parts.why("100-op chain ≤0.8x PyTorch", "met (≤0.8)") == ""
    assert parts.why("GPU MLP ≤1.2x PyTorch CUDA", "missed (≤1.2) by 5%") == ""


def test_report_is_written_with_machine_facts_and_targets(tmp_path):
    out = tmp_path / "report.md"
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--parts", "5", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    assert text.startswith("# gradserve benchmarks")
    assert "## Machine" in text and "| cores (os.cpu_count) |" in text
    assert "| part | target | measured | verdict | why, when missed |" in text
    assert "| 5 | GPU MLP ≤1.2x PyTorch CUDA |" in text
    assert "## Part 5" in text
