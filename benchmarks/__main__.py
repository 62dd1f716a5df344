"""`python -m benchmarks [--quick] [--parts 1,2] [--rounds N] [--out BENCHMARKS.md] [--verify PREVIOUS.json]`:
run the suite, write the report and its raw results (`--json`, default: the report's path with `.json`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from benchmarks import common, parts, rounds

CHANGES = Path(__file__).with_name("CHANGES.md")


HOW_TO_READ = (
    "How to read it: every comparison runs {rounds} interleaved rounds; a round starts one fresh process per "
    "side (a worker or a server), the sides in one order in even rounds and reversed in odd ones. Within a round "
    "the workers of all sides are alive at once, pinned to one CPU (the usable CPUs in turn, one a round), and, "
    "after each one's set-up and warm-up, sample in turns of "
    "short batches (~20 ms, the first sample of each dropped as a warm-up, the order rotating), one side at a "
    "time, so both sides of a ratio see the same machine state; the service and transfer parts start a round's "
    "servers together and load them in turns (the sweep cell by cell, the transfer in bursts). A figure is a "
    "per-round value: this side's median in the round ÷ the baseline's median in the same round (lower is "
    "better for times, higher for rates and shares). The Targets table gives each target's rounds (min / "
    "median / max), the same figure from the two sides' minimums over the run, and the 1-minute load average "
    'at the rounds\' starts; a target is **met only if every round meets it**, else "missed in k of R rounds". '
    "One run is not a verdict: run the suite again with `--verify {json}` (this run's raw results, read before "
    'they are overwritten) and the report gains a "Second run agrees" section that lists each target\'s verdict '
    "in both runs and flags any that flipped."
)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a smoke run (~2-3 minutes): fewer repetitions and steps")
    ap.add_argument(
        "--parts", default="1,2,3,4,5,6", help="comma-separated parts to run (1..6; a..f also accepted; 6: ONNX models)"
    )
    ap.add_argument("--out", default=str(common.ROOT / "BENCHMARKS.md"), help="where to write the report")
    ap.add_argument("--json", default=None, help="where to write the raw results (default: --out with .json)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"interleaved rounds per comparison, a fresh process per side each (default {rounds.ROUNDS}; --quick: 2)",
    )
    ap.add_argument(
        "--verify",
        metavar="PREVIOUS.json",
        default=None,
        help="a previous run's results: the report lists each target's verdict in both runs and flags those that flipped",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="set OMP/OPENBLAS/MKL_NUM_THREADS for every worker and server (default: leave the libraries' defaults)",
    )
    args = ap.parse_args(argv)
    rounds.ROUNDS = args.rounds or (2 if args.quick else rounds.ROUNDS)
    if rounds.ROUNDS < 1:
        ap.error("--rounds must be at least 1")
    previous = json.loads(Path(args.verify).read_text()) if args.verify else None  # read before it is overwritten
    json_out = Path(args.json) if args.json else Path(args.out).with_suffix(".json")
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    # a SIGTERM unwinds like Ctrl-C, so every server and worker this run started is stopped
    signal.signal(signal.SIGTERM, _interrupt)
    alias = dict(zip("abcdef", "123456"))
    wanted = [alias.get(p.strip(), p.strip()) for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in parts.PARTS]
    if unknown:
        ap.error(f"unknown part(s): {', '.join(unknown)}")
    started = time.monotonic()
    facts = common.machine_facts()
    sections, targets, durations = [], [], {}
    for p in wanted:
        t0 = time.monotonic()
        print(f"[benchmarks] part {p} ...", file=sys.stderr, flush=True)
        try:
            md, tg = parts.PARTS[p](args.quick)
        except Exception as err:  # noqa: BLE001 - one failing part must not lose the others' numbers
            traceback.print_exc()
            md = f"## Part {p}\n\nfailed: {type(err).__name__}: {err}\n"
            tg = [rounds.Target(p, "(part failed)", None, note=f"n/a: {type(err).__name__}: {err}"[:200])]
        durations[p] = time.monotonic() - t0
        print(f"[benchmarks] part {p} done in {durations[p]:.0f}s", file=sys.stderr, flush=True)
        sections.append(md)
        targets += tg
    total = time.monotonic() - started
    command = (
        f"python -m benchmarks{' --quick' if args.quick else ''}{f' --threads {args.threads}' if args.threads else ''}"
        f" --rounds {rounds.ROUNDS} --parts {','.join(wanted)}"
    )
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# gradserve benchmarks",
        "",
        f"Generated by `{command}` on {generated}; took {total:.0f}s "
        f"({', '.join(f'part {p}: {d:.0f}s' for p, d in durations.items())}). Raw results: `{json_out.name}`.",
        "",
        HOW_TO_READ.format(rounds=rounds.ROUNDS, json=json_out.name),
        "",
        "## Machine",
        "",
        common.table(["fact", "value"], [[k, json.dumps(v) if isinstance(v, list) else v] for k, v in facts.items()]),
        "",
        "## Targets",
        "",
        common.table(rounds.TABLE_HEADERS, rounds.table_rows(targets, parts.why)),
        "",
    ]
    if previous is not None:
        rows, flipped = rounds.agreement(previous, targets)
        lines += [
            "## Second run agrees",
            "",
            f"This run's verdicts against the previous run's (`--verify {args.verify}`, generated "
            f"{previous.get('generated', '?')} by `{previous.get('command', '?')}`): "
            + ("**every verdict agrees**." if not flipped else f"**{flipped} verdict(s) flipped**: not a verdict yet."),
            "",
            common.table(["part", "target", "previous run", "this run", "agrees"], rows),
            "",
        ]
    lines += sections
    if CHANGES.exists():
        lines += ["", CHANGES.read_text().strip(), ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    meta = {"generated": generated, "command": command, "seconds": round(total), "machine": facts}
    json_out.write_text(json.dumps(rounds.results_json(meta, targets), indent=1, default=str) + "\n")
    print(f"[benchmarks] wrote {args.out} and {json_out} in {total:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
