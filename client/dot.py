"""`to_dot(v)` / `v.to_dot()`: the graph a Variable would send, as Graphviz DOT; `graph_svg` draws it.

The graph is written by the client's own request writer (`client.serialize.Builder`): a backward's
when `v` requires grad (what `v.backward()` sends), else the /forward that fetches `v`. It is
rendered by `wire.dot`, as the service renders the plan it cached (`GET /plans/{id}.dot`), titled
with the plan id the service gives that graph: what you see is what is sent, under the id to ask for.
"""

from __future__ import annotations

import shutil
import subprocess

import orjson

from client.serialize import Builder, NeedsGraph
from client.variable import Variable
from wire.dot import render
from wire.graph import parse
from wire.infer import check_request_inputs
from wire.stores import graph_key, plan_id

SVG_TIMEOUT_S = 30.0


def request_graph(variable) -> tuple[dict, dict]:
    """(graph, input tensors by node id) of the request that would compute `variable`."""
    value = variable._graph_value()
    try:
        builder = Builder("backward" if variable.requires_grad else "forward")
        name = builder.add(value)
    except NeedsGraph:  # a grad node: the request keeps the autograd graph (as `fetching` does)
        builder = Builder("backward")
        name = builder.add(value)
    return builder.graph([name]), dict(builder.tensors)


def to_dot(variable) -> str:
    """DOT text of the graph `variable` would send, with its inputs' shapes and dtypes."""
    graph, tensors = request_graph(variable)
    graph = orjson.loads(orjson.dumps(graph))  # as the service reads it
    plan = parse(graph)
    title = f"plan {plan_id(graph_key(graph))}"
    return render(plan, check_request_inputs(plan, tensors), title=title)


def graph_svg(variable) -> str:
    """SVG of `to_dot(variable)`, drawn by Graphviz's `dot` program."""
    program = shutil.which("dot")
    if program is None:
        raise RuntimeError(
            "graph_svg() needs Graphviz, which is not installed (no 'dot' program on PATH); "
            "install it (e.g. apt-get install graphviz), or use to_dot() for the DOT text"
        )
    try:
        done = subprocess.run(
            [program, "-Tsvg"], input=to_dot(variable).encode(), capture_output=True, timeout=SVG_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"Graphviz's dot did not finish within {SVG_TIMEOUT_S:g} s; use to_dot()") from None
    if done.returncode != 0:
        raise RuntimeError(f"Graphviz's dot failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


# methods, installed as client.ops installs the surface's
Variable.to_dot = to_dot  # type: ignore[attr-defined]
Variable.graph_svg = graph_svg  # type: ignore[attr-defined]
