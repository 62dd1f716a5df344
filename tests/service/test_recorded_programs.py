"""Recorded programs (`wire.compile`, issue 23 items 1 and 2): they follow the values of every
request (masks are recomputed, not baked in), their generated source is readable and shows in
tracebacks, a failing one is logged and counted while the engine answers, and code generation
runs off the request thread."""

from __future__ import annotations

import json
import logging
import threading
import traceback

import numpy as np
import pytest
from service_testkit import EXAMPLE, asgi_client, assert_error

from service import cli
from wire import codegen
from wire import compile as wire_compile
from wire.codegen import GENERATOR
from wire.executor import Executor
from wire.messages import Request
from wire.program import Program

# ops whose vjps read the values (relu, abs, maximum and minimum ties, clamp, amax/amin hits,
# norms, pow's zero masks, logsumexp's shift): a mask baked in from the first request would be
# wrong for the next
MASKED = [
    {"id": "x", "op": "input", "requires_grad": True},
    {"id": "w", "op": "input", "requires_grad": True},
    {"id": "h", "op": "mul", "inputs": ["x", "w"]},
    {"id": "r", "op": "relu", "inputs": ["h"]},
    {"id": "a", "op": "abs", "inputs": ["h"]},
    {"id": "m", "op": "maximum", "inputs": ["r", "x"]},
    {"id": "n", "op": "minimum", "inputs": ["a", "x"]},
    {"id": "c", "op": "clamp", "inputs": ["h"], "attrs": {"min": -0.2, "max": 0.3}},
    {"id": "k", "op": "amax", "inputs": ["m"], "attrs": {"dim": 1}},
    {"id": "q", "op": "norm", "inputs": ["n"], "attrs": {"p": 1.0, "dim": 0}},
    {"id": "z", "op": "norm", "inputs": ["c"], "attrs": {"p": float("inf")}},
    {"id": "p", "op": "pow", "inputs": ["a", "x"]},
    {"id": "e", "op": "logsumexp", "inputs": ["p"], "attrs": {"dim": 1}},
    {"id": "s1", "op": "sum", "inputs": ["k"]},
    {"id": "s2", "op": "sum", "inputs": ["q"]},
    {"id": "s3", "op": "sum", "inputs": ["e"]},
    {"id": "t1", "op": "add", "inputs": ["s1", "s2"]},
    {"id": "t2", "op": "add", "inputs": ["t1", "s3"]},
    {"id": "s", "op": "add", "inputs": ["t2", "z"]},
]
GRAPH = {"version": 1, "nodes": MASKED, "outputs": ["s"]}


