"""torch.profiler and torch.autograd.profiler basics as PyTorch's profiler recipe uses them: on the engine, the ops a
program ran with their counts (against torch's aten:: counts), record_function ranges (context manager and
decorator), the key_averages table, a Chrome trace that parses, schedule and on_trace_ready; on the client (embedded
and remote), the session's requests and the ranges."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import engine
from engine.node import RECORDING

A = np.linspace(0.5, 1.5, 6).reshape(2, 3)


def _counts(events):
    """Events' counts by name (torch's ops' names without their `aten::`)."""
    return {e.key.removeprefix("aten::"): e.count for e in events}


def _chain(t):
    x, a = t.tensor(A), t.tensor(A[::-1].copy())
    with t.no_grad():
        y = x * a
        y = y * a + x
        y = (y * a + x).sum()
    return y


def _profiled(t, path):
    profiler = importlib.import_module(f"{t.__name__}.profiler")
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with profiler.record_function("model_inference"):
            _chain(t)
    prof.export_chrome_trace(str(path))
    return prof


def test_the_profiler_counts_the_ops_a_program_ran_as_torchs(tmp_path):
    torch = pytest.importorskip("torch")
    ours, theirs = _profiled(engine, tmp_path / "ours.json"), _profiled(torch, tmp_path / "theirs.json")
    want = _counts(theirs.key_averages())
    got = _counts(ours.key_averages())
    assert (
        {k: got[k] for k in ("mul", "add", "sum")}
        == {k: want[k] for k in ("mul", "add", "sum")}
        == {
            "mul": 3,
            "add": 2,
            "sum": 1,
        }
    )
    table = ours.key_averages().table(sort_by="cpu_time_total", row_limit=10)
    lines = table.splitlines()
    assert lines[1].split() == "Name Self CPU % Self CPU CPU total % CPU total CPU time avg # of Calls".split()
    assert lines[3].split()[0] == "model_inference" and lines[-1].startswith("Self CPU time total:")
    assert {line.split()[0]: line.split()[-1] for line in lines[3:-2]}["mul"] == "3"
    averages = {e.key: e for e in ours.key_averages()}
    inference = averages["model_inference"]
    ops = sum(e.cpu_time_total for k, e in averages.items() if k != "model_inference")
    assert inference.cpu_time_total >= ops and inference.self_cpu_time_total == pytest.approx(
        inference.cpu_time_total - ops
    )
    shapes = ours.key_averages(group_by_input_shape=True)
    assert [e.input_shapes for e in shapes if e.key == "sum"] == [[[2, 3]]]
    trace = json.loads((tmp_path / "ours.json").read_text())
    names = [event["name"] for event in trace["traceEvents"] if event["ph"] == "X" and event["dur"] >= 0]
    assert sorted(names) == sorted(["model_inference"] + ["mul"] * 3 + ["add"] * 2 + ["sum"])
    assert not RECORDING  # nothing observes the ops once the profile ends


def _scheduled(t):
    profiler = importlib.import_module(f"{t.__name__}.profiler")
    cycles = []

    @profiler.record_function("scaled")
    def scaled(x):
        return x * 2.0

    on_ready = lambda prof: cycles.append(_counts(prof.key_averages()))  # noqa: E731
    plan = profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with t.no_grad(), profiler.profile(schedule=plan, on_trace_ready=on_ready) as prof:
        for _ in range(6):
            scaled(t.tensor(A))
            prof.step()
    return [(cycle["mul"], cycle["scaled"], cycle["ProfilerStep*"]) for cycle in cycles]


def test_schedule_and_on_trace_ready_as_torchs():
    torch = pytest.importorskip("torch")
    assert _scheduled(engine) == _scheduled(torch) == [(2, 2, 2)]


def test_the_autograd_profilers_table():
    with engine.autograd.profiler.profile() as prof:
        with engine.autograd.profiler.record_function("step"):
            (engine.tensor(A, requires_grad=True) * 3).sum().backward()
    counts = _counts(prof.key_averages())
    assert counts["step"] == 1 and counts["mul"] >= 2 and "Self CPU time total" in prof.table()
    with engine.autograd.profiler.profile(enabled=False) as off:
        _chain(engine)
    assert len(off.events()) == 0


def test_the_client_profiles_its_requests(session, mode, tmp_path):
    import client

    with client.profiler.profile(record_shapes=True) as prof:
        with client.profiler.record_function("model_inference"):
            loss = (client.tensor(A, requires_grad=True) * 3).sum()
            loss.backward()
    counts = _counts(prof.key_averages())
    requests = {k: n for k, n in counts.items() if k.startswith("execute " if mode == "embedded" else "POST ")}
    assert counts["model_inference"] == 1 and sum(requests.values()) >= 1
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["cat"] for e in trace} == {"user_annotation", "request"}
