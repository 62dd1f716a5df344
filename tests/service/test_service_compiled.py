"""Recorded programs (`wire.compile`) compute exactly what the engine computes.

Every request runs twice in process: on an Executor that compiles its plans and on one that runs
them on the engine (`Executor(compiled=False)`); outputs and gradients must be equal bit for bit
(`assert_array_equal`), over every registry sample (forward and backward, float32 and float64) and
over the fuzzed graphs of the reliability suite. The compiled side is checked to have really run
compiled (its program is in the plan's cache), and the graphs it must not compile to have fallen back.
"""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from engine.registry import OPS
from tests.reliability.test_fuzz import _jsonable, valid_requests
from wire.codegen import GENERATOR
from wire.compile import SEEN, Fallback
from wire.errors import GraphError
from wire.executor import Executor
from wire.limits import Limits
from wire.messages import Request
from wire.program import Program
from wire.run import cancel_scope

DTYPES = (np.float32, np.float64)
CASES = [(name, i) for name, op in sorted(OPS.items()) for i in range(len(op.samples))]


def _programs(executor, differentiate=None):
    """The compiled programs (or Fallbacks) of every plan the executor has cached (forward ones,
    backward ones or both); not the request shapes seen once (recorded when seen again)."""
    return [
        p
        for plan, _ in executor.plans._plans.values()
        for s in plan.checked.values()
        for key, p in s.programs.items()
        if (differentiate is None or key[0] == differentiate) and p is not SEEN
    ]


def _run(executor, endpoint, graph, arrays, **fields):
    request = Request(graph=graph, inputs=dict(arrays), **fields)
    with np.errstate(all="ignore"):
        return getattr(executor, endpoint)(request)


def _assert_identical(got, expected):
    assert list(got.outputs) == list(expected.outputs)
    for name, array in expected.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], array)
        assert got.outputs[name].dtype == array.dtype and got.outputs[name].shape == array.shape
    if expected.grads is None:
        assert got.grads is None
        return
    assert list(got.grads) == list(expected.grads)
    for name, array in expected.grads.items():
        np.testing.assert_array_equal(got.grads[name], array)
        assert got.grads[name].dtype == array.dtype and got.grads[name].shape == array.shape


def _compare(endpoint, graph, arrays, runs=4, **fields):
    """Run on both executors (`runs` times on the compiled one: unrecorded, recorded, checked, then the program) and compare;
    returns the compiled executor."""
    expected = _run(Executor(compiled=False), endpoint, graph, arrays, **fields)
    compiled = Executor()
    for _ in range(runs):
        _assert_identical(_run(compiled, endpoint, graph, arrays, **fields), expected)
    return compiled


def _sample_graph(name, index, dtype, rng):
    """A graph applying op `name` to its sample `index`, then `* 2.0` (a coerced scalar constant)
    and `sum`, with its inputs (floats in `dtype`, requiring grad)."""
    op, sample = OPS[name], OPS[name].samples[index]
    raw = sample.make(rng) if sample.make else [rng.uniform(sample.low, sample.high, s) for s in sample.shapes]
    arrays, nodes = {}, []
    for j, a in enumerate(np.asarray(a) for a in raw):
        float_input = a.dtype.kind == "f"
        arrays[f"in{j}"] = a.astype(dtype) if float_input else a
        nodes.append({"id": f"in{j}", "op": "input", "requires_grad": float_input})
    node = {"id": "y", "op": name, "inputs": list(arrays)}
    if sample.attrs:
        node["attrs"] = _jsonable(sample.attrs)
    two = {"id": "two", "op": "constant", "attrs": {"value": 2.0}}
    nodes += [node, two, {"id": "z", "op": "mul", "inputs": ["y", "two"]}, {"id": "s", "op": "sum", "inputs": ["z"]}]
    return {"version": 1, "nodes": nodes, "outputs": ["s", "y"]}, arrays, op


