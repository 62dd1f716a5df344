"""A parsed graph (`wire.graph.Plan`) as Graphviz DOT text: what a request's graph computes, drawn.

One box per node, labelled with its id, its op, the attributes it sets (those that differ from
the op's defaults), and its shape and dtype where `wire.infer` knows them (`≤[n]`: an upper
bound, e.g. a boolean mask's result). Edges run from inputs to the nodes that read them (a
`grad` node's are labelled `of`, `wrt` and `seed`). Filled nodes get a gradient: they require
grad (an input with requires_grad, or a differentiable op of one) and a gradient flows through
them to the graph's outputs or grad nodes. Outputs have a double border. A `function` node (a
custom Function) sits in a cluster with its forward and backward subgraphs.

Node ids are user data: they appear only inside HTML-like labels, escaped, never as DOT ids
(those are positional: `n3`, `n3_f0`...), so no id can break or inject into the DOT text.
The service renders cached plans (`GET /plans/{id}.dot`) and the client the graph a Variable
would send (`client.to_dot`), both through `render`: the same graph gives the same text.
"""

from __future__ import annotations

import html

import numpy
import orjson

from engine.api import OPS, Bounded

GRAD_FILL = "#ffd8a8"
LEAF_OPS = ("input", "constant", "arg", "grad_output", "forward_value")
GRAD_EDGES = ("of", "wrt", "seed")  # a grad node's inputs: output, wrt, grad_output
MAX_ATTR_CHARS = 40


def render(plan, shapes=None, title=None) -> str:
    """DOT text of `plan`; `shapes` (a `wire.infer.Shapes`, or `merged_shapes`) labels shapes and dtypes."""
    metas = _metas(shapes)
    lines = [
        "digraph plan {",
        f"  graph [label=<{_text(title)}>, labelloc=t, fontname=Helvetica];"
        if title
        else "  graph [fontname=Helvetica];",
        "  node [shape=box, style=rounded, fontname=Helvetica, fontsize=11];",
        "  edge [fontname=Helvetica, fontsize=9];",
    ]
    needs = gets_gradient(plan, metas[0])
    _scope(lines, plan, metas, "n", "  ", needs)
    lines += _legend()
    lines.append("}")
    return "\n".join(lines) + "\n"


def merged_shapes(plan):
    """What every input signature a plan was checked with (`plan.checked`) agrees on: the node
    metas shared by all of them, as (known, bounds, functions); None when none was checked."""
    checked = list(plan.checked.values())
    if not checked:
        return None
    if len(checked) == 1:
        return checked[0]
    return _agreed([_metas(s) for s in checked])


def _agreed(all_metas):
    known, bounds, functions = all_metas[0]
    known = {k: v for k, v in known.items() if all(_same(m[0].get(k), v) for m in all_metas[1:])}
    bounds = {k: v for k, v in bounds.items() if all(_same(m[1].get(k), v) for m in all_metas[1:])}
    return known, bounds, {}  # (subgraph shapes are shown only when every signature is the same)


def _same(a, b) -> bool:
    return a is not None and b is not None and a[0] == b[0] and str(a[1]) == str(b[1])


def _metas(shapes):
    """(known, bounds, functions) of a Shapes, a merged triple, or None."""
    if shapes is None:
        return {}, {}, {}
    if isinstance(shapes, tuple):
        return shapes
    return shapes.known, shapes.bounds, shapes.functions


def gets_gradient(plan, known=None) -> set:
    """Ids of the plan's top-level nodes that get a gradient: they require grad (a requires_grad
    input, or one that a grad node differentiates with respect to, and what differentiable ops
    compute from them) and lead, through such nodes, to an output or a grad node."""
    known = known or {}
    requires = set()
    for step in plan.steps:
        if step.op == "input":
            flag = step.requires_grad or step.id in plan.grad_inputs
        elif step.op == "function":
            returned = step.subgraphs[1].outputs  # a None backward output passes no gradient (detach)
            flag = any(i in requires and returned[k] is not None for k, i in enumerate(step.inputs))
        elif step.op == "grad":
            flag = step.inputs[0] in requires
        elif step.op in OPS:
            meta = known.get(step.id)
            floating = meta is None or not isinstance(meta[1], numpy.dtype) or meta[1].kind == "f"
            flag = OPS[step.op].differentiable and floating and any(i in requires for i in step.inputs)
        else:
            flag = False
        if flag:
            requires.add(step.id)
    flows = set(plan.outputs) | {i for s in plan.steps if s.op == "grad" for i in s.inputs[:2]}
    for step in reversed(plan.steps):
        if step.id in flows and step.id in requires:
            flows.update(i for i in step.inputs if i in requires)
    return flows & requires


