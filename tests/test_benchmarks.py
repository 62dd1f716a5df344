"""The benchmark suite measures what it claims: every side of a comparison computes the same
loss and gradients (the NumPy floor's hand-written ones, the peers and the hand-written endpoints
included), verdicts read right, and `python -m benchmarks` writes a report with its targets table.
The peers (HIPS autograd, JAX, PyTorch) are optional: their checks skip where they are absent."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import (
    alternate,
    common,
    endpoints,
    loadgen,
    part_client,
    part_service,
    parts,
    payloads,
    peers,
    programs,
    rounds,
    serving,
    worker,
)
from benchmarks.common import verdict
from benchmarks.rounds import Runs, Target

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


def test_the_client_part_reads_requests_and_bytes_each_way_from_the_servers_metrics():
    metrics = "\n".join(
        [
            'gradserve_requests_total{endpoint="/backward",method="POST",status="200"} 7.0',
            'gradserve_requests_total{endpoint="/backward",method="POST",status="413"} 1.0',
            'gradserve_requests_total{endpoint="/forward",method="POST",status="200"} 2.0',
            'gradserve_requests_total{endpoint="/metrics",method="GET",status="200"} 5.0',
            'gradserve_request_bytes_total{endpoint="/backward"} 1000.0',
            'gradserve_request_bytes_total{endpoint="/forward"} 24.0',
            'gradserve_response_bytes_total{endpoint="/backward"} 1.5e+03',
            'gradserve_request_bytes_created{endpoint="/backward"} 1.7e+09',
        ]
    )
    assert part_client.traffic_of(metrics) == {"requests": 10.0, "up": 1024.0, "down": 1500.0}
    assert "resident" in part_client.REMOTE and "resident" in common.LABELS
    assert part_client.RESIDENT_TARGET.startswith("seed loop remote with resident parameters ≤1.3x embedded")
    assert parts.why(part_client.RESIDENT_TARGET, "missed in 1 of 5 rounds").startswith("a step is one request")


def test_verdicts_and_reasons():
    assert verdict(0.9, 1.0) == "met (≤1)"
    assert verdict(1.3, 1.1) == "missed (≤1.1) by 18%"
    assert verdict(0.4, 0.5, ">=") == "missed (≥0.5) by 20%"
    assert verdict(0.6, 0.5, ">=") == "met (≥0.5)"
    assert verdict(None, 1.0) == "n/a"
    assert parts.why("100-op chain ≤0.8x PyTorch", "missed (≤0.8) by 73%").startswith("CPython")
    assert parts.why("100-op chain ≤0.8x PyTorch", "met (≤0.8)") == ""
    assert parts.why("GPU MLP ≤1.2x PyTorch CUDA", "missed (≤1.2) by 5%") == ""


def test_a_target_is_met_only_when_every_round_meets_it():
    assert rounds.round_verdict([0.7, 0.75, 0.79, 0.6, 0.8], 0.8) == "met"
    assert rounds.round_verdict([0.7, 0.75, 0.81, 0.6, 0.7], 0.8) == "missed in 1 of 5 rounds"  # 4 of 5: missed
    assert rounds.round_verdict([0.9, 0.9, 0.9], 0.8) == "missed in 3 of 3 rounds"
    assert rounds.round_verdict([1.3, 1.2, 1.25], 1.2, ">=") == "met"
    assert rounds.round_verdict([1.3, 1.1, 1.25, 1.4], 1.2, ">=") == "missed in 1 of 4 rounds"
    assert rounds.round_verdict([0.5, None, 0.5], 0.8) == "missed in 1 of 3 rounds"  # a round without a value
    assert rounds.round_verdict([0.5], 0.8) == "met (1 round only)"
    assert rounds.round_verdict([], 0.8, note="not run: no GPU") == "not run: no GPU"
    assert rounds.round_verdict([None, None], 0.8) == "n/a (not measured)"
    assert rounds.round_verdict([0, 0, 3], 0, "<=") == "missed in 1 of 3 rounds"  # a count: 0 non-2xx
    target = Target("1a", "t", 0.8, values=[0.7, 0.7, 0.9, 0.7, 0.7])
    assert target.verdict == "missed in 1 of 5 rounds"
    assert parts.why("100-op chain ≤0.8x PyTorch (#24)", target.verdict).startswith("CPython")


def _runs(sides: dict, loads) -> Runs:
    out = Runs(
        {s: {"rounds": [r if r is None else {"times": r} for r in rs], "error": None} for s, rs in sides.items()}
    )
    for slot in out.values():
        slot["times"] = [t for r in slot["rounds"] if r for t in r["times"]]
    out.loads = loads
    return out


def test_ratios_are_taken_round_by_round_not_from_pooled_samples():
    runs = _runs({"engine": [[1, 1, 1], [3, 3, 3], [1, 2, 3]], "torch": [[2, 2, 2], [2, 2, 2], None]}, [0.5, 1.5, 2.0])
    assert rounds.ratios(runs, "engine", "torch") == [0.5, 1.5, None]
    assert rounds.ratio_of_minimums(runs, "engine", "torch") == 0.5
    target = rounds.ratio_target("1a", "100-op chain ≤0.8x PyTorch (#24)", runs, "engine", "torch", 0.8)
    assert target.verdict == "missed in 2 of 3 rounds"
    [row] = rounds.table_rows([target], parts.why)
    assert row[:7] == ["1a", target.label, "0.50x / 1.00x / 1.50x", "0.50x", 3, "missed in 2 of 3 rounds", "0.50-2.00"]
    assert row[7].startswith("CPython")  # the reason of a missed target
    assert rounds.TABLE_HEADERS[2:5] == ["rounds: min / median / max", "ratio of minimums", "rounds"]
    md, found = common.timing_table(runs, {"engine": "engine", "torch": "torch"}, ["torch"])
    assert "÷ torch (median of rounds)" in md
    assert found[("engine", "torch")] == 1.0  # the median of 0.5 and 1.5, not of the pooled samples (2 / 2)


def test_rounds_alternate_the_sides_order_and_stop_a_failing_side():
    calls = []

    def measure(side, r):
        calls.append((r, side))
        if side == "c" and r == 1:
            return {"error": "broke"}
        return {"times": [r + 1.0], "extra": {"round": r}}

    runs = rounds.run_rounds(["a", "b", "c"], 3, measure)
    assert calls == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert len(runs.loads) == 3
    assert runs["a"]["times"] == [1.0, 2.0, 3.0] and [r["times"] for r in runs["a"]["rounds"]] == [[1.0], [2.0], [3.0]]
    assert runs["c"]["error"] == "broke" and runs["c"]["rounds"][1:] == [None, None]
    assert rounds.ratios(runs, "c", "a") == [1.0, None, None]


def test_an_interleaved_comparison_keeps_one_fresh_process_per_side_and_round():
    runs = common.interleave("chain100", ["engine", "numpy"], 2, 60, reps=3, warmup=1)
    for side in ("engine", "numpy"):
        assert runs[side]["error"] is None
        assert [len(r["times"]) for r in runs[side]["rounds"]] == [3, 3]
    assert len(runs.loads) == 2
    values = rounds.ratios(runs, "engine", "numpy")
    assert len(values) == 2 and all(v > 1 for v in values)  # the engine does more than the hand-written floor
    assert any(key.startswith("chain100 ") for key in rounds.RECORD)


FAKE_WORKER = """
import json, sys, time
from benchmarks import alternate
mode, calls = sys.argv[1], []
def step():
    t0 = time.monotonic()
    time.sleep(0.001)
    calls.append((t0, time.monotonic()))
    if mode == "fail" and len(calls) == 7:
        raise RuntimeError("broke at call 7")