def _compiles(name, index):
    """Whether the sample's graph compiles: all but a boolean mask's getitem, whose shape only running tells."""
    return not (name == "getitem" and getattr(OPS[name].samples[index].make, "__name__", "") == "_mask_sample")


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_registry_samples_forward_and_backward_match_the_engine(name, index, dtype):
    graph, arrays, op = _sample_graph(name, index, dtype, np.random.default_rng(index))
    differentiable = op.differentiable and any(a.dtype.kind == "f" for a in arrays.values())
    executors = {False: _compare("forward", graph, arrays)}
    if differentiable:
        graph["outputs"] = ["s"]
        wrt = [n for n, a in arrays.items() if a.dtype.kind == "f"]
        executors[True] = _compare("backward", graph, arrays, wrt=wrt)
        # with a gradient for a non-scalar output, and an intermediate in wrt
        graph["outputs"] = ["s", "z"]
        seed = np.random.default_rng(1).uniform(
            -1, 1, _run(executors[True], "forward", graph, arrays).outputs["z"].shape
        )
        _compare("backward", graph, arrays, wrt=[*wrt, "y"], grad_outputs={"z": seed.astype(arrays[wrt[0]].dtype)})
    for differentiate, executor in executors.items():
        programs = _programs(executor, differentiate)
        expected = Program if _compiles(name, index) else Fallback  # composites too: their primitives are recorded
        assert programs and all(isinstance(p, expected) for p in programs), programs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=valid_requests())
def test_fuzzed_graphs_match_the_engine(case):
    header, arrays = case
    graph = header["graph"]
    _compare("forward", graph, arrays)
    graph["outputs"] = [n["id"] for n in graph["nodes"] if n["id"][:1] == "s" and n["op"] == "sum"]
    _compare("backward", graph, arrays)


def _chain(length, op="exp"):
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    for i in range(length):
        nodes.append({"id": f"c{i}", "op": op, "inputs": [nodes[-1]["id"]]})
    nodes.append({"id": "s", "op": "sum", "inputs": [nodes[-1]["id"]]})
    return {"version": 1, "nodes": nodes, "outputs": ["s"]}


def test_shared_values_accumulate_in_the_engines_order():
    # x feeds four consumers, h three: the order in which their gradients are added decides the
    # float32 bits; the compiled program must add them in the engine's order
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "w", "op": "input", "requires_grad": True},
        {"id": "h", "op": "mul", "inputs": ["x", "w"]},
        {"id": "a", "op": "sin", "inputs": ["h"]},
        {"id": "b", "op": "exp", "inputs": ["x"]},
        {"id": "c", "op": "div", "inputs": ["h", "x"]},
        {"id": "d", "op": "add", "inputs": ["a", "b"]},
        {"id": "e", "op": "mul", "inputs": ["d", "c"]},
        {"id": "f", "op": "sub", "inputs": ["e", "x"]},
        {"id": "g", "op": "mul", "inputs": ["f", "h"]},
        {"id": "s", "op": "sum", "inputs": ["g"]},
        {"id": "t", "op": "mean", "inputs": ["x"]},
    ]
    rng = np.random.default_rng(3)
    arrays = {"x": rng.uniform(0.5, 2, (3, 4)).astype(np.float32), "w": rng.uniform(-2, 2, (4,)).astype(np.float32)}
    graph = {"version": 1, "nodes": nodes, "outputs": ["s", "t"]}
    for wrt in (None, ["x"], ["w"], ["h", "x"]):
        assert all(isinstance(p, Program) for p in _programs(_compare("backward", graph, arrays, wrt=wrt)))