def _scope(lines, plan, metas, prefix, indent, needs):
    """Nodes and edges of one graph or subgraph; function nodes' subgraphs as nested clusters."""
    known, bounds, functions = metas
    names = {step.id: f"{prefix}{index}" for index, step in enumerate(plan.steps)}
    outputs = set(plan.outputs)
    for step in plan.steps:
        name = names[step.id]
        node = (
            f"{name} [label=<{_label(step, known.get(step.id), bounds.get(step.id))}>{_marks(step, outputs, needs)}];"
        )
        if step.subgraphs:
            lines.append(f"{indent}subgraph cluster_{name} {{")
            lines.append(f'{indent}  label=<function {_text(step.id)}>; style=dashed; color="#888888";')
            lines.append(f"{indent}  {node}")
            sub = functions.get(step.id)
            for part, subplan in zip(("forward", "backward"), step.subgraphs):
                # a subgraph's shapes are the bounds it was inferred with (`Bounded` ones marked as such)
                sub_bounds = {} if sub is None else getattr(sub, f"{part}_bounds")
                sub_metas = (sub_bounds, sub_bounds, {} if sub is None else getattr(sub, f"{part}_functions"))
                lines.append(f"{indent}  subgraph cluster_{name}_{part[0]} {{")
                lines.append(f'{indent}    label=<{part}>; style=dotted; color="#888888";')
                _scope(lines, subplan, sub_metas, f"{name}_{part[0]}", indent + "    ", set())
                lines.append(f"{indent}  }}")
            lines.append(f"{indent}}}")
            forward_names = {s.id: f"{name}_f{i}" for i, s in enumerate(step.subgraphs[0].steps)}
            for index, back in enumerate(step.subgraphs[1].steps):  # a backward reads forward values
                if back.op == "forward_value":
                    lines.append(
                        f"{indent}{forward_names[back.attrs['node']]} -> {name}_b{index} [style=dashed, color=gray];"
                    )
        else:
            lines.append(f"{indent}{node}")
        for position, ref in enumerate(step.inputs):
            lines.append(f"{indent}{names[ref]} -> {name}{_edge_label(step, position)};")


def _marks(step, outputs, needs) -> str:
    marks = ""
    if step.id in needs:
        marks += f', style="rounded,filled", fillcolor="{GRAD_FILL}"'
    if step.id in outputs:
        marks += ", peripheries=2"
    return marks


def _edge_label(step, position) -> str:
    if step.op == "grad":
        return f" [label=<{GRAD_EDGES[position]}>]"
    if step.op == "function" and len(step.inputs) > 1:
        return f" [label=<{position}>]"
    return ""


def _label(step, known, bound) -> str:
    lines = [f"<B>{_text(step.id)}</B>", _text(_op_text(step))]
    lines += [_text(f"{k}={_short(v)}") for k, v in _key_attrs(step)]
    meta = _meta_text(known, bound)
    if meta:
        lines.append(f'<FONT COLOR="#555555">{_text(meta)}</FONT>')
    return "<BR/>".join(lines)


def _op_text(step) -> str:
    if step.op == "input":
        return "input, requires_grad" if step.requires_grad else "input"
    if step.op == "function":
        return f"function {step.function.__name__}"
    if step.op == "arg":
        return f"arg {step.attrs['index']}"
    if step.op == "forward_value":
        return f"forward_value {step.attrs['node']}"
    return step.op


def _key_attrs(step) -> list:
    """The attributes worth reading: a constant's value, an op's attrs that are not its defaults."""
    if step.op == "constant":
        return [("value", step.attrs["value"])]
    spec = OPS.get(step.op)
    if spec is None:
        return []
    shown = []
    for name in sorted(step.attrs):
        value = step.attrs[name]
        default = getattr(spec.attrs.get(name), "default", None)
        if not _equal(value, default):
            shown.append((name, value))
    return shown


def _equal(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):  # arrays: never a default
        return False


def _short(value) -> str:
    """A compact, bounded text of an attribute's value (an array larger than 4 elements: its shape)."""
    if isinstance(value, numpy.ndarray):
        if value.size > 4:
            return f"array{list(value.shape)} {value.dtype}"
        value = value.tolist()
    try:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= MAX_ATTR_CHARS else text[: MAX_ATTR_CHARS - 1] + "…"


def _meta_text(known, bound) -> str:
    meta, prefix = (known, "") if known is not None else (bound, "≤")
    if meta is None:
        return ""
    shape, dtype = meta
    if not isinstance(dtype, numpy.dtype):  # a lone Python number (a constant), typed by its operands
        return ""
    if isinstance(shape, Bounded):
        prefix = "≤"
    return f"{prefix}{list(shape)} {dtype.name}"


def _text(value) -> str:
    """Text for an HTML-like label: unprintable characters shown as escapes, markup escaped."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in str(value))
    return html.escape(text, quote=True)


def _legend() -> list:
    return [
        "  subgraph cluster_legend {",
        '    label=<legend>; style=dashed; color="#888888"; fontsize=10;',
        f'    legend_grad [label=<gets a gradient>, style="rounded,filled", fillcolor="{GRAD_FILL}"];',
        "    legend_output [label=<output>, peripheries=2];",
        "    legend_grad -> legend_output [style=invis];",
        "  }",
    ]