if mode == "alone":  # a case that times its own loop: it never asks for batches
    step()
    print(json.dumps({"times": [calls[0][1] - calls[0][0]], "extra": {"calls": calls}}))
    sys.exit(0)
times, spent = alternate.samples(step, 12, 2, 30.0)
print("a library's chatter on stdout")
print(json.dumps({"times": times, "extra": {"calls": calls[2:], **spent}}))
"""


def _fake(mode):
    return [sys.executable, "-c", FAKE_WORKER, mode], dict(os.environ)


def test_a_rounds_sides_sample_in_alternating_batches_one_at_a_time():
    log = []
    got = alternate.run({"a": _fake("ok"), "b": _fake("ok"), "c": _fake("alone")}, ROOT, 60, batch_s=0.004, log=log)
    for side in ("a", "b"):
        extra = got[side]["extra"]
        assert len(got[side]["times"]) == 12, side
        batches = log.count(side)
        assert batches >= 3  # a 4 ms batch holds a few 1 ms samples: more batches than one
        # each batch's first call ran as its warm-up and was dropped, unless it alone outlasted the batch
        slow = sum(end - start > 0.004 for start, end in extra["calls"])
        assert 12 + batches - slow <= extra["ran"] <= 12 + batches
        assert len(extra["calls"]) == extra["ran"]
    assert got["c"]["times"] and "calls" in got["c"]["extra"]  # an unpaced worker ran to its end alone
    assert "c" not in log and {log[0], log[1]} == {"a", "b"}
    full = 2 * min(log.count("a"), log.count("b"))  # the turns before a side is done
    assert all(log[i] != log[i + 1] for i in range(0, full, 2))  # every turn gives both sides a batch
    assert log[:2] != log[2:4] or log[2:4] != log[4:6]  # the order within a turn rotates
    spans = sorted(span for side in "abc" for span in got[side]["extra"]["calls"])
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # never two sides at once


def test_a_failing_side_reports_its_error_and_the_others_finish():
    got = alternate.run({"ok": _fake("ok"), "bad": _fake("fail"), "alone": _fake("alone")}, ROOT, 60, batch_s=0.004)
    assert got["bad"] == {"error": "exit 1: RuntimeError: broke at call 7"}
    assert len(got["ok"]["times"]) == 12 and len(got["alone"]["times"]) == 1
    stuck = [sys.executable, "-c", "from benchmarks import alternate; alternate.samples(lambda: input(), 3, 0, 9)"]
    got = alternate.run({"stuck": (stuck, dict(os.environ)), "ok": _fake("ok")}, ROOT, 10, batch_s=0.004)
    assert got["stuck"] == {"error": "timed out after 10s"} and len(got["ok"]["times"]) == 12


AFFINITY_WORKER = """
import json, os
from benchmarks import alternate
times, spent = alternate.samples(lambda: None, 3, 0, 9.0)
print(json.dumps({"times": times, "extra": {"cpus": sorted(os.sched_getaffinity(0))}}))
"""


def test_a_rounds_sides_are_pinned_to_one_cpu_that_changes_with_the_round():
    if not hasattr(os, "sched_getaffinity"):  # a platform that cannot pin: rounds run unpinned
        assert alternate.round_cpu(0) is None
        return
    worker = [sys.executable, "-c", AFFINITY_WORKER], dict(os.environ)
    usable = sorted(os.sched_getaffinity(0))
    seen = set()
    for r in range(len(usable)):
        got = alternate.run({"a": worker, "b": worker}, ROOT, 60, batch_s=0.004, cpu=alternate.round_cpu(r))
        assert got["a"]["extra"]["cpus"] == got["b"]["extra"]["cpus"] == [alternate.round_cpu(r)]
        seen.add(alternate.round_cpu(r))
    assert seen == set(usable)  # every usable CPU takes its turn
    unpinned = alternate.run({"a": worker}, ROOT, 60, batch_s=0.004)
    assert unpinned["a"]["extra"]["cpus"] == usable


THREADED_SERVER = """
import os, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("up", flush=True)
time.sleep(60)
"""


def test_a_rounds_server_is_pinned_off_the_cpu_its_clients_share():
    """Part 4's server runs on the CPUs a round's sides do not use, every one of its threads."""
    from benchmarks.loadgen import pin_group

    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        assert alternate.other_cpus(0) is None  # nothing to pin it to: it runs where Linux puts it
        return
    usable = set(os.sched_getaffinity(0))
    server = subprocess.Popen([sys.executable, "-c", THREADED_SERVER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert server.stdout.readline() == b"up\n"
        for r in range(2):
            cpus = alternate.other_cpus(r)
            assert cpus == usable - {alternate.round_cpu(r)}
            pin_group(server.pid, cpus)
            tasks = os.listdir(f"/proc/{server.pid}/task")
            assert len(tasks) >= 2 and all(set(os.sched_getaffinity(int(t))) == cpus for t in tasks)
    finally:
        server.kill()
        server.wait()


def test_rounds_run_together_keep_the_results_shape():
    commands = {"a": _fake("ok"), "b": _fake("ok"), "bad": _fake("fail")}
    runs = rounds.run_rounds(["a", "b", "bad"], 2, common.together(commands, 30), together=True)
    assert len(runs.loads) == 2
    for side in ("a", "b"):
        assert runs[side]["error"] is None and [len(r["times"]) for r in runs[side]["rounds"]] == [12, 12]
        assert len(runs[side]["times"]) == 24 and len(runs[side]["extra"]) == 2
    assert runs["bad"]["error"].startswith("exit 1") and runs["bad"]["rounds"] == [None, None]
    assert all(value is not None for value in rounds.ratios(runs, "a", "b"))
    shape = rounds.side_rounds(runs)
    assert [set(r) for r in shape["a"]] == [{"median", "min", "max", "n"}] * 2 and shape["bad"] == [None, None]


def test_a_second_run_lists_both_verdicts_and_flags_the_flipped():
    previous = {
        "targets": [
            {"part": "1a", "label": "chain", "verdict": "met"},
            {"part": "1b", "label": "seed", "verdict": "missed in 2 of 5 rounds"},
            {"part": "3", "label": "gone", "verdict": "met"},
        ]
    }
    now = [
        Target("1a", "chain", 0.8, values=[0.9, 0.7]),
        Target("1b", "seed", 1.1, values=[1.2, 1.3]),
        Target("2", "new", 1.0, values=[0.5]),
    ]
    rows, flipped = rounds.agreement(previous, now)
    assert flipped == 1
    assert rows == [
        ["1a", "chain", "met", "missed in 1 of 2 rounds", "**FLIPPED**"],
        ["1b", "seed", "missed in 2 of 5 rounds", "missed in 2 of 2 rounds", "yes"],
        ["2", "new", "(not in the previous run)", "met (1 round only)", "-"],
        ["3", "gone", "met", "(not in this run)", "-"],
    ]


def test_service_targets_take_the_worst_connection_count_of_each_round():
    def metrics(rps, p99, bad=0):
        return {"ok_rps": rps, "non2xx": bad, "failed": 0, "p50": p99 / 2, "p99": p99}

    label = part_service.TINY
    service = [
        {"m": {f"{label} @1": metrics(130, 1.0), f"{label} @4": metrics(250, 2.0)}},
        {"m": {f"{label} @1": metrics(130, 1.0), f"{label} @4": metrics(200, 4.0, bad=3)}},
    ]
    torch_side = [{"m": {f"{label} @1": metrics(100, 1.0), f"{label} @4": metrics(200, 2.0)}}] * 2
    runs = Runs({"service": {"rounds": service}, "torch": {"rounds": torch_side}})
    runs.loads = [1.0, 2.0]
    found = [t for t in part_service._serve_who_waits(runs, (1, 4)) if t.label.startswith(f"serve who waits, {label}:")]
    zero, rps, p99 = found
    assert "0 non-2xx at 1-4 connections" in zero.label and "successful req/s ≥1.2x" in rps.label
    assert "p99 ≤1.5x" in p99.label
    assert zero.values == [0, 3] and zero.verdict == "missed in 1 of 2 rounds"
    assert rps.values == [1.25, 1.0] and rps.verdict == "missed in 1 of 2 rounds"  # round 2 at 4 connections: 1.0x
    assert p99.values == [1.0, 2.0] and p99.verdict == "missed in 1 of 2 rounds"
    assert rps.of_minimums == 1.0 and p99.of_minimums == 1.0
    # the sweep table counts refusals by status over the rounds
    answers = [{"failed": 1, "statuses": {"200": 5, "503": 3}}, {"failed": 0, "statuses": {"503": 2, "429": 1}}]
    assert part_service._refusals(answers) == "7 (429: 1, 503: 5, failed: 1)"
    assert part_service._refusals([{"failed": 0, "statuses": {"200": 9}}]) == "0"


class _HalfRefused(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    count = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).count += 1
        status = 503 if type(self).count % 2 else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_the_load_generator_runs_its_connections_at_once_and_counts_refusals():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HalfRefused)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        request = loadgen.build_request("/x", b"{}")
        result = loadgen.run(server.server_address[1], request, 30, 200, connections=4)
    finally:
        server.shutdown()
        server.server_close()
    assert result["count"] == 200 and result["failed"] == 0
    assert result["ok"] + result["non2xx"] == 200 and result["statuses"] == {"200": 100, "503": 100}
    assert len(result["latencies"]) == result["ok"] == 100  # latencies of 2xx answers only
    assert serving.spread(32) == (4, 8) and serving.spread(1) == (1, 1)


class _Ok(_HalfRefused):
    count = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).count += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def test_alternating_load_sends_servers_blocks_in_turn_and_reads_cpu_a_burst():
    """The access log's measurement: two servers sent blocks of requests in turn, CPU per request per
    burst for each (both here this process), and a refusal reported, not measured."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in (_Ok, _HalfRefused)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = [server.server_address[1] for server in servers]
    request = loadgen.build_request("/x", b"{}")
    try:
        pgid = os.getpgid(0)
        result = loadgen.alternating(ports[:1] * 2, request, 0.05, 3, [pgid, pgid], 5)
        answered = _Ok.count
        refused = loadgen.alternating(ports, request, 0.05, 3, [pgid, pgid], 5)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert [len(side) for side in result["cpu"]] == [3, 3] and answered % 10 == 0  # whole blocks, both sides
    assert all(cpu > 0 for side in result["cpu"] for cpu in side)
    assert refused == {"error": f"status 503 from port {ports[1]}"}


