"""Part 6: ONNX models (issue 25, Benchmarks).

For each of the ONNX tests' three models (`tests/onnx/onnx_testkit.py`: an MLP, a LeNet-style CNN
with BatchNorm and pooling, a one-block transformer encoder) at batch 8, float32, one thread:

(a) forward: gradserve, the imported model run as `/v2` infer runs it (the model's plan held by a
    `wire.Executor`, a request admitted and executed by `wire.handler.execute`, the request's
    decoding left out), against an ONNX Runtime CPU `InferenceSession`;
(b) forward + input gradient (a seeded backward, `grad:x`): gradserve against PyTorch eager on
    the same module (`torch.autograd.grad` of the output along the same seed, x's gradient only:
    the model's weights are constants on both sides);
(c) load time against model size: `wire.onnx.import_model` (and import + the plan the repository
    holds) of MLPs of ~0.1, 1, 4 and 16 MiB of float32 weights, ONNX Runtime's session creation
    beside it.

Issue 25 sets no numeric target, so every row is "measured" (no verdict). The models are exported
once per run by a subprocess (torch is never imported by the process that runs the suite); every
side of every round is a fresh worker process: `python -m benchmarks.part_onnx <case> <side> '<json>'`
(`python -m benchmarks.part_onnx export DIR` writes the models).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy

from benchmarks import alternate, common
from benchmarks import rounds as rounds_module
from benchmarks.common import PY, ROOT, fmt_time, have, table, timing_table
from benchmarks.rounds import Runs, Target, ratio_target, record, run_rounds, side_rounds

MODELS = ("mlp", "lenet", "encoder")
INPUT_SHAPES = {"mlp": (4,), "lenet": (1, 12, 12), "encoder": (5, 8)}  # the test models' x and y, batch left out
OUTPUT_SHAPES = {"mlp": (3,), "lenet": (5,), "encoder": (5, 8)}
BATCH = 8
SIZES_MIB = (0.1, 1, 4, 16)  # (c): float32 weights of the MLPs
LAYERS = 4  # (c): an MLP of LAYERS square Gemm layers (width chosen for the size), Relu between them
MAX_MODEL_BYTES = 64 * 2**20  # (c) imports under this bound: the default (max_onnx_model_bytes) is 16 MiB
DEPENDENCIES = ("onnx", "onnxruntime", "torch")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MEASURED = "measured (#25 sets no target)"
LABELS = {
    "gradserve": "gradserve (wire.Executor on the imported plan)",
    "onnxruntime": "ONNX Runtime CPU (InferenceSession)",
    "torch": "PyTorch CPU eager",
}
TITLES = {
    "mlp": "MLP (4, 16, 3; tanh, log_softmax)",
    "lenet": "LeNet-style CNN (conv, BatchNorm, max/avg pool, 1x12x12)",
    "encoder": "transformer encoder block (d=8, 2 heads, GELU, LayerNorm; 5 tokens)",
}


# --- the models -----------------------------------------------------------------------------------


def mlp_of_size(mib: float) -> bytes:
    """ONNX bytes of an MLP of `LAYERS` square Gemm layers with ~`mib` MiB of float32 weights
    (seeded), Relu between the layers; input "x" [batch, width], output "y"."""
    from onnx import TensorProto, helper, numpy_helper

    width = max(2, round((mib * 2**20 / 4 / LAYERS) ** 0.5))
    rng = numpy.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(LAYERS):
        weight = (rng.standard_normal((width, width)) / width**0.5).astype(numpy.float32)
        inits += [numpy_helper.from_array(weight, f"w{i}"), numpy_helper.from_array(numpy.zeros(width, "f4"), f"b{i}")]
        out = "y" if i == LAYERS - 1 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [out if i == LAYERS - 1 else f"g{i}"]))
        if i < LAYERS - 1:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        last = out
    graph = helper.make_graph(
        nodes,
        f"mlp_{mib}mib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def export(directory: Path) -> None:
    """Write `<name>.onnx` of the three test models and `mlp_<size>mib.onnx` of the load-time MLPs."""
    from tests.onnx.onnx_testkit import export as export_model
    from tests.onnx.onnx_testkit import models

    for name, (module, example) in models().items():
        (directory / f"{name}.onnx").write_bytes(export_model(module, example))
    for mib in SIZES_MIB:
        (directory / f"mlp_{mib}mib.onnx").write_bytes(mlp_of_size(mib))


def sample(name: str, batch: int = BATCH) -> numpy.ndarray:
    return numpy.random.default_rng(1).standard_normal((batch, *INPUT_SHAPES[name])).astype(numpy.float32)


def seed_like(output: numpy.ndarray) -> numpy.ndarray:
    """The backward's seed (grad_output) for an output: seeded normal values of its shape."""
    return numpy.random.default_rng(2).standard_normal(output.shape).astype(numpy.float32)


