"""Rounds, targets and verdicts that reproduce (issue 24, item 6).

Every comparison runs `ROUNDS` rounds. A round starts one fresh process per side (a worker, or a
server), the sides in one order in even rounds and the reverse in odd ones, and records the
machine's 1-minute load average at its start. Within a round the sides are measured under the same
machine state (`benchmarks.alternate`): every side's worker is started and does its set-up and
warm-up, one after another, then the coordinator hands out short batches (~20 ms of samples) to
one side at a time over stdin/stdout pipes, the order rotating each turn, until every side has its
`reps` samples or has spent its time budget; the others block reading their pipe meanwhile. The
first sample of a batch is that side's warm-up after the others' batches and is dropped (kept
only where it alone is longer than a batch), for every side alike. So a change in the machine's
speed during a round (another tenant, the CPU's clock) falls on every side's samples, not on one
side's window. Thread pools that spin while they wait (OpenBLAS, OpenMP) would take the CPU from
the side that runs: the reported runs use `--threads 1`. The service and transfer parts
start a round's servers together and load them in turns (the service's sweep cell by cell, the
transfer part in bursts, the access-log target two servers in paired bursts).

A figure is a per-round value: this side's median in the round ÷ the baseline's median in the
same round (or a share, or a count). A `Target` keeps every round's value; its verdict is "met"
only if every round meets the limit, else "missed in k of R rounds". The Targets table shows the
rounds' min / median / max, the ratio of the sides' minimums over the whole run, and the load range.

`results_json` is the run's raw record (targets with their rounds, each case's per-round
statistics per side); `agreement` compares two of them verdict by verdict (`--verify`).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

ROUNDS = 5  # `python -m benchmarks --rounds N` (a `--quick` run defaults to 2)
RECORD: dict[str, dict] = {}  # case -> per-round statistics of every side, for the results JSON


def load_now() -> float | None:
    """The 1-minute load average now (None where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def order(sides: list, r: int) -> list:
    """The sides' order in round `r`: as given in even rounds, reversed in odd ones."""
    return list(sides) if r % 2 == 0 else list(reversed(sides))


class Runs(dict):
    """{side: {"rounds": [a round's result dict or None], "times": pooled samples, "extra": [...],
    "error": str | None}}, and `.loads`: the 1-minute load average at each round's start."""

    loads: list


def run_rounds(sides: list, count: int, measure: Callable, together: bool = False) -> Runs:
    """`count` rounds of `measure` over `sides` (order alternating between rounds). `measure(side, r)`
    returns a dict ({"times": [...], "extra": ...} for a timed case) or {"error": why}; with
    `together`, `measure(sides, r)` runs the round's sides at once and returns {side: such a dict}
    (`benchmarks.alternate`). A side that fails is not run again and its later rounds are None.
    Every round runs (none is cut for time: a side bounds its own sampling)."""
    out = Runs({s: {"rounds": [], "times": [], "extra": [], "error": None} for s in sides})
    out.loads = []
    for r in range(count):
        out.loads.append(load_now())
        live = [side for side in order(sides, r) if not out[side]["error"]]
        got = measure(live, r) if together else {side: measure(side, r) for side in live}
        for side in order(sides, r):
            slot = out[side]
            res = got.get(side)
            if res is not None and "error" in res:
                slot["error"], res = res["error"], None
            slot["rounds"].append(res)
            if res is not None:
                slot["times"].extend(res.get("times", ()))
                if res.get("extra"):
                    slot["extra"].append(res["extra"])
    return out


def round_values(runs: Runs, value: Callable) -> list:
    """[value(round index) for each round], None where it raises KeyError/TypeError/ZeroDivisionError
    (a side without a result that round)."""
    out = []
    for r in range(len(runs.loads)):
        try:
            out.append(value(r))
        except (KeyError, TypeError, ZeroDivisionError, IndexError, statistics.StatisticsError):
            out.append(None)
    return out


def median_of_round(runs: Runs, side: str, r: int) -> float:
    return statistics.median(runs[side]["rounds"][r]["times"])


def ratios(runs: Runs, side: str, base: str) -> list:
    """Per round: median of `side` ÷ median of `base` in that round."""
    return round_values(runs, lambda r: median_of_round(runs, side, r) / median_of_round(runs, base, r))


def ratio_of_minimums(runs: Runs, side: str, base: str) -> float | None:
    a, b = runs.get(side, {}).get("times"), runs.get(base, {}).get("times")
    return min(a) / min(b) if a and b and min(b) > 0 else None


# --- targets and verdicts --------------------------------------------------------------------------


def meets(value: float | None, limit: float, kind: str = "<=") -> bool:
    if value is None or value != value:
        return False
    return value <= limit if kind == "<=" else value >= limit


def round_verdict(values: list, limit: float | None, kind: str = "<=", note: str = "") -> str:
    """'met' only if every round's value meets the limit, else 'missed in k of R rounds' (a round
    without a value counts as missed); `note` (or 'n/a') where no round has a value."""
    if limit is None or not any(v is not None for v in values):
        return note or "n/a (not measured)"
    missed = sum(not meets(v, limit, kind) for v in values)
    if missed:
        return f"missed in {missed} of {len(values)} rounds"
    return "met" if len(values) > 1 else "met (1 round only)"


UNITS = {
    "x": lambda v: f"{v:.2f}x",
    "%": lambda v: f"{v:.0%}",
    "us": lambda v: f"{v * 1e6:.1f} µs",
    "ms": lambda v: f"{v * 1e3:.2f} ms",
    "n": lambda v: f"{v:.0f}",
}


def fmt(value: float | None, unit: str = "x") -> str:
    return "-" if value is None or value != value else UNITS[unit](value)


@dataclass
class Target:
    """One target's per-round values. `kind` "<=" (lower is better) or ">="; `unit` how to print
    a value (see UNITS); `of_minimums` the same figure from the sides' minimums over the whole run;
    `loads` the 1-minute load average at each round's start; `note` the verdict where nothing was
    measured (e.g. "not run: no GPU")."""

    part: str
    label: str
    limit: float | None
    kind: str = "<="
    unit: str = "x"
    values: list = field(default_factory=list)
    of_minimums: float | None = None
    loads: list = field(default_factory=list)
    note: str = ""

    @property
    def verdict(self) -> str:
        return round_verdict(self.values, self.limit, self.kind, self.note)

    def spread(self) -> str:
        """'min / median / max' of the rounds' values."""
        got = [v for v in self.values if v is not None]
        if not got:
            return "-"
        return " / ".join(fmt(v, self.unit) for v in (min(got), statistics.median(got), max(got)))

    def rounds_text(self) -> str:
        return ", ".join(fmt(v, self.unit) for v in self.values) or "-"

    def load_range(self) -> str:
        got = [x for x in self.loads if x is not None]
        return f"{min(got):.2f}-{max(got):.2f}" if got else "-"

    def summary(self) -> str:
        """One line for a part's text: the label, every round's value, the verdict."""
        return f"{self.label}: {self.rounds_text()} → **{self.verdict}**"


def ratio_target(part, label, runs: Runs, side, base, limit, kind="<=") -> Target:
    """A target on the per-round ratio of `side`'s median to `base`'s."""
    present = side in runs and base in runs
    return Target(
        part,
        label,
        limit,
        kind,
        "x",
        ratios(runs, side, base) if present else [],
        ratio_of_minimums(runs, side, base) if present else None,
        list(runs.loads),
    )


TABLE_HEADERS = [
    "part",
    "target",
    "rounds: min / median / max",
    "ratio of minimums",
    "rounds",
    "verdict",
    "load (1-min, min-max)",
    "why, when missed",
]


def table_rows(targets: list[Target], why: Callable) -> list[list]:
    return [
        [
            t.part,
            t.label,
            t.spread(),
            fmt(t.of_minimums, t.unit),
            len(t.values),
            t.verdict,
            t.load_range(),
            why(t.label, t.verdict),
        ]
        for t in targets
    ]


# --- the raw results and a second run's agreement ---------------------------------------------------


def side_rounds(runs: Runs) -> dict:
    """{side: [per-round {"median", "min", "max", "n"} or None], "loads": [...]} of a timed comparison."""
    out = {}
    for side, slot in runs.items():
        out[side] = [
            {
                "median": statistics.median(r["times"]),
                "min": min(r["times"]),
                "max": max(r["times"]),
                "n": len(r["times"]),
            }
            if r and r.get("times")
            else None
            for r in slot["rounds"]
        ]
        if slot["error"]:
            out[side + " error"] = slot["error"]
    out["loads"] = list(runs.loads)
    return out


def record(name: str, data: dict) -> None:
    """Keep a comparison's per-round figures for the results JSON (a repeated name gets a suffix)."""
    key, n = name, 2
    while key in RECORD:
        key, n = f"{name} #{n}", n + 1
    RECORD[key] = data


def results_json(meta: dict, targets: list[Target]) -> dict:
    return {
        **meta,
        "rounds": ROUNDS,
        "targets": [{**asdict(t), "verdict": t.verdict} for t in targets],
        "cases": RECORD,
    }


def outcome(verdict: str) -> str:
    """'met', 'missed' or 'n/a' of a verdict text."""
    return "met" if verdict.startswith("met") else "missed" if verdict.startswith("missed") else "n/a"


def agreement(previous: dict, targets: list[Target]) -> tuple[list[list], int]:
    """(rows [part, target, previous verdict, this run's, agrees], number of flipped verdicts)
    of this run's targets against a previous run's results JSON."""
    before = {(t["part"], t["label"]): t["verdict"] for t in previous.get("targets", ())}
    rows, flipped = [], 0
    for t in targets:
        prev = before.pop((t.part, t.label), None)
        if prev is None:
            rows.append([t.part, t.label, "(not in the previous run)", t.verdict, "-"])
            continue
        a, b = outcome(prev), outcome(t.verdict)
        if "n/a" in (a, b):
            agrees = "n/a"
        elif a == b:
            agrees = "yes"
        else:
            agrees, flipped = "**FLIPPED**", flipped + 1
        rows.append([t.part, t.label, prev, t.verdict, agrees])
    for (part, label), prev in before.items():
        rows.append([part, label, prev, "(not in this run)", "-"])
    return rows, flipped