@pytest.mark.skipif(
    torch is None or importlib.util.find_spec("litserve") is None, reason="LitServe + torch not installed"
)
def test_the_litserve_peer_answers_what_gradserve_answers():
    import httpx
    import orjson

    from wire.executor import Executor
    from wire.messages import decode_request

    port = common.free_port()
    with common.server(
        [sys.executable, "-m", "benchmarks.litserve_app", str(port)], port, ready_path="/healthz", timeout=120
    ) as started:
        assert started.ok, started.msg
        executor = Executor()
        for model, (header, arrays) in (("seed", payloads.seed_request()), ("tiny", payloads.tiny_request())):
            body, headers = payloads.encode({}, arrays, binary=False)
            answer = httpx.post(f"http://127.0.0.1:{port}/{model}/backward", content=body, headers=headers, timeout=60)
            assert answer.status_code == 200, answer.text
            got, _ = endpoints.read_tensors(answer.content, None, ("outputs", "grads"))
            gradserve_body, _ = payloads.encode(header, arrays, binary=False)
            result = executor.backward(decode_request(orjson.loads(gradserve_body), None, executor.limits))
            want = {**result.outputs, **result.grads}
            assert set(got) == set(want), model
            for name, value in want.items():
                np.testing.assert_allclose(
                    got[name].reshape(np.shape(value)), value, rtol=1e-4, atol=1e-4 * np.abs(value).max()
                )


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
    assert "--rounds 2 --parts 5" in text and "met only if every round meets it" in text and "--verify" in text
    assert "## Machine" in text and "| cores (os.cpu_count) |" in text
    assert "| " + " | ".join(rounds.TABLE_HEADERS) + " |" in text
    assert "| 5 | GPU MLP ≤1.2x PyTorch CUDA |" in text
    assert "## Part 5" in text
    gpu = "| GPU (engine.backend.gpu_available) | True |" in text
    for target in parts.GPU_TARGETS_14:
        assert f"| 5 | {target} |{'' if gpu else ' - | - |'}" in text
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["rounds"] == 2 and results["command"].startswith("python -m benchmarks --quick")
    assert {t["label"] for t in results["targets"]} >= set(parts.GPU_TARGETS_14)
    if "| GPU (engine.backend.gpu_available) | False |" in text:
        assert (
            "| 5 | GPU seed net through the server ≤1.2x a hand-written CuPy floor (#14) | - | - | 0 "
            "| not run: no GPU in this session |" in text
        )
    # a second run against the first's results lists both verdicts
    previous = tmp_path / "previous.json"
    previous.write_text(out.with_suffix(".json").read_text())
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--parts", "5", "--out", str(out), "--verify", str(previous)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    text = out.read_text()
    assert "## Second run agrees" in text and "| part | target | previous run | this run | agrees |" in text
    assert "| 5 | GPU MLP ≤1.2x PyTorch CUDA |" in text.split("## Second run agrees")[1]