# --- the sides' steps (each returns what it computed, so the tests can compare the sides) ----------------


def gradserve_step(data: bytes, x: numpy.ndarray, seed: numpy.ndarray | None = None):
    """`step()` -> (output, x's gradient or None): the imported model's plan held by an Executor, as a
    repository model is (`service.oip.onnx_models.load_onnx`), and a request admitted and executed by the
    pipeline that runs a `/v2` infer (`wire.handler.execute`): a forward, or with `seed` a backward with
    `grad_output:y` = seed and `grad:x` asked for."""
    from wire import handler
    from wire.executor import Executor
    from wire.messages import Request
    from wire.onnx import import_model

    imported = import_model(data)
    executor = Executor()
    plan, key = executor.plans.hold(imported.graph, executor.limits)
    output = imported.outputs[0].name
    kind = "forward" if seed is None else "backward"

    def step():
        request = Request(inputs={"x": x, **imported.parameters})
        request.held = (plan, key, None)
        if seed is not None:
            request.grad_outputs, request.wrt = {output: seed}, ["x"]
        ticket = executor.admit(request, kind)
        result = handler.execute(executor, ticket)
        step.ran = result.ran
        if result.ran == "engine":  # why its program did not compile (wire.compile's Fallback)
            step.ran += "".join(f" ({why})" for why in ticket.shapes.programs.values() if isinstance(why, Exception))
        return result.outputs[output], (result.grads or {}).get("x")

    return step


