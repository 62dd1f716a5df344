"""wire.dot: a parsed graph as DOT (nodes, edges, labels, what gets a gradient, outputs, function
clusters, grad nodes), hostile ids escaped; client.to_dot renders what a Variable would send."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import numpy as np
import pytest

import client
from client import Function, Variable
from wire.dot import merged_shapes, render
from wire.graph import parse
from wire.infer import check_request_inputs

NODE = re.compile(r"^\s*(n[0-9_fb]*) \[label=<(.*)>(.*)\];$")
EDGE = re.compile(r"^\s*(n[0-9_fb]*) -> (n[0-9_fb]*)(?: \[(.*)\])?;$")


def parsed(text: str):
    """({dot name: (label text lines, marks)}, [(from, to, attrs)]) of render()'s output."""
    nodes, edges = {}, []
    for line in text.splitlines():
        if m := NODE.match(line):
            lines = [html.unescape(re.sub(r"<[^>]+>", "", part)) for part in m.group(2).split("<BR/>")]
            nodes[m.group(1)] = (lines, m.group(3))
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3) or ""))
    return nodes, edges


def by_id(nodes):
    """{graph node id: (dot name, label lines, marks)}."""
    return {lines[0]: (name, lines, marks) for name, (lines, marks) in nodes.items()}


GRAPH = {
    "version": 1,
    "nodes": [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "w", "op": "input"},
        {"id": "h", "op": "mm", "inputs": ["x", "w"]},
        {"id": "r", "op": "clamp", "inputs": ["h"], "attrs": {"min": 0}},
        {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
        {"id": "s", "op": "mul", "inputs": ["r", "two"]},
        {"id": "loss", "op": "sum", "inputs": ["s"]},
        {"id": "side", "op": "exp", "inputs": ["x"]},
        {"id": "idx", "op": "argmax", "inputs": ["h"]},
    ],
    "outputs": ["loss", "idx"],
}
TENSORS = {"x": np.ones((2, 3), np.float32), "w": np.ones((3, 1), np.float32)}


def test_a_small_graph_has_its_nodes_edges_labels_and_marks():
    plan = parse(GRAPH)
    nodes, edges = parsed(render(plan, check_request_inputs(plan, TENSORS), title="plan p1"))
    ids = by_id(nodes)
    assert set(ids) == {n["id"] for n in GRAPH["nodes"]}
    name = {i: v[0] for i, v in ids.items()}
    assert sorted(edges) == sorted(
        (name[ref], name[n["id"]], "") for n in GRAPH["nodes"] for ref in n.get("inputs", [])
    )
    assert ids["x"][1] == ["x", "input, requires_grad", "[2, 3] float32"]
    assert ids["h"][1] == ["h", "mm", "[2, 1] float32"]
    assert ids["r"][1] == ["r", "clamp", "min=0.0", "[2, 1] float32"]  # set attrs shown, defaults (max) not
    assert ids["two"][1] == ["two", "constant", "value=2.0"]
    assert ids["loss"][1] == ["loss", "sum", "[] float32"]
    assert ids["idx"][1][-1] == "[] int64"
    filled = {i for i, (_, _, marks) in ids.items() if "filled" in marks}
    # on the path from x to the loss; not w (no requires_grad), not `side` (no output reads it),
    # not argmax (not differentiable), not the constant
    assert filled == {"x", "h", "r", "s", "loss"}
    assert {i for i, (_, _, marks) in ids.items() if "peripheries=2" in marks} == {"loss", "idx"}
    text = render(plan)
    assert "plan p1" not in text and "float32" not in text  # no title, no shapes without a Shapes
    assert 'legend_grad [label=<gets a gradient>, style="rounded,filled"' in text


GRAD_GRAPH = {
    "version": "1.1",
    "nodes": [
        {"id": "x", "op": "input", "requires_grad": True},
        {"id": "y", "op": "mul", "inputs": ["x", "x"]},
        {"id": "s", "op": "sum", "inputs": ["y"]},
        {"id": "g", "op": "grad", "inputs": ["s", "x"]},
        {"id": "gs", "op": "sum", "inputs": ["g"]},
    ],
    "outputs": ["gs"],
}