ONNX_PEERS = all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime", "torch"))
needs_onnx_peers = pytest.mark.skipif(not ONNX_PEERS, reason="part 6 needs onnx, onnxruntime and torch")


@needs_onnx_peers
def test_onnx_part_sides_compute_the_same_outputs_and_input_gradients(tmp_path):
    """Part 6's sides run the same models: gradserve's forward equals ONNX Runtime's, its forward and
    input gradient PyTorch's; the load case times an import of each size."""
    from benchmarks import part_onnx

    part_onnx.export(tmp_path)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    for name in part_onnx.MODELS:
        ours, _ = part_onnx.step_of("forward", "gradserve", name, tmp_path)()
        theirs, _ = part_onnx.step_of("forward", "onnxruntime", name, tmp_path)()
        assert ours.shape == (part_onnx.BATCH, *part_onnx.OUTPUT_SHAPES[name])
        np.testing.assert_allclose(ours, theirs, err_msg=name, **tol)
        ours_y, ours_grad = part_onnx.step_of("gradient", "gradserve", name, tmp_path)()
        torch_y, torch_grad = part_onnx.step_of("gradient", "torch", name, tmp_path)()
        np.testing.assert_allclose(ours_y, torch_y, err_msg=name, **tol)
        assert ours_grad.shape == part_onnx.sample(name).shape and np.abs(ours_grad).max() > 0
        np.testing.assert_allclose(ours_grad, torch_grad, err_msg=name, **tol)
    sizes = []
    for mib in part_onnx.SIZES_MIB:
        path = str(tmp_path / f"mlp_{mib}mib.onnx")
        got = part_onnx.case_load("gradserve", {"path": path, "reps": 2})
        assert len(got["times"]) == 2 and all(a <= b for a, b in zip(got["times"], got["extra"]["with_plan"]))
        assert part_onnx.case_load("onnxruntime", {"path": path, "reps": 1})["times"][0] > 0
        sizes.append(got["extra"]["weights_mib"])
    np.testing.assert_allclose(sizes, part_onnx.SIZES_MIB, rtol=0.05)


