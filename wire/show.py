"""`gradserve plan show GRAPH.json --input x=3,4`: print the program a graph's plan runs as (the
generated source of `wire.codegen`, which tracebacks through it show too), without a server.

The file holds a graph, or a request body with one under "graph". Each input's shape and dtype
come from `--input NAME=SHAPE[:DTYPE]` (`x=3,4:float64`; `x=` for a scalar) or, when not given,
from the input node's declared "shape" and "dtype". The program is recorded from the engine's
run on random values of those shapes (a recording does not depend on the values).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy

from wire.compile import Fallback, program_source
from wire.errors import GraphError
from wire.graph import parse
from wire.infer import check_request_inputs
from wire.messages import Request

DTYPES = {"FP16": "float16", "FP32": "float32", "FP64": "float64"}


def add_parser(verbs) -> None:
    """The `plan` subcommand of `gradserve` (`plan show`)."""
    plan = verbs.add_parser("plan", help="inspect plans: `plan show` prints the program a graph runs as")
    actions = plan.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="print the generated source of a graph's program")
    show.add_argument("graph", metavar="GRAPH.json", help="a graph, or a request body with one under 'graph'")
    show.add_argument(
        "--input", action="append", default=[], metavar="NAME=SHAPE[:DTYPE]", help="an input's shape (x=3,4:float32)"
    )
    show.add_argument("--forward", action="store_true", help="the forward's program (default: the backward's)")
    show.add_argument("--wrt", help="comma-separated names to differentiate with respect to (default: requires_grad)")


def _input_specs(plan_graph: dict, given: list[str]) -> dict:
    specs = {}
    for node in plan_graph.get("nodes", []):
        if isinstance(node, dict) and node.get("op") == "input" and "shape" in node:
            specs[node["id"]] = (tuple(node["shape"]), DTYPES.get(node.get("dtype"), node.get("dtype") or "float32"))
    for text in given:
        name, _, rest = text.partition("=")
        shape_text, _, dtype = rest.partition(":")
        shape = tuple(int(d) for d in shape_text.split(",") if d.strip())
        specs[name] = (shape, dtype or "float32")
    return specs


def source(graph: dict, specs: dict, backward: bool = True, wrt=None) -> str:
    """The generated source of `graph`'s program for inputs of `specs` ({name: (shape, dtype)})."""
    plan = parse(graph)
    rng = numpy.random.default_rng(0)
    missing = [name for name in plan.inputs if name not in specs]
    if missing:
        raise ValueError(f"no shape for input(s) {', '.join(map(repr, missing))}: pass --input NAME=SHAPE")
    arrays = {}
    for name in plan.inputs:
        shape, dtype = specs[name]
        dtype = numpy.dtype(dtype)
        values = rng.uniform(0.5, 1.5, shape) if dtype.kind == "f" else rng.integers(0, 2, shape)
        arrays[name] = numpy.asarray(values).astype(dtype)
    shapes = check_request_inputs(plan, arrays)
    seeds = {}
    if backward:
        for name in plan.outputs:
            meta = shapes.known.get(name)
            if meta is not None and math.prod(meta[0]) != 1:
                seeds[name] = numpy.ones(meta[0], meta[1])
    request = Request(graph=graph, inputs=arrays, grad_outputs=seeds, wrt=wrt)
    return program_source(plan, shapes, request, backward)


def main(args: argparse.Namespace) -> int:
    with open(args.graph, encoding="utf-8") as file:
        document = json.load(file)
    graph = document.get("graph", document) if isinstance(document, dict) else document
    try:
        text = source(graph, _input_specs(graph, args.input), not args.forward, args.wrt and args.wrt.split(","))
    except (Fallback, GraphError, ValueError, TypeError) as err:
        print(f"gradserve: {err}", file=sys.stderr)
        return 1
    print(text, end="")
    return 0
