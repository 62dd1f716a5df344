"""Part 1: the engine in-process against PyTorch CPU eager, the hand-written NumPy floor, and the
peers (HIPS autograd, JAX eager and `jax.jit`); the service's compute (`wire.Executor`, in-process)
as one more side of the chain and the seed net."""

from __future__ import annotations

import statistics

from benchmarks import peers
from benchmarks import rounds as rounds_module
from benchmarks.common import LABELS, fmt_time, installed, interleave, table, timing_table
from benchmarks.rounds import Target, ratio_target

PEERS_MODULES = dict(peers.MODULE_OF, torch="torch")


def _run(case, sides, rounds, round_s, **params):
    """`interleave` over the installed sides; a missing peer's row says "not installed"."""
    present, missing = installed(sides, PEERS_MODULES)
    res = interleave(case, present, rounds, round_s, **params)
    for side in sides:
        res.setdefault(side, {**missing.get(side, {"times": [], "extra": [], "error": "not run"}), "rounds": []})
    out = type(res)({s: res[s] for s in sides})
    out.loads = res.loads
    return out


def _compile_note(res) -> str:
    compile_s = [e["compile_s"] for e in res.get("jaxjit", {}).get("extra", []) if e and "compile_s" in e]
    if not compile_s:
        return ""
    return (
        f"\n`jax.jit` compile time (trace + lower + compile, ahead of the samples, so not in them): "
        f"{statistics.median(compile_s) * 1e3:.0f} ms (median of {len(compile_s)} processes).\n"
    )


def _target(targets, part, label, runs, side, base, limit, kind="<="):
    target = ratio_target(part, label, runs, side, base, limit, kind)
    targets.append(target)
    return target.summary()


def _chain(quick, rounds, targets):
    sides = ["engine", "executor", "torch", "numpy", *peers.PEERS]
    res = _run("chain100", sides, rounds, 10 if quick else 30, reps=100 if quick else 300, warmup=20)
    md, _ = timing_table(res, LABELS, ["torch", "numpy"])
    notes = [
        _target(targets, "1a", "100-op chain ≤0.8x PyTorch (#24)", res, "engine", "torch", 0.8),
        _target(targets, "1a", "100-op chain ≤1.0x PyTorch (#14)", res, "engine", "torch", 1.0),
        _target(targets, "1a", "server compute: 100-op chain ≤0.3x PyTorch (#14)", res, "executor", "torch", 0.3),
    ]
    return [
        "### (a) per-op overhead: a chain of 100 ops on 2x2 float32 (alternating mul, add), then backward\n",
        "One sample = build the chain + `sum().backward()` (JAX and autograd: `value_and_grad` of the same "
        "function). The Executor side runs the same chain as a 102-node binary `/backward` request, decoded "
        "beforehand as the service decodes it (`wire.handler.decode`: a header seen before is a `wire.layouts` "
        "repeat): one sample = `wire.handler.run`, what the service runs for it (admission, then the plan's "
        "program: forward, backward).\n",
        md,
        _compile_note(res),
        "\nTargets: " + "; ".join(notes) + "\n",
    ]


def _seed(quick, rounds, targets, dtype):
    sides = ["engine", "executor", "torch", "numpy", *peers.PEERS]
    res = _run("seed", sides, rounds, 10 if quick else 30, dtype=dtype, reps=40 if quick else 150, warmup=10)
    md, _ = timing_table(res, LABELS, ["torch", "numpy"])
    notes = [
        _target(targets, "1b", f"seed net {dtype} ≤1.1x NumPy (#24)", res, "engine", "numpy", 1.1),
        _target(targets, "1b", f"seed net {dtype} ≤1.0x PyTorch", res, "engine", "torch", 1.0),
        _target(targets, "1b", f"seed net {dtype} ≤1.2x NumPy (#14)", res, "engine", "numpy", 1.2),
    ]
    if dtype == "float32":
        notes.append(
            _target(targets, "1b", "server compute: seed net float32 ≤1.1x NumPy (#14)", res, "executor", "numpy", 1.1)
        )
    return [
        f"### (b) seed two-layer net (N=64, D_in=1000, H=100, D_out=10), forward + backward, {dtype}\n",
        md,
        _compile_note(res),
        "\nTargets: " + "; ".join(notes) + "\n",
    ]


def _hvp(quick, rounds, targets):
    sides = ["engine", "torch", *peers.PEERS]
    res = _run("hvp", sides, rounds, 10 if quick else 30, reps=100 if quick else 300, warmup=20)
    md, _ = timing_table(res, LABELS, ["torch"])
    note = "; ".join(
        [
            _target(targets, "1e", "HVP of a small MLP ≤1.0x PyTorch (#24)", res, "engine", "torch", 1.0),
            _target(targets, "1e", "HVP of a small MLP ≤1.2x PyTorch (#14)", res, "engine", "torch", 1.2),
        ]
    )
    return [
        "### (e) Hessian-vector product of a small MLP (N=32, 16, 32, 4, tanh) float64\n",
        "One sample = loss, its gradient with `create_graph=True`, then the gradient of <gradient, v> "
        "(engine: `engine.grad` twice; PyTorch: `torch.autograd.grad` twice; autograd: `grad` of that; "
        "JAX: `jvp` of `grad`, the form its documentation gives).\n",
        md,
        _compile_note(res),
        f"\nTarget: {note}\n",
    ]