def test_onnx_part_without_a_dependency_says_not_run(monkeypatch):
    from benchmarks import part_onnx

    monkeypatch.setattr(part_onnx, "have", lambda module: module != "torch")
    md, targets = part_onnx.part6(True)
    assert "## Part 6" in md and "not run: torch not installed" in md
    assert [t.label for t in targets] == part_onnx.planned_labels()
    assert {t.verdict for t in targets} == {"not run: torch not installed"}


@needs_onnx_peers
def test_quick_part_6_writes_the_onnx_tables(tmp_path):
    out = tmp_path / "report.md"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--parts", "6", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    part = text.split("## Part 6")[1].split("\n## ")[0]  # up to the next section (the Changes appended)
    assert "failed" not in part and "skipped" not in part
    for heading in ("### (a) forward", "### (b) forward + input gradient", "### (c) load time vs model size"):
        assert heading in part
    from benchmarks import part_onnx

    for title in part_onnx.TITLES.values():
        assert part.count(f"#### {title}") == 2
    assert part.count("| gradserve (wire.Executor on the imported plan) | ") == 6
    load = part.split("### (c)")[1]
    assert "| weights (float32) | import (median) | import ms/MiB |" in load
    assert len([line for line in load.splitlines() if line.startswith("| ") and " MiB file) |" in line]) == 4
    for label in part_onnx.planned_labels():
        assert f"| 6 | {label} | " in text
    results = json.loads(out.with_suffix(".json").read_text())
    measured = [t for t in results["targets"] if t["part"] == "6"]
    assert {t["label"] for t in measured} >= set(part_onnx.planned_labels())
    assert all(t["verdict"] == part_onnx.MEASURED and len(t["values"]) == 2 for t in measured)
    assert all(v is not None and v > 0 for t in measured for v in t["values"])


def test_gpu_report_says_how_far_each_side_is_from_the_floor():
    """Part 5 shows each side's one-step loss and the worst relative difference of its checks from the floor's."""
    runs = rounds.Runs(
        {
            "cupy": {"extra": [{"check": [2.0, 4.0, 8.0]}]},
            "engine": {"extra": [{"check": [2.0, 4.0, 8.004]}]},
            "torch": {"extra": [{"check": [2.0, 4.0, 8.0]}]},
        }
    )
    said = parts._agreement(runs)
    assert "engine (CuPy) 2," in said and "within 5.0e-04 (relative)" in said
    assert parts._agreement(rounds.Runs({"engine": {"extra": [{"check": [1.0]}]}})) == "no floor check to compare with"