def _arrays(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    x[0, seed % 5] = 0.0  # a zero base for pow, in a different place each time
    return {"x": x, "w": rng.uniform(-1, 1, (5,)).astype(np.float32)}


def _programs(executor):
    return [p for plan, _ in executor.plans._plans.values() for s in plan.checked.values() for p in s.programs.values()]


def _backward(executor, graph, arrays):
    with np.errstate(all="ignore"):
        return executor.backward(Request(graph=graph, inputs=dict(arrays)))


def test_masks_follow_each_requests_values():
    compiled, engine = Executor(), Executor(compiled=False)
    ran = []
    for seed in range(6):
        arrays = _arrays(seed)
        got, want = _backward(compiled, GRAPH, arrays), _backward(engine, GRAPH, arrays)
        for name in ("x", "w"):
            np.testing.assert_array_equal(got.grads[name], want.grads[name])
        np.testing.assert_array_equal(got.outputs["s"], want.outputs["s"])
        ran.append(got.ran)
        GENERATOR.idle()
    # unrecorded, recorded, verified against the engine, then the program answers (it never fell back)
    assert ran[:3] == ["engine"] * 3 and set(ran[3:]) <= {"interpreted", "compiled"}, ran
    assert ran[-1] == "compiled"
    (program,) = _programs(compiled)
    assert isinstance(program, Program) and program.verified and program.generated is not None
    assert not program.constants or all(a.ndim == 0 for _, a in program.constants)  # only the seed and scalars


def _chain(length, op="exp"):
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    for i in range(length):
        nodes.append({"id": f"c{i}", "op": op, "inputs": [nodes[-1]["id"]]})
    nodes.append({"id": "s", "op": "sum", "inputs": [nodes[-1]["id"]]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


def _generated(executor, graph, arrays):
    for _ in range(3):
        _backward(executor, graph, arrays)
    assert GENERATOR.idle()
    (program,) = _programs(executor)
    assert program.generated is not None
    return program


def test_generated_source_is_readable_and_in_tracebacks(caplog):
    executor = Executor()
    arrays = {"x": np.linspace(0, 1, 3)}
    program = _generated(executor, _chain(2), arrays)
    assert program.filename.startswith("<gradserve plan ")
    assert "exp_1 = exp(xp, x_0)" in program.source and "# node 'c0'" in program.source
    assert "grad_x_" in program.source and "sum(xp, exp_2, dim=None, keepdim=False)" in program.source
    expected = _backward(Executor(compiled=False), _chain(2), arrays).grads["x"]

    def broken(xp, x):
        raise FloatingPointError("broken on the compiled path only")

    program.generated.__globals__["exp"] = broken  # the engine's exp is untouched
    before = dict(wire_compile.FAILURES)
    with caplog.at_level(logging.ERROR, logger="gradserve.compile"):
        result = _backward(executor, _chain(2), arrays)
        again = _backward(executor, _chain(2), arrays)
    assert result.ran == "engine" and again.ran == "engine"  # re-run on the engine, correct
    np.testing.assert_array_equal(result.grads["x"], expected)
    assert wire_compile.FAILURES["compiled"] == before.get("compiled", 0) + 1  # counted once
    (record,) = [r for r in caplog.records if r.name == "gradserve.compile"]  # logged once per program
    text = "".join(traceback.format_exception(*record.exc_info))
    assert program.filename in text and "exp_1 = exp(xp, x_0)" in text  # the generated line, shown
    assert [type(p).__name__ for p in _programs(executor)] == ["Fallback"]


def _replace_first_kind(program, fn):
    """The first step's function (and every step's of its kind) replaced by `fn`."""
    name, _, attrs, xp, scalar = program.kinds[0]
    program.kinds = ((name, fn, attrs, xp, scalar), *program.kinds[1:])


def test_a_failing_interpreted_program_is_logged_counted_and_rerun(caplog):
    executor = Executor()
    arrays = {"x": np.linspace(0, 1, 3)}
    for _ in range(3):
        _backward(executor, _chain(2), arrays)
    assert GENERATOR.idle()
    (program,) = _programs(executor)
    program.generated = None  # interpreted
    _replace_first_kind(program, lambda *a, **k: (_ for _ in ()).throw(ArithmeticError("broken step")))
    before = wire_compile.FAILURES.get("interpreted", 0)
    with caplog.at_level(logging.ERROR, logger="gradserve.compile"):
        result = _backward(executor, _chain(2), arrays)
    assert result.ran == "engine" and wire_compile.FAILURES["interpreted"] == before + 1
    np.testing.assert_allclose(result.grads["x"], np.exp(np.exp(arrays["x"])) * np.exp(arrays["x"]))
    assert any("broken step" in r.getMessage() for r in caplog.records)


def test_a_program_that_differs_from_the_engine_is_dropped(caplog):
    executor = Executor()
    arrays = {"x": np.linspace(0, 1, 3)}
    for _ in range(2):  # unrecorded, then recorded
        _backward(executor, _chain(2), arrays)
    (program,) = _programs(executor)
    _replace_first_kind(program, lambda xp, x: np.sin(x))  # a program that is not what the engine did
    with caplog.at_level(logging.WARNING, logger="gradserve.compile"):
        result = _backward(executor, _chain(2), arrays)
    assert result.ran == "engine" and "differs from the engine" in caplog.text
    assert [type(p).__name__ for p in _programs(executor)] == ["Fallback"]


def test_code_generation_runs_off_the_request_thread(monkeypatch):
    release, threads = threading.Event(), []
    original = codegen.generate

    def slow(program, filename, stop=None):
        threads.append(threading.current_thread().name)
        release.wait(30)
        return original(program, filename, stop)

    monkeypatch.setattr(codegen, "generate", slow)
    executor = Executor()
    graph, arrays = _chain(1500, op="sin"), {"x": np.linspace(0, 1, 4)}
    try:
        ran = [_backward(executor, graph, arrays).ran for _ in range(4)]  # generation is held meanwhile
        (program,) = _programs(executor)
        assert 10_000 < program.terms <= codegen.MAX_TERMS
        assert ran == ["engine", "engine", "engine", "interpreted"] and program.generated is None
    finally:
        release.set()
    assert GENERATOR.idle(60)
    assert threads == ["gradserve-codegen"] and program.generated is not None
    assert _backward(executor, graph, arrays).ran == "compiled"
    assert program.source.count("\ndef part_") > 1  # compiled in parts, the GIL free between them


def test_plan_show_prints_the_generated_source(tmp_path, capsys):
    path = tmp_path / "graph.json"
    path.write_text(json.dumps({"graph": GRAPH}))
    assert cli.main(["plan", "show", str(path), "--input", "x=4,5", "--input", "w=5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("def run(T, G, cancel, xp):") and "relu(xp, mul_" in out and "# ReluBackward0" in out
    compile(out, "<shown>", "exec")  # it is the very source that runs
    assert cli.main(["plan", "show", str(path), "--input", "x=4,5"]) == 1
    assert "no shape for input(s) 'w'" in capsys.readouterr().err


@pytest.mark.parametrize("forward", [False, True])
def test_plan_show_forward_and_declared_shapes(tmp_path, capsys, forward):
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "shape": [3], "dtype": "FP64", "requires_grad": True},
            {"id": "y", "op": "tanh", "inputs": ["x"]},
        ],
        "outputs": ["y"],
    }
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    assert cli.main(["plan", "show", str(path), *(["--forward"] if forward else [])]) == 0
    out = capsys.readouterr().out
    assert "tanh_1 = tanh(xp, x_0)" in out
    assert ("# TanhBackward0" in out) is (not forward) and ("seed = G.get('y')" in out) is (not forward)


def test_a_plans_programs_are_served_as_source():
    with asgi_client() as app:
        answers = [app.post("/backward", json=EXAMPLE) for _ in range(3)]
        assert all(a.status_code == 200 for a in answers)
        assert GENERATOR.idle()
        pid = answers[0].json()["plan"]
        text = app.get(f"/plans/{pid}/programs").text
        assert text.startswith(f"# <gradserve plan {pid} program ") and "def run(T, G, cancel, xp):" in text
        assert_error(app.get("/plans/0123abc/programs"), 404, "not (or no longer) held", field="plan_id")


def test_cancel_drops_queued_generations_and_stops_the_one_under_way(monkeypatch):
    started, release = threading.Event(), threading.Event()
    original = codegen.generate

    def held(program, filename, stop=None):
        started.set()
        release.wait(30)
        return original(program, filename, stop)

    monkeypatch.setattr(codegen, "generate", held)
    executors = [Executor() for _ in range(2)]
    for executor in executors:
        for _ in range(3):
            _backward(executor, _chain(3), {"x": np.ones(2)})
    assert started.wait(30)
    GENERATOR.cancel()  # the second program's generation is dropped; the first stops before its first part
    release.set()
    assert GENERATOR.idle()
    assert [p.generated for e in executors for p in _programs(e)] == [None, None]
    for _ in range(3):  # a later program is generated as before
        _backward(executors[0], _chain(4), {"x": np.ones(2)})
    assert GENERATOR.idle() and _programs(executors[0])[-1].generated is not None


def test_a_request_shape_is_recorded_only_when_seen_again():
    executor, graph = Executor(), _chain(3)
    answers = [_backward(executor, graph, _arrays_of(seed)) for seed in range(5)]
    assert [a.ran for a in answers[:3]] == ["engine"] * 3
    (program,) = _programs(executor)
    assert isinstance(program, Program) and program.verified and answers[3].ran in ("interpreted", "compiled")
    for seed, answer in enumerate(answers):  # unrecorded, recorded, checked and the program's: all the engine's
        expected = _backward(Executor(compiled=False), graph, _arrays_of(seed))
        np.testing.assert_array_equal(answer.grads["x"], expected.grads["x"])
        np.testing.assert_array_equal(answer.outputs["s"], expected.outputs["s"])
    once = Executor()
    _backward(once, graph, _arrays_of(0))
    assert _programs(once) == [wire_compile.SEEN]  # a graph sent once is never recorded


def _arrays_of(seed):
    return {"x": np.random.default_rng(seed).uniform(-1, 1, (2, 3))}