def test_forward_frees_each_value_after_its_last_reader():
    x = np.random.default_rng(0).uniform(-1, 1, 250_000)  # 2 MB per value, 30 values
    executor = Executor()
    for _ in range(3):  # unrecorded, recorded, then checked against the engine
        _run(executor, "forward", _chain(30), {"x": x})
    GENERATOR.idle()  # generated: tracemalloc would count the generator thread's allocations
    tracemalloc.start()
    try:
        _run(executor, "forward", _chain(30), {"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(_programs(executor)[0], Program)
    assert peak < 4 * x.nbytes, peak  # two live values at a time, not thirty


def test_backward_keeps_only_what_the_vjps_read():
    # `add` and `neg` vjps read no values, so the forward values die at once; the gradient flows
    # through one buffer at a time
    x = np.random.default_rng(0).uniform(-1, 1, 250_000)
    graph = _chain(30, op="neg")
    executor = Executor()
    for _ in range(3):  # unrecorded, recorded, then checked against the engine
        _run(executor, "backward", graph, {"x": x})
    GENERATOR.idle()
    tracemalloc.start()
    try:
        _run(executor, "backward", graph, {"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(_programs(executor)[0], Program)
    assert peak < 5 * x.nbytes, peak


@pytest.mark.parametrize("endpoint", ["forward", "backward"])
def test_a_cancelled_compiled_run_stops(endpoint):
    executor = Executor()
    graph, arrays = _chain(5, op="neg"), {"x": np.ones(3)}
    for _ in range(2):  # unrecorded, then recorded
        _run(executor, endpoint, graph, arrays)
    assert isinstance(_programs(executor)[0], Program)
    event = threading.Event()
    event.set()
    with cancel_scope(event), pytest.raises(GraphError) as err:
        _run(executor, endpoint, graph, arrays)
    assert err.value.kind == "cancelled"
    assert _run(executor, endpoint, graph, arrays).outputs["s"] == -3.0


FUNCTION = {
    "id": "f",
    "op": "function",
    "inputs": ["x"],
    "attrs": {
        "name": "Double",
        "forward": {
            "nodes": [
                {"id": "a", "op": "arg", "attrs": {"index": 0}},
                {"id": "k", "op": "constant", "attrs": {"value": 2.0}},
                {"id": "o", "op": "mul", "inputs": ["a", "k"]},
            ],
            "outputs": ["o"],
        },
        "backward": {
            "nodes": [
                {"id": "go", "op": "grad_output"},
                {"id": "k", "op": "constant", "attrs": {"value": 2.0}},
                {"id": "gi", "op": "mul", "inputs": ["go", "k"]},
            ],
            "outputs": ["gi"],
        },
    },
}


@pytest.mark.parametrize("kind", ["function", "grad", "mask"])
def test_what_does_not_compile_runs_on_the_engine(kind):
    x = {"x": np.random.default_rng(0).uniform(-1, 1, (3, 4))}
    nodes = [{"id": "x", "op": "input", "requires_grad": True}]
    if kind == "function":
        nodes += [FUNCTION, {"id": "s", "op": "sum", "inputs": ["f"]}]
    elif kind == "grad":
        nodes += [
            {"id": "q", "op": "mul", "inputs": ["x", "x"]},
            {"id": "u", "op": "sum", "inputs": ["q"]},
            {"id": "gx", "op": "grad", "inputs": ["u", "x"]},
            {"id": "s", "op": "sum", "inputs": ["gx"]},
        ]
    else:
        x["m"] = x["x"] > 0
        nodes += [
            {"id": "m", "op": "input"},
            {"id": "p", "op": "getitem", "inputs": ["x", "m"], "attrs": {"index": [{"tensor": 0}]}},
            {"id": "s", "op": "sum", "inputs": ["p"]},
        ]
    graph = {"version": "1.1", "nodes": nodes, "outputs": ["s"]}
    executor = _compare("backward", graph, x, wrt=["x"])
    assert [type(p) for p in _programs(executor)] == [Fallback]


def test_retained_tapes_stay_on_the_engine():
    executor = Executor()
    graph, arrays = _chain(3), {"x": np.ones(2)}
    result = _run(executor, "backward", graph, arrays, retain_graph=True)
    assert result.tape is not None and len(executor.tapes) == 1
    assert _programs(executor) == []


def test_requests_the_engine_refuses_get_its_errors():
    graph, arrays = _chain(2), {"x": np.ones(3)}
    graph["outputs"] = ["c1"]  # not a scalar, no grad_outputs
    for executor in (Executor(), Executor(compiled=False)):
        with pytest.raises(GraphError, match="gradient can be implied only for scalar outputs"):
            _run(executor, "backward", graph, arrays)
    with pytest.raises(GraphError, match="which is not a node"):
        _run(Executor(), "backward", _chain(2), arrays, wrt=["nope"])


def test_ops_of_lone_scalar_constants_take_the_engines_dtype():
    # reshape(7.0) has the dtype the engine gives a lone Python number (float32): shape inference
    # says so (it used to fail on it), and the compiled program computes it as the engine does
    nodes = [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "k", "op": "constant", "attrs": {"value": 7.0}},
        {"id": "r", "op": "reshape", "inputs": ["k"], "attrs": {"shape": [1]}},
        {"id": "y", "op": "mul", "inputs": ["x", "r"]},
        {"id": "s", "op": "sum", "inputs": ["y"]},
    ]
    graph = {"version": 1, "nodes": nodes, "outputs": ["s", "r"]}
    executor = _compare("forward", graph, {"x": np.ones(3)})
    assert executor.forward(Request(graph=graph, inputs={"x": np.ones(3)})).outputs["r"].dtype == np.float32
    assert [type(p) for p in _programs(executor)] == [Program]


def test_programs_count_against_the_plan_cache_bytes():
    graph, arrays = _chain(50, op="neg"), {"x": np.ones(3)}
    executor = Executor()
    for _ in range(2):  # unrecorded, then recorded
        _run(executor, "forward", graph, arrays)
    before = executor.plans.nbytes
    for _ in range(2):
        _run(executor, "backward", graph, arrays)
    assert executor.plans.nbytes > before + 100 * 1000  # 51 forward and 51 backward instructions
    # a plan that is not cached is not compiled; one whose program would not fit runs on the engine
    uncached = Executor(Limits(plan_cache_size=0))
    _run(uncached, "backward", graph, arrays)
    assert [plan for plan, _ in uncached.plans._plans.values()] == []
    small = Executor(Limits(plan_cache_bytes=100_000))
    expected = _run(Executor(compiled=False), "backward", graph, arrays)
    for _ in range(3):
        _assert_identical(_run(small, "backward", graph, arrays), expected)
    assert [type(p) for p in _programs(small)] == [Fallback] and small.plans.nbytes < 100_000


def test_a_bad_request_does_not_undo_the_compiled_program():
    graph, arrays = _chain(2, op="neg"), {"x": np.ones(3)}
    graph["outputs"] = ["c1"]
    executor = Executor()
    good = {"c1": np.ones(3)}
    for _ in range(2):
        _run(executor, "backward", graph, arrays, grad_outputs=good)
    with pytest.raises(GraphError, match="grad_outputs 'c1' has shape"):
        _run(executor, "backward", graph, arrays, grad_outputs={"c1": np.ones(4)})
    assert [type(p) for p in _programs(executor)] == [Program]
    assert _run(executor, "backward", graph, arrays, grad_outputs=good).grads["x"].tolist() == [1.0, 1.0, 1.0]


def test_plans_over_the_step_limit_run_on_the_engine(monkeypatch):
    from wire import compile as wire_compile

    monkeypatch.setattr(wire_compile, "MAX_STEPS", 10)
    small, large = Executor(), Executor()
    for _ in range(2):
        _run(small, "backward", _chain(8, op="neg"), {"x": np.ones(3)})
        _run(large, "backward", _chain(12, op="neg"), {"x": np.ones(3)})
    assert [type(p) for p in _programs(small)] == [Program] and _programs(large) == []