def onnxruntime_step(data: bytes, x: numpy.ndarray):
    """`step()` -> (output, None): an ONNX Runtime CPU session of one thread."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def step():
        return session.run(None, {"x": x})[0], None

    return step


def torch_step(name: str, x: numpy.ndarray, seed: numpy.ndarray):
    """`step()` -> (output, x's gradient): the test model's module (eval mode, weights not requiring
    grad), forward and `torch.autograd.grad` of the output along `seed`."""
    import torch

    from tests.onnx.onnx_testkit import models

    torch.set_num_threads(1)
    module = models()[name][0]
    module.requires_grad_(False)
    tx, tseed = torch.from_numpy(x), torch.from_numpy(seed)

    def step():
        xt = tx.detach().requires_grad_()
        y = module(xt)
        (grad,) = torch.autograd.grad(y, xt, tseed)
        return y.detach().numpy(), grad.numpy()

    return step


def step_of(case: str, side: str, name: str, directory: Path):
    """The `step` of one side of case "forward" or "gradient" on model `name` (exported in `directory`)."""
    data = (directory / f"{name}.onnx").read_bytes()
    x = sample(name)
    if case == "forward":
        return gradserve_step(data, x) if side == "gradserve" else onnxruntime_step(data, x)
    seed = seed_like(numpy.empty((BATCH, *OUTPUT_SHAPES[name]), numpy.float32))
    return gradserve_step(data, x, seed) if side == "gradserve" else torch_step(name, x, seed)


# --- the worker: one side of one case in a fresh process --------------------------------------------


def case_timed(case: str, side: str, p: dict) -> dict:
    step = step_of(case, side, p["model"], Path(p["dir"]))
    times, _ = alternate.samples(step, p.get("reps", 2000), p.get("warmup", 20), p.get("max_s", 10))
    return {"times": times, "extra": {"ran": getattr(step, "ran", None)}}


def case_load(side: str, p: dict) -> dict:
    """Samples: seconds to import the model (gradserve: `import_model`; onnxruntime: a session);
    extra: gradserve's import + the held plan (`Executor.plans.hold`, as the repository loads a model)
    per sample, the weights' MiB and the model's bytes. A warm-up load first (lazy imports)."""
    data = Path(p["path"]).read_bytes()
    extra = {"model_bytes": len(data)}
    if side == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1

        def load():
            onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            return ()
    else:
        from wire.executor import Executor
        from wire.onnx import OnnxLimits, import_model

        limits = OnnxLimits(max_bytes=MAX_MODEL_BYTES)

        def load():
            imported = import_model(data, limits)
            imported_at = time.perf_counter()
            executor = Executor()
            executor.plans.hold(imported.graph, executor.limits)
            extra["weights_mib"] = sum(a.nbytes for a in imported.parameters.values()) / 2**20
            return imported_at, time.perf_counter()

    load()
    times, with_plan, end = [], [], time.perf_counter() + p.get("max_s", 30)
    for _ in range(p.get("reps", 5)):
        t0 = time.perf_counter()
        marks = load()
        times.append((marks[0] if marks else time.perf_counter()) - t0)
        if marks:
            with_plan.append(marks[1] - t0)
        if time.perf_counter() > end:
            break
    if with_plan:
        extra["with_plan"] = with_plan
    return {"times": times, "extra": extra}


def main(argv: list[str]) -> int:
    if argv[0] == "export":
        export(Path(argv[1]))
        return 0
    case, side = argv[0], argv[1]
    params = json.loads(argv[2]) if len(argv) > 2 else {}
    result = case_load(side, params) if case == "load" else case_timed(case, side, params)
    print(json.dumps(result))
    return 0


# --- the part ------------------------------------------------------------------------------------


def _interleave(case: str, sides: list, round_s: float, **params) -> Runs:
    """`rounds.ROUNDS` rounds of `case`, a fresh worker of one thread per side per round, the sides'
    workers alive at once and sampled in alternating batches (`benchmarks.alternate`)."""
    argv = [PY, "-m", "benchmarks.part_onnx", case]
    commands = {side: ([*argv, side, json.dumps({**params, "max_s": round_s})], ONE_THREAD) for side in sides}
    runs = run_rounds(sides, rounds_module.ROUNDS, common.together(commands, round_s), together=True)
    record(
        f"onnx {case} {json.dumps({k: v for k, v in params.items() if k != 'dir'}, sort_keys=True)}", side_rounds(runs)
    )
    return runs


def _ran(runs: Runs) -> str:
    got = {e.get("ran") for e in runs.get("gradserve", {}).get("extra", []) if e}
    return ", ".join(sorted(str(r) for r in got)) or "-"


def _compare(case, name, sides, base, directory, quick, targets, label) -> list:
    runs = _interleave(
        case, sides, 2 if quick else 3, model=name, dir=str(directory), reps=300 if quick else 3000, warmup=20
    )
    md, _ = timing_table(runs, LABELS, [base])
    target = ratio_target("6", label, runs, "gradserve", base, None)
    target.note = MEASURED
    targets.append(target)
    return [f"#### {TITLES[name]}\n", md, f"\ngradserve ran it: {_ran(runs)}. {target.summary()}\n"]


def _load_table(directory: Path, quick: bool, targets: list) -> list:
    rows = []
    for mib in SIZES_MIB:
        runs = _interleave(
            "load",
            ["gradserve", "onnxruntime"],
            60,
            path=str(directory / f"mlp_{mib}mib.onnx"),
            reps=3 if quick else 10,
        )
        gs = runs["gradserve"]
        if not gs["times"]:
            rows.append([f"~{mib} MiB", f"skipped: {gs['error']}", "", "", "", "", ""])
            targets.append(Target("6", f"ONNX import ms/MiB of a ~{mib} MiB MLP", None, note=f"failed: {gs['error']}"))
            continue
        extra = gs["extra"][0]
        weights = extra["weights_mib"]
        per_round = [statistics.median(r["times"]) if r else None for r in gs["rounds"]]
        with_plan = statistics.median([t for e in gs["extra"] for t in e["with_plan"]])
        ratio = ratio_target(
            "6", f"ONNX import of a ~{mib} MiB MLP ÷ ONNX Runtime session", runs, "gradserve", "onnxruntime", None
        )
        ratio.note = MEASURED
        per_mib = Target(
            "6",
            f"ONNX import ms/MiB of a ~{mib} MiB MLP",
            None,
            unit="ms",
            values=[None if v is None else v / weights for v in per_round],
            of_minimums=min(gs["times"]) / weights,
            loads=list(runs.loads),
            note=MEASURED,
        )
        targets += [per_mib, ratio]
        ort = runs["onnxruntime"]["times"]
        median = statistics.median(gs["times"])
        rows.append(
            [
                f"{weights:.2f} MiB ({extra['model_bytes'] / 2**20:.2f} MiB file)",
                fmt_time(median),
                f"{median * 1e3 / weights:.2f}",
                fmt_time(with_plan),
                fmt_time(statistics.median(ort)) if ort else f"skipped: {runs['onnxruntime']['error']}",
                ratio.spread(),
                len(per_round),
            ]
        )
    headers = [
        "weights (float32)",
        "import (median)",
        "import ms/MiB",
        "import + plan (median)",
        "ONNX Runtime session (median)",
        "import ÷ session: rounds min / median / max",
        "rounds",
    ]
    return [table(headers, rows)]


def missing_dependencies() -> list:
    return [m for m in DEPENDENCIES if not have(m)]


def planned_labels() -> list:
    return (
        [f"ONNX {n} forward ÷ ONNX Runtime" for n in MODELS]
        + [f"ONNX {n} forward + input gradient ÷ PyTorch eager" for n in MODELS]
        + [f"ONNX import ms/MiB of a ~{mib} MiB MLP" for mib in SIZES_MIB]
    )


def part6(quick: bool):
    out = ["## Part 6: ONNX models (gradserve vs ONNX Runtime CPU and PyTorch eager)\n"]
    missing = missing_dependencies()
    if missing:
        note = f"not run: {', '.join(missing)} not installed"
        out.append(f"{note} (the `[onnx]` extra and torch export the models and are the peers)\n")
        return "\n".join(out), [Target("6", label, None, note=note) for label in planned_labels()]
    targets = []
    with tempfile.TemporaryDirectory(prefix="gradserve-onnx-bench-") as tmp:
        directory = Path(tmp)
        proc = subprocess.run(
            [PY, "-m", "benchmarks.part_onnx", "export", tmp], cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        if proc.returncode != 0:
            raise RuntimeError(f"exporting the models failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        out.append(
            f"The ONNX tests' models (`tests/onnx/onnx_testkit.py`, exported with `torch.onnx.export`, opset 20) "
            f"at batch {BATCH}, float32, one thread on every side (OMP/OPENBLAS/MKL_NUM_THREADS=1, "
            "`torch.set_num_threads(1)`, ONNX Runtime intra/inter-op threads 1). Each side is a fresh process per "
            "round; a figure is gradserve's median ÷ the peer's in the same round. Issue 25 sets no numeric target "
            f'("the engine will be slower; measure by how much"): the rows are {MEASURED}, with no verdict.\n'
        )
        out += [
            "### (a) forward: gradserve vs ONNX Runtime CPU\n",
            "gradserve: the model's plan held by a `wire.Executor` as the `/v2` repository holds it, one sample = a "
            "request admitted and executed by `wire.handler.execute` (the `/v2` infer pipeline without the HTTP body's "
            "decoding and encoding); ONNX Runtime: `InferenceSession.run`.\n",
        ]
        for name in MODELS:
            label = f"ONNX {name} forward ÷ ONNX Runtime"
            out += _compare(
                "forward", name, ["gradserve", "onnxruntime"], "onnxruntime", directory, quick, targets, label
            )
        out += [
            "### (b) forward + input gradient: gradserve vs PyTorch eager\n",
            "gradserve: a `grad:x` infer (a backward seeded with `grad_output:y`); PyTorch: the same module's forward "
            "and `torch.autograd.grad(y, x, seed)`. The weights are constants on both sides (x's gradient only).\n",
        ]
        for name in MODELS:
            label = f"ONNX {name} forward + input gradient ÷ PyTorch eager"
            out += _compare("gradient", name, ["gradserve", "torch"], "torch", directory, quick, targets, label)
        out += [
            "### (c) load time vs model size\n",
            f"MLPs of {LAYERS} square Gemm layers (Relu between), built with `onnx.helper`. import = "
            "`wire.onnx.import_model` (read, check, shape inference, conversion); + plan = the plan the repository "
            "holds (`Executor.plans.hold`). The 16 MiB model is over the default `max_onnx_model_bytes` (16 MiB "
            f"of file): the import runs under a {MAX_MODEL_BYTES // 2**20} MiB bound. ONNX Runtime: "
            "`InferenceSession(bytes)`, one thread. Medians over every round's samples.\n",
        ]
        out += _load_table(directory, quick, targets)
    return "\n".join(out) + "\n", targets


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
