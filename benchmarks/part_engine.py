"""Part 1: the engine in-process against PyTorch CPU eager, the hand-written NumPy floor, and the
peers (HIPS autograd, JAX eager and `jax.jit`); the service's compute (`wire.Executor`, in-process)
as one more side of the chain and the seed net."""

from __future__ import annotations

import statistics

from benchmarks import peers
from benchmarks.common import LABELS, installed, interleave, rtext, table, timing_table, verdict

PEERS_MODULES = dict(peers.MODULE_OF, torch="torch")


def _run(case, sides, rounds, deadline, **params):
    """`interleave` over the installed sides; a missing peer's row says "not installed"."""
    present, missing = installed(sides, PEERS_MODULES)
    res = interleave(case, present, rounds, deadline, **params)
    return {s: res.get(s) or missing[s] for s in sides}


def _compile_note(res) -> str:
    compile_s = [e["compile_s"] for e in res.get("jaxjit", {}).get("extra", []) if e and "compile_s" in e]
    if not compile_s:
        return ""
    return (
        f"\n`jax.jit` compile time (trace + lower + compile, ahead of the samples, so not in them): "
        f"{statistics.median(compile_s) * 1e3:.0f} ms (median of {len(compile_s)} processes).\n"
    )


def _target(targets, part, label, ratio, limit, kind="<="):
    targets.append((part, label, rtext(ratio), verdict(ratio, limit, kind)))
    return f"{label}: {rtext(ratio)} → **{verdict(ratio, limit, kind)}**"


def _chain(quick, rounds, targets):
    sides = ["engine", "executor", "torch", "numpy", *peers.PEERS]
    res = _run("chain100", sides, rounds, 90 if quick else 240, reps=100 if quick else 300, warmup=20)
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    notes = [
        _target(targets, "1a", "100-op chain ≤0.8x PyTorch", ratios.get(("engine", "torch")), 0.8),
        _target(targets, "1a", "100-op chain ≤1.0x PyTorch (#14)", ratios.get(("engine", "torch")), 1.0),
        _target(
            targets, "1a", "server compute: 100-op chain ≤0.3x PyTorch (#14)", ratios.get(("executor", "torch")), 0.3
        ),
    ]
    return [
        "### (a) per-op overhead: a chain of 100 ops on 2x2 float32 (alternating mul, add), then backward\n",
        "One sample = build the chain + `sum().backward()` (JAX and autograd: `value_and_grad` of the same "
        "function). The Executor side runs the same chain as a 102-node `/backward` graph, decoded beforehand: "
        "one sample = `Executor.backward` (plan lookup, forward, backward).\n",
        md,
        _compile_note(res),
        "\nTargets: " + "; ".join(notes) + "\n",
    ]


def _seed(quick, rounds, targets, dtype):
    sides = ["engine", "executor", "torch", "numpy", *peers.PEERS]
    res = _run("seed", sides, rounds, 90 if quick else 240, dtype=dtype, reps=40 if quick else 150, warmup=10)
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    rn, rt = ratios.get(("engine", "numpy")), ratios.get(("engine", "torch"))
    notes = [
        _target(targets, "1b", f"seed net {dtype} ≤1.1x NumPy", rn, 1.1),
        _target(targets, "1b", f"seed net {dtype} ≤1.0x PyTorch", rt, 1.0),
        _target(targets, "1b", f"seed net {dtype} ≤1.2x NumPy (#14)", rn, 1.2),
    ]
    if dtype == "float32":
        notes.append(
            _target(
                targets,
                "1b",
                "server compute: seed net float32 ≤1.1x NumPy (#14)",
                ratios.get(("executor", "numpy")),
                1.1,
            )
        )
    return [
        f"### (b) seed two-layer net (N=64, D_in=1000, H=100, D_out=10), forward + backward, {dtype}\n",
        md,
        _compile_note(res),
        "\nTargets: " + "; ".join(notes) + "\n",
    ]


def _hvp(quick, rounds, targets):
    sides = ["engine", "torch", *peers.PEERS]
    res = _run("hvp", sides, rounds, 90 if quick else 240, reps=100 if quick else 300, warmup=20)
    md, ratios = timing_table(res, LABELS, ["torch"])
    note = _target(targets, "1e", "HVP of a small MLP ≤1.2x PyTorch (#14)", ratios.get(("engine", "torch")), 1.2)
    return [
        "### (e) Hessian-vector product of a small MLP (N=32, 16, 32, 4, tanh) float64\n",
        "One sample = loss, its gradient with `create_graph=True`, then the gradient of <gradient, v> "
        "(engine: `engine.grad` twice; PyTorch: `torch.autograd.grad` twice; autograd: `grad` of that; "
        "JAX: `jvp` of `grad`, the form its documentation gives).\n",
        md,
        _compile_note(res),
        f"\nTarget: {note}\n",
    ]


def _large(quick, targets):
    res = interleave(
        "large",
        ["engine", "torch", "numpy"],
        1 if quick else 3,
        150 if quick else 300,
        reps=2 if quick else 4,
        warmup=1,
    )
    md, ratios = timing_table(res, LABELS, ["torch", "numpy"])
    note = _target(targets, "1c", "large MLP ≤1.05x NumPy", ratios.get(("engine", "numpy")), 1.05)
    return [
        "### (c) large MLP (N=512, 4096, 4096, 1024) float32, forward + backward (x does not require grad)\n",
        md,
        f"\nTarget: {note}\n",
    ]


def _chain100k(quick):
    res = interleave(
        "chain100k", ["engine", "torch", "numpy"], 1 if quick else 3, 120 if quick else 240, length=100_000
    )
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
    rounds = 2 if quick else 4
    out = [
        "## Part 1: engine vs PyTorch CPU eager, NumPy with manual gradients, HIPS autograd and JAX\n",
        "Every side runs in its own process, interleaved. A peer that is not installed says so "
        "(they are the optional `bench` extra).\n",
    ]
    out += _chain(quick, rounds, targets)
    for dtype in ("float32", "float64"):
        out += _seed(quick, rounds, targets, dtype)
    out += _large(quick, targets)
    out += _chain100k(quick)
    out += _hvp(quick, rounds, targets)
    return "\n".join(out), targets