def test_grad_nodes_label_their_edges_and_pass_gradients():
    plan = parse(GRAD_GRAPH)
    nodes, edges = parsed(render(plan, check_request_inputs(plan, {"x": np.ones(3, np.float32)})))
    ids = by_id(nodes)
    assert ids["g"][1] == ["g", "grad", "[3] float32"]
    name = {i: v[0] for i, v in ids.items()}
    assert (name["s"], name["g"], "label=<of>") in edges
    assert (name["x"], name["g"], "label=<wrt>") in edges
    assert all("filled" in ids[i][2] for i in ("x", "y", "s", "g", "gs"))


def test_grad_inputs_without_requires_grad_get_a_gradient_for_the_grad_node():
    graph = {**GRAD_GRAPH, "nodes": [{"id": "x", "op": "input"}, *GRAD_GRAPH["nodes"][1:]]}
    ids = by_id(parsed(render(parse(graph)))[0])
    assert "filled" in ids["x"][2] and ids["x"][1][1] == "input"  # made to require grad by the grad node


def square_function(name="Square", backward_outputs=("ga",)):
    return {
        "name": name,
        "forward": {
            "nodes": [{"id": "a", "op": "arg", "attrs": {"index": 0}}, {"id": "sq", "op": "mul", "inputs": ["a", "a"]}],
            "outputs": ["sq"],
        },
        "backward": {
            "nodes": [
                {"id": "a", "op": "arg", "attrs": {"index": 0}},
                {"id": "g", "op": "grad_output"},
                {"id": "fv", "op": "forward_value", "attrs": {"node": "sq"}},
                {"id": "two", "op": "constant", "attrs": {"value": 2.0}},
                {"id": "ta", "op": "mul", "inputs": ["a", "two"]},
                {"id": "ga", "op": "mul", "inputs": ["ta", "g"]},
            ],
            "outputs": list(backward_outputs),
        },
    }


def test_function_nodes_are_clusters_of_their_subgraphs():
    graph = {
        "version": 1,
        "nodes": [
            {"id": "x", "op": "input", "requires_grad": True},
            {"id": "f", "op": "function", "inputs": ["x"], "attrs": square_function()},
            {"id": "d", "op": "function", "inputs": ["f"], "attrs": square_function("Cut", [None])},
            {"id": "s", "op": "sum", "inputs": ["d"]},
            {"id": "t", "op": "sum", "inputs": ["f"]},
        ],
        "outputs": ["s", "t"],
    }
    plan = parse(graph)
    text = render(plan, check_request_inputs(plan, {"x": np.ones(4, np.float32)}))
    nodes, edges = parsed(text)
    assert "subgraph cluster_n1 {" in text and "subgraph cluster_n1_f {" in text and "subgraph cluster_n1_b {" in text
    assert nodes["n1"][0] == ["f", "function Square", "[4] float32"]
    assert nodes["n1_f1"][0] == ["sq", "mul", "[4] float32"]  # a subgraph node, with its inferred shape
    assert nodes["n1_b2"][0][:2] == ["fv", "forward_value sq"]
    assert ("n1_f1", "n1_b2", "style=dashed, color=gray") in edges  # the backward reads the forward's sq
    assert ("n1_f0", "n1_f1", "") in edges
    ids = by_id({k: v for k, v in nodes.items() if "_" not in k})
    assert "filled" in ids["f"][2] and "filled" in ids["t"][2]
    assert "filled" not in ids["d"][2] and "filled" not in ids["s"][2]  # its backward returns no gradient


HOSTILE = ['a"b', "back\\", 'x"];evil [label="pwned', "new\nline", "<b>tag</b>&amp;", "}\n}\ndigraph{", "\\N", "é→"]


def hostile_graph():
    nodes = [{"id": HOSTILE[0], "op": "input", "requires_grad": True}]
    for previous, node_id in zip(HOSTILE, HOSTILE[1:]):
        nodes.append({"id": node_id, "op": "neg", "inputs": [previous]})
    return {"version": 1, "nodes": nodes, "outputs": [HOSTILE[-1]]}


