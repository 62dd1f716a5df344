"""`gradserve calibrate`: time a few kernels on this machine and derive the dtype factors that price
a request's work (`engine.costs.Factors`), printed as JSON and written to a file that the server
reads when GRADSERVE_COST_FACTORS names it.

- BLAS products: a 512x512 matmul in float16 and in int64 against float32 (NumPy runs the first two
  as naive loops);
- elementwise passes in float16 (add, mul, exp, sum, a comparison over 2^20 elements): each one's
  time per element against what the work model prices an element at (`ELEMENT_OP` BLAS flops at the
  measured float32 rate) or float32's own time, whichever is more; the slowest kernel's ratio.
Each figure is the best of several runs (float32's of more, as they are short), so that a busy
machine disturbs the ratios little; run it on an idle server.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy

from engine.api import ELEMENT_OP, ENV, Factors

MATRIX = 512
ELEMENTS = 2**20
ELEMENTWISE = {
    "add": lambda x: x + x,
    "mul": lambda x: x * x,
    "exp": numpy.exp,
    "sum": lambda x: x.sum(),
    "less": lambda x: x < x,
}


def best_time(fn, *args, repeat: int = 3) -> float:
    """The fastest of `repeat` runs of fn(*args), in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def measure(matrix: int | None = None, elements: int | None = None) -> dict:
    """The factors (`Factors` fields) and the timings they come from (sizes: MATRIX, ELEMENTS)."""
    matrix, elements = matrix or MATRIX, elements or ELEMENTS
    rng = numpy.random.default_rng(0)
    a = rng.uniform(-1, 1, (matrix, matrix))
    product = {
        name: best_time(numpy.matmul, a.astype(name), a.astype(name), repeat=repeat)
        for name, repeat in (("float32", 20), ("float16", 2), ("int64", 2))
    }
    flops = 2 * matrix**3 / product["float32"]
    priced = ELEMENT_OP / flops  # seconds the model charges for an element
    v = rng.uniform(0.5, 1.5, elements)
    ratios = {}
    with numpy.errstate(all="ignore"):  # a float16 sum of 2^20 values overflows: its time is what counts
        for name, fn in ELEMENTWISE.items():
            t32 = best_time(fn, v.astype(numpy.float32), repeat=10) / elements
            t16 = best_time(fn, v.astype(numpy.float16), repeat=5) / elements
            ratios[name] = t16 / max(priced, t32)
    factors = Factors(
        blas_float16=max(1.0, product["float16"] / product["float32"]),
        blas_integer=max(1.0, product["int64"] / product["float32"]),
        elementwise_float16=max(1.0, max(ratios.values())),
    )
    return {
        "factors": {name: round(value, 1) for name, value in factors.as_dict().items()},
        "blas_flops_per_s": flops,
        "matmul_seconds": product,
        "elementwise_float16_ratios": ratios,
    }


def add_parser(verbs) -> None:
    """The `calibrate` subcommand of `gradserve`."""
    parser = verbs.add_parser("calibrate", help="time a few kernels and write the dtype factors that price work")
    parser.add_argument("--output", help=f"write the factors to this JSON file (for {ENV})")


def main(args: argparse.Namespace) -> int:
    result = measure()
    print(json.dumps(result, indent=2))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            json.dump(result["factors"], file, indent=2)
        print(f"wrote {args.output}; serve with {ENV}={args.output}")
    return 0
