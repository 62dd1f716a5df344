"""The benchmark suite measures what it claims: every side of a comparison computes the same
loss and gradients (the NumPy floor's hand-written ones, the peers and the hand-written endpoints
included), verdicts read right, and `python -m benchmarks` writes a report with its targets table.
The peers (HIPS autograd, JAX, PyTorch) are optional: their checks skip where they are absent."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import common, endpoints, loadgen, parts, payloads, peers, programs, worker
from benchmarks.common import verdict

ROOT = Path(__file__).resolve().parents[1]

try:
    import torch
except ImportError:
    torch = None

SIDES = ["engine", "numpy"] + (["torch"] if torch is not None else [])
PEERS = [
    pytest.param(
        side,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(peers.MODULE_OF[side]) is None, reason=f"{peers.MODULE_OF[side]} not installed"
        ),
    )
    for side in peers.PEERS
]


def _host(values):
    return [
        np.asarray(v.detach().numpy() if hasattr(v, "detach") else getattr(v, "data", v), dtype=np.float64)
        for v in values
    ]


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


@pytest.mark.parametrize("side", [*PEERS, "executor"])
def test_peers_and_the_executor_compute_the_engines_chain_and_seed_net(side):
    for build, rtol in (
        (lambda s: worker.chain_step(s, 20, count=1), 1e-5),
        (lambda s: worker.net_step(s, worker.SEED, np.dtype("float32"), count=1), 1e-4),
    ):
        got, want = _host(build(side)()), _host(build("engine")())
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max(), err_msg=side)


@pytest.mark.parametrize(
    "side", [*PEERS, pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
)
def test_hessian_vector_products_agree_with_the_engine(side):
    want = _host(worker.hvp_step("engine")())
    got = _host(worker.hvp_step(side)())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * np.abs(w).max(), err_msg=side)
    # the engine's HVP is a Hessian-vector product: finite differences of the gradient along v agree
    x, y, w1, w2, v1, v2 = worker.hvp_data()
    import engine

    def gradient(eps):
        a = engine.tensor(w1 + eps * v1, requires_grad=True)
        b = engine.tensor(w2 + eps * v2, requires_grad=True)
        (engine.tensor(x).mm(a).tanh().mm(b) - engine.tensor(y)).pow(2).sum().backward()
        return a.grad.numpy(), b.grad.numpy()

    plus, minus = gradient(1e-6), gradient(-1e-6)
    for k in range(2):
        np.testing.assert_allclose(want[k], (plus[k] - minus[k]) / 2e-6, rtol=1e-5, atol=1e-5 * np.abs(want[k]).max())


ENDPOINT_APPS = [
    pytest.param("torch_app", marks=pytest.mark.skipif(torch is None, reason="no torch")),
    pytest.param("jax_app", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="no jax")),
]


@pytest.mark.parametrize("app", ENDPOINT_APPS)
@pytest.mark.parametrize("binary", [True, False])
def test_hand_written_endpoints_answer_what_gradserve_answers(app, binary):
    import orjson
    from fastapi.testclient import TestClient

    from wire.executor import Executor
    from wire.messages import decode_request

    executor = Executor()
    test_client = TestClient(getattr(endpoints, app))
    for model, (header, arrays) in (("seed", payloads.seed_request()), ("tiny", payloads.tiny_request())):
        body, headers = payloads.encode({}, arrays, binary)
        answer = test_client.post(f"/{model}/backward", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        got, _ = endpoints.read_tensors(
            answer.content, answer.headers.get(endpoints.HEADER_LENGTH), ("outputs", "grads")
        )
        gradserve_body, _ = payloads.encode(header, arrays, binary=False)
        result = executor.backward(decode_request(orjson.loads(gradserve_body), None, executor.limits))
        want = {**result.outputs, **result.grads}
        assert set(got) == set(want), model
        for name, value in want.items():
            np.testing.assert_allclose(
                got[name].reshape(np.shape(value)),
                value,
                rtol=1e-4,
                atol=1e-4 * np.abs(value).max(),
                err_msg=f"{app} {model} {name}",
            )


@pytest.mark.parametrize(
    "module", ["engine", "client", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
)
def test_the_tensor_program_runs_the_same_steps_on_every_module(module, monkeypatch):
    monkeypatch.delenv("GRADSERVE_URL", raising=False)
    dims = (8, 20, 6, 3)
    reference = programs.two_layer_net_tensor(__import__("engine"), dims=dims)
    step = programs.two_layer_net_tensor(__import__(module), dims=dims)
    for _ in range(3):
        want, got = reference(), step()
        assert isinstance(got, float)
        np.testing.assert_allclose(got, want, rtol=1e-5)
    # the hand-written backprop is right: the loss goes down on a small problem
    losses = [step() for _ in range(20)]
    assert losses[-1] < losses[0]


def test_a_missing_peer_reads_not_installed():
    present, missing = common.installed(["engine", "ghost"], {"ghost": "no_such_module_for_gradserve"})
    assert present == ["engine"]
    md, ratios = common.timing_table(
        {"engine": {"times": [1e-3, 2e-3], "extra": [], "error": None}, **missing},
        {"engine": "engine", "ghost": "a ghost"},
        ["engine"],
    )
    assert "| a ghost | not installed (no_such_module_for_gradserve) |" in md
    assert ratios == {("engine", "engine"): 1.0}


def test_server_cpu_is_read_from_the_process_group():
    burn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(30)",
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while loadgen.group_cpu_seconds(burn.pid) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.4 <= loadgen.group_cpu_seconds(burn.pid) < 5
        assert loadgen.group_cpu_seconds(os.getpid() + 10**7) == 0
    finally:
        burn.kill()
        burn.wait()


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
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--parts", "5", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    assert text.startswith("# gradserve benchmarks")
    assert "## Machine" in text and "| cores (os.cpu_count) |" in text
    assert "| part | target | measured | verdict | why, when missed |" in text
    assert "| 5 | GPU MLP ≤1.2x PyTorch CUDA |" in text
    assert "## Part 5" in text
    for target in parts.GPU_TARGETS_14:
        assert f"| 5 | {target} | - |" in text
    if "| GPU (engine.backend.gpu_available) | False |" in text:
        assert (
            "| 5 | GPU seed net through the server ≤1.2x a hand-written CuPy floor (#14) | - | not run: no GPU in this session |"
            in text
        )