def test_hostile_ids_are_escaped():
    text = render(parse(hostile_graph()), title=HOSTILE[2])
    lines = text.splitlines()
    assert lines[0] == "digraph plan {" and lines[-1] == "}"
    assert [line for line in lines if line.lstrip().startswith(("digraph", "}"))] == ["digraph plan {", "  }", "}"]
    nodes, edges = parsed(text)
    labelled = [lines[0] for lines, _ in nodes.values()]
    shown = [node_id.replace("\n", "\\n") for node_id in HOSTILE]  # unprintables shown as escapes
    assert labelled == shown
    assert len(edges) == len(HOSTILE) - 1
    for line in lines[1:-1]:  # every line is one of the writer's own, whatever the ids
        assert (
            NODE.match(line) or EDGE.match(line) or re.match(r"^\s*(graph|node|edge|subgraph|legend|\}|label=)", line)
        )
    for node_id in HOSTILE:
        if any(c in node_id for c in '"<>&\n'):
            assert node_id not in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_reads_the_hostile_graph_with_exactly_its_nodes():
    text = render(parse(hostile_graph()), title=HOSTILE[2])
    done = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    svg = done.stdout.decode()
    assert svg.count('class="node"') == len(HOSTILE) + 2  # and the legend's two
    assert svg.count('class="edge"') == len(HOSTILE) - 1  # (the legend's is invisible)
    assert "pwned" in svg and "&lt;b&gt;tag&lt;/b&gt;&amp;amp;" in svg  # shown as text, not markup
    assert "evil" not in re.findall(r"<title>(.*?)</title>", svg)


def test_several_input_signatures_show_only_the_shapes_they_share():
    plan = parse(GRAPH)
    check_request_inputs(plan, TENSORS)
    check_request_inputs(plan, {"x": np.ones((5, 3), np.float32), "w": np.ones((3, 1), np.float32)})
    ids = by_id(parsed(render(plan, merged_shapes(plan)))[0])
    assert ids["w"][1][-1] == "[3, 1] float32"  # the same in both
    assert ids["x"][1] == ["x", "input, requires_grad"] and ids["h"][1] == ["h", "mm"]  # [2, 3] or [5, 3]
    assert merged_shapes(parse(GRAPH)) is None


# --- the client: what a Variable would send -------------------------------------------------


def test_to_dot_renders_the_graph_the_backward_sends():
    x = Variable(np.ones((2, 3), np.float32), requires_grad=True)
    w = Variable(np.full(3, 2.0, np.float32))
    loss = ((x * w).sum(1) ** 2).mean()
    text = loss.to_dot()
    assert text == client.to_dot(loss)
    ids = by_id(parsed(text)[0])
    assert [lines[1:] for _, lines, _ in ids.values()] == [
        ["input, requires_grad", "[2, 3] float32"],
        ["input", "[3] float32"],
        ["mul", "[2, 3] float32"],
        ["sum", "dim=1", "[2] float32"],
        ["constant", "value=2"],
        ["pow", "[2] float32"],
        ["mean", "[] float32"],
    ]
    assert [i for i, (_, _, marks) in ids.items() if "filled" in marks] == ["x0", "n2", "n3", "n5", "n6"]
    assert re.search(r"label=<plan [0-9a-f]{32}>", text)


def test_to_dot_of_a_value_without_grad_is_its_forward_and_detach_cuts_gradients():
    x = Variable(np.ones(3, np.float32), requires_grad=True)
    ids = by_id(parsed(((x * 2).detach() * 2 + x).to_dot())[0])
    detach = next(v for v in ids.values() if v[1][1] == "function Detach")
    assert "filled" not in detach[2] and "filled" in ids["x0"][2]
    forward = by_id(parsed((Variable(np.ones(3, np.float32)) * 2).to_dot())[0])
    assert "input" in forward["x0"][1] and not any("filled" in marks for _, _, marks in forward.values())


def test_to_dot_shows_a_custom_function_as_a_cluster():
    class Square(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    x = Variable(np.ones(3, np.float32), requires_grad=True)
    text = Square.apply(x).sum().to_dot()
    assert "subgraph cluster_n1 {" in text and "function Square" in text


def test_graph_svg_draws_or_says_graphviz_is_missing(monkeypatch):
    x = Variable(np.ones(2, np.float32), requires_grad=True)
    if shutil.which("dot") is not None:
        svg = (x * 3).sum().graph_svg()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "requires_grad" in svg
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"Graphviz, which is not installed.*to_dot\(\)"):
        (x * 3).graph_svg()