def _large(quick, rounds, targets):
    res = interleave(
        "large", ["engine", "torch", "numpy"], rounds, 60 if quick else 100, reps=2 if quick else 4, warmup=1
    )
    md, _ = timing_table(res, LABELS, ["torch", "numpy"])
    note = _target(targets, "1c", "large MLP ≤1.05x NumPy", res, "engine", "numpy", 1.05)
    return [
        "### (c) large MLP (N=512, 4096, 4096, 1024) float32, forward + backward (x does not require grad)\n",
        md,
        f"\nTarget: {note}\n",
    ]


def _chain100k(quick):
    res = interleave("chain100k", ["engine", "torch", "numpy"], 1 if quick else 3, 120, length=100_000)
    md, _ = timing_table(res, LABELS, ["torch", "numpy"])
    mem_rows = []
    for side, r in res.items():
        if r["extra"]:
            growth = [e["peak_rss_growth_mib"] for e in r["extra"]]
            peak = [e["peak_rss_mib"] for e in r["extra"]]
            mem_rows.append(
                [
                    LABELS[side],
                    f"{statistics.median(growth):.1f} MiB",
                    f"{statistics.median(peak):.1f} MiB",
                    len(growth),
                ]
            )
        else:
            mem_rows.append([LABELS[side], f"skipped: {r['error']}", "", ""])
    return [
        "### (d) a 100,000-op chain (2x2), build + backward: time and peak memory\n",
        "One fresh worker process per sample; memory = growth of `ru_maxrss` over the process's "
        "baseline after imports and a 10-op warm-up chain.\n",
        md,
        "",
        table(["side", "peak RSS growth (median)", "peak RSS", "n"], mem_rows),
        "",
    ]


def part1(quick: bool):
    targets = []
    rounds = rounds_module.ROUNDS
    out = [
        "## Part 1: engine vs PyTorch CPU eager, NumPy with manual gradients, HIPS autograd and JAX\n",
        "Every side runs in its own process, interleaved. A peer that is not installed says so "
        "(they are the optional `bench` extra).\n",
    ]
    out += _chain(quick, rounds, targets)
    for dtype in ("float32", "float64"):
        out += _seed(quick, rounds, targets, dtype)
    out += _large(quick, rounds, targets)
    out += _chain100k(quick)
    out += _hvp(quick, rounds, targets)
    out += _growth(quick, rounds, targets)
    return "\n".join(out), targets


def _growth(quick, rounds, targets):
    """(f) cost growth: a new 1,000-node graph's first request against a repeat, and large plans' µs/node."""
    graphs = 4 if quick else 10
    res = interleave("growth", ["first", "repeat"], rounds, 30 if quick else 60, nodes=1000, graphs=graphs)
    md, _ = timing_table(res, LABELS, ["repeat"])
    notes = [
        _target(
            targets, "1f", "first request of a new 1,000-node graph ≤10x a repeat (#24)", res, "first", "repeat", 10
        )
    ]
    plan_rows = []
    for nodes in (10_000, 100_000):
        reps = 2 if quick else 5
        plan = interleave("plan", ["executor"], rounds, 60 if nodes > 10_000 else 20, nodes=nodes, reps=reps)
        slot = plan["executor"]
        values = [statistics.median(r["times"]) if r else None for r in slot["rounds"]]
        target = Target(
            "1f",
            f"{nodes // 1000}k-node chain plan ≤5 µs/node (#24)",
            5e-6,
            "<=",
            "us",
            values,
            min(slot["times"]) if slot["times"] else None,
            list(plan.loads),
        )
        targets.append(target)
        notes.append(target.summary())
        firsts = [e["first_per_node"] for e in slot["extra"]]
        plan_rows.append(
            [
                f"{nodes:,} nodes",
                target.spread(),
                fmt_time(min(slot["times"])) if slot["times"] else f"skipped: {slot['error']}",
                fmt_time(statistics.median(firsts)) if firsts else "-",
                len(values),
            ]
        )
    return [
        "### (f) cost growth: a new graph's first request, and large plans\n",
        f"In process, as the service runs a request: decode (the JSON head parsed and validated) + "
        f"`Executor.backward`. *first* = the first request of each of {graphs} chain graphs of 1,000 nodes the "
        "executor has not seen (plan, infer, run on the engine: recorded only when seen again); *repeat* = repeats of one such graph. Each side is a "
        "fresh process per round; the ratio is first ÷ repeat per round.\n",
        md,
        "",
        "Plans of a 10,000- and a 100,000-node chain (the 100-op chain's ops, 2x2 float32), requests decoded "
        "beforehand; one sample = `Executor.backward` of a cached plan ÷ its nodes. One fresh process per round.\n",
        table(
            ["plan", "µs/node: rounds min / median / max", "min sample", "first request / node", "rounds"], plan_rows
        ),
        "",
        "\nTargets: " + "; ".join(notes) + "\n",
    ]
