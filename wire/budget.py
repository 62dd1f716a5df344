"""What a request will cost, planned from its inferred shapes before anything runs: its peak
memory (forward and backward together, with what the backward keeps) and its total work.

The model follows how `wire.run` and the engine's backward walk hold memory:
- forward: every input is held throughout; each node's value is allocated when it runs and
  dropped after its last reader (`wire.graph.liveness`), unless it is an output or the backward
  keeps it (an op's saved inputs and, for `uses_output` ops, its output; a function node's
  arguments and the forward values its backward subgraph reads);
- a function node's forward subgraph runs inside it: its own peak counts on top, while it runs;
- an op's own temporaries, as its scratch rule declares them (`engine.costs.Scratch`, beside its
  shape rule): what its forward allocates besides its output, while it runs; what a composite's
  internal nodes keep for its backward, from its forward to its vjps; what its vjps allocate
  besides the gradients they return (by default one temporary of its output's size);
- a grad node records a graph about as big as the values it differentiates through, the graphs
  that grad nodes among them recorded included;
- backward: nodes' vjps run in reverse order; a node's gradient lives from its first consumer's
  vjp to its own; a vjp allocates its inputs' gradients and its scratch; saved values are
  released after the vjp of the last node that saved them.
It is an estimate that errs on the high side: `tests/reliability/test_memory_model.py` holds every
op's measured peak (forward and backward, float16/32/64) within 1.5x of it.
A jvp node is priced as the grad nodes it is expanded into (`wire.jvp_node`), and budget refusals
(`wire.admission`) name it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import NamedTuple

import numpy

from engine.api import OPS, current_interrupt

LEAVES = ("input", "arg", "grad_output", "forward_value")


@dataclass(frozen=True)
class Cost:
    peak_bytes: int
    peak_node: str | None  # the node running when the peak is reached
    work: int  # flop-equivalents (see engine.costs)
    work_node: str | None  # the node with the most work
    node_work: int  # that node's work


@dataclass
class Kinds:
    """A plan's op steps by kind, as inference found them (`wire.infer.infer`): per kind, in `found`,
    [its meta and whether that is a bound, its first step, how many steps are of it]. `whole` is False
    when some step is not of a kind (a rule refused bounds): then no `upper` bound, nor with grad or
    function nodes."""

    found: list = field(default_factory=list)
    whole: bool = True
    unruled: list = field(default_factory=list)  # the metas of its other steps (leaves, constants, grad nodes)


def upper_costs(plan: Priced, bounds: dict, kinds: Kinds, held: list | None = None) -> dict:
    """Upper bounds of `price(plan, shapes, backward)` for a forward (False) and a backward (True), from
    the steps' kinds: in time linear in the distinct kinds and values, not the steps; none for a plan
    with grad or function nodes. Within a budget, they say the cost is too; admission prices the cost
    itself only where they are not (to decide, and to name the node). Every value counts as held to
    the end, with what its node keeps for the backward, and as a gradient too; each op's work three
    times (its forward and a backward of twice it); the largest transient on top. Their nodes are None."""
    if not kinds.whole or plan.record:
        return {}
    ops, work, node_work, kept, transient, back_peak = _OpCosts(), 0, 0, 0, 0, 0
    for _, first, count in kinds.found:
        step_work, forward, step_kept, back, *_ = ops(first, bounds)
        work += count * max(step_work, 0)
        node_work = max(node_work, step_work)
        kept += count * max(step_kept, 0)
        transient, back_peak = max(transient, forward), max(back_peak, back)
    total = sum(nodes * ops.nbytes(meta) for meta, nodes in (held_metas(bounds, kinds) if held is None else held))
    return {
        False: Cost(total + transient, None, work, None, node_work),
        True: Cost(total + kept + max(transient, total + back_peak), None, 3 * work, None, node_work),
    }


def held_metas(bounds: dict, kinds: Kinds | None = None) -> list:
    """[(meta, how many nodes hold it)] of `bounds`, each distinct meta object once (inference shares one
    meta per value kind: `wire.infer._rule`): from `kinds` where inference put every step of `bounds` in
    it (in time linear in its kinds and other steps, not the steps), else node by node."""
    if kinds is not None and kinds.whole and len(kinds.unruled) + sum(k[2] for k in kinds.found) == len(bounds):
        held: dict = {}  # id(meta) -> [meta, nodes]
        for meta, nodes in chain([(k[0][0], k[2]) for k in kinds.found], zip(kinds.unruled, repeat(1))):
            held.setdefault(id(meta), [meta, 0])[1] += nodes
        return list(map(tuple, held.values()))
    metas = list(bounds.values())
    by_id = dict(zip(map(id, metas), metas))
    return [(by_id[key], nodes) for key, nodes in Counter(map(id, metas)).items()]


def _meta(meta):
    """(shape, numpy dtype) of a bound (whose dtype may be a rule's Python scalar)."""
    shape, dtype = meta
    return shape, dtype if isinstance(dtype, numpy.dtype) else numpy.result_type(dtype)


def nbytes(meta) -> int:
    shape, dtype = _meta(meta)
    return math.prod(shape) * dtype.itemsize


class Priced(NamedTuple):
    """What pricing a plan's walk reads of it (`Shapes` keeps this, not the plan, which keeps its Shapes)."""

    steps: list
    outputs: tuple
    record: bool  # it has grad nodes: a forward records too
    grad_inputs: frozenset
    requires_grad: frozenset


def priced(plan) -> Priced:
    return Priced(plan.steps, plan.outputs, plan.has_grad_nodes, plan.grad_inputs, plan.requires_grad)


def price(plan: Priced, shapes, backward: bool) -> Cost:
    """The Cost of a forward (or, `backward`, a forward recorded and differentiated) of `plan` with
    `shapes`: each is walked only when a request of its kind first asks (`wire.infer.Shapes`)."""
    if backward:
        return plan_cost(plan, shapes.bounds, shapes.functions, True, plan.requires_grad | plan.grad_inputs)
    return plan_cost(plan, shapes.bounds, shapes.functions, plan.record, plan.grad_inputs, differentiate=False)


class _OpCosts:
    """What a walk needs of an op step that its op, inputs' and output's metas and attributes decide
    (`_op_costs`), computed once per distinct such key: a graph repeats a few kinds of step (a chain
    of 100,000 muls of one shape is one), and the rules (`engine.costs`) cost ~10 µs a step. A step
    is looked up first by the identity of its attrs and metas (inference shares one meta per distinct
    value kind, `wire.infer._rule`, and parsing one attrs dict per distinct attrs), then by their
    content; steps with attributes that are not hashable (lists, arrays) are computed once per attrs
    dict. A walk's function nodes' subgraph walks share its one, and with it the `_Tables` of each
    (plan, bounds) they walk."""

    def __init__(self):
        self._memo: dict = {}
        self._seen: dict = {}  # (op, id(attrs), id(output meta), *ids of input metas) -> found
        self._alive: list = []  # what those ids name, held while this lives (an id is unique only then)
        self._sizes: dict = {}
        self._tables: dict = {}  # (id(plan), id(bounds)) -> (plan, bounds, _Tables)

    def __call__(self, step, bounds) -> tuple:
        out = bounds[step.id]
        ident = (step.op, id(step.attrs), id(out), *[id(bounds[i]) for i in step.inputs])
        found = self._seen.get(ident)
        if found is None:
            found = self._seen[ident] = self._by_content(step, bounds)
            self._alive.append((step.attrs, out, [bounds[i] for i in step.inputs]))
        return found

    def _by_content(self, step, bounds) -> tuple:
        key = (step.op, *[_key(bounds[i]) for i in step.inputs], _key(bounds[step.id]))
        if step.attrs:
            key = (*key, *[(k, v.__class__, v) for k, v in step.attrs.items()])
        try:
            found = self._memo.get(key)
        except TypeError:  # an unhashable attribute
            return _op_costs(step, bounds)
        if found is None:
            found = self._memo[key] = _op_costs(step, bounds)
        return found

    def nbytes(self, meta) -> int:
        found = self._sizes.get(id(meta))
        if found is None:
            found = self._sizes[id(meta)] = nbytes(meta)
            self._alive.append(meta)
        return found

    def tables(self, plan, bounds) -> _Tables:
        found = self._tables.get((id(plan), id(bounds)))
        if found is None:
            found = self._tables[id(plan), id(bounds)] = (plan, bounds, _Tables(plan, bounds, self))
        return found[2]


class _Tables:
    """What a walk of a plan (and its function nodes' walks) reads and none changes: each value's
    size, each op step's costs (None for other steps), per step the values whose last reader it is
    (`ends`: its inputs and itself, outputs and leaves excepted) with their bytes (`ends_bytes`),
    and whether a step is a grad node (`grads`: else the walk keeps no running totals for one)."""

    def __init__(self, plan, bounds, ops: _OpCosts):
        steps = plan.steps
        self.size = size = {}
        self.costs = costs = []
        last = {}  # value -> the index of its last reader (its own, when nothing reads it)
        self.held = held = set(plan.outputs)
        self.grads = False  # whether a step is a grad node
        leaves = 0
        sizes, seen, meta_of = ops._sizes, ops._seen, bounds.__getitem__
        check = current_interrupt()  # a compute thread's cancel check (wire.run.cancel_scope)
        for index, step in enumerate(steps):  # one pass: sizes, last readers, op costs (found as `ops` finds them)
            if check is not None and not index % 256:
                check()
            sid, op, inputs = step.id, step.op, step.inputs
            meta = bounds[sid]
            nb = sizes.get(id(meta))
            size[sid] = nb if nb is not None else ops.nbytes(meta)
            last[sid] = index
            for ref in inputs:
                last[ref] = index
            if op in LEAVES:
                held.add(sid)
                leaves += size[sid]
                costs.append(None)
            elif op in SPECIAL:
                self.grads = self.grads or op == "grad"
                costs.append(None)
            else:
                found = seen.get((op, id(step.attrs), id(meta), *map(id, map(meta_of, inputs))))
                costs.append(found if found is not None else ops(step, bounds))
        self.leaves = leaves
        self.ends: list = [()] * len(steps)
        self.ends_bytes = [0] * len(steps)
        for ref, index in last.items():
            if ref not in held:
                self.ends[index] += (ref,)
                self.ends_bytes[index] += size[ref]


SPECIAL = ("constant", "function", "grad")  # steps that the walk prices itself


def _key(meta):
    """A meta as a key: a dtype that is a lone constant's number keeps its type (2, 2.0 and True are
    equal numbers, not equal dtypes)."""
    return meta if isinstance(meta[1], numpy.dtype) else (*meta, type(meta[1]))


def _op_costs(step, bounds) -> tuple:
    """(work, forward, kept and backward scratch bytes, the inputs the backward saves, whether it
    saves its output, whether it is differentiable) of an op step."""
    op = OPS[step.op]
    in_metas, out_meta = [_meta(bounds[i]) for i in step.inputs], _meta(bounds[step.id])
    dtypes = [dtype for _, dtype in (*in_metas, out_meta)]
    work = op.cost([shape for shape, _ in in_metas], out_meta[0], step.attrs, dtypes)[1]
    scratch = op.temporaries(in_metas, out_meta, step.attrs)
    saved = tuple(_saved_inputs(step))
    return (
        work,
        scratch.forward,
        scratch.kept,
        scratch.backward,
        saved,
        _uses_output(step),
        _differentiable(step, bounds),
    )


def _saved_inputs(step):
    """Indices of the inputs whose values the backward of `step` keeps."""
    if step.op in ("function", "grad"):
        return range(len(step.inputs))
    saves = OPS[step.op].saves
    if saves is True:
        return range(len(step.inputs))
    if saves is False:
        return ()
    return range(len(step.inputs))[saves]


def _uses_output(step) -> bool:
    return step.op not in ("function", "grad") and bool(OPS[step.op].uses_output)


class _Ancestry:
    """What a grad node's backward walks: the steps its output is computed from, found in time linear
    in the graph. Each output's ancestors are walked once (grad nodes of one output share them); once
    the walks together have visited `WALK_FACTOR` times the graph's steps, the rest get everything
    before them, an upper bound, so thousands of grad nodes of thousands of outputs stay linear."""

    WALK_FACTOR = 8

    def __init__(self, steps):
        self.inputs = {s.id: s.inputs for s in steps}
        self.budget = self.WALK_FACTOR * len(steps)
        self.memo: dict = {}

    def of(self, node_id):
        """The ancestors of node_id (itself included), or None when the walks' budget is spent."""
        if node_id in self.memo:
            return self.memo[node_id]
        found, todo = set(), [node_id]
        while todo and self.budget > 0:
            ref = todo.pop()
            if ref not in found and ref in self.inputs:
                found.add(ref)
                self.budget -= 1
                todo.extend(self.inputs[ref])
        self.memo[node_id] = found if not todo else None
        return self.memo[node_id]


def _differentiable(step, bounds):
    if step.op in ("function", "grad"):
        return True
    spec = OPS.get(step.op)
    dtype = bounds[step.id][1]
    return spec is not None and spec.differentiable and isinstance(dtype, numpy.dtype) and dtype.kind == "f"


def plan_cost(plan, bounds, functions, record: bool, requires, ops: _OpCosts | None = None, differentiate=True) -> Cost:
    """The Cost of running `plan`'s steps, recorded when `record` (and differentiated then, unless not `differentiate`)."""
    ops = ops or _OpCosts()
    steps = plan.steps
    tables = ops.tables(plan, bounds)
    size, held, costs, ends, ends_bytes = tables.size, tables.held, tables.costs, tables.ends, tables.ends_bytes
    live = tables.leaves
    peak, peak_node = live, None
    work, work_node, node_work = 0, None, -1
    grad = set(requires)
    saved_count: dict = {}
    recorded = []  # (id, inputs, extra bytes the node keeps for its backward, what its vjps hold besides the
    # grads, the values it saves: inputs and maybe its output)
    work_of = {}
    graph_of = {}  # a grad node's recorded backward graph (bytes), which a later grad node walks again
    ancestry, work_before, size_before = None, 0, live  # the leaves count as ancestors
    check = current_interrupt()  # a compute thread's cancel check (wire.run.cancel_scope)
    for index, step in enumerate(steps):
        if check is not None and not index % 256:
            check()
        found = costs[index]
        sid, inputs = step.id, step.inputs
        if found is not None:
            step_work, transient, kept, back_peak, saved, uses_output, differentiable = found
            back_work = 2 * step_work
        elif step.op in LEAVES:
            continue
        else:
            step_work, transient, kept, back_work, back_peak = 0, 0, 0, 0, 0
            # the inputs the backward saves, whether it saves the output, whether it is differentiable
            saved, uses_output, differentiable = range(len(inputs)), False, step.op != "constant"
            if step.op == "function":
                step_work, transient, kept, back_work, back_peak = _function_costs(
                    functions[sid], record, size[sid], ops
                )
            elif step.op == "grad":
                # a backward with create_graph over the subgraph the output is computed from: about
                # twice its forward work, and a recorded graph about as big as the values it walks
                # (those that require grad: a constant or an input that needs none gets no gradient),
                # those of the graphs that grad nodes among them recorded included (so nested grad
                # nodes' graphs double with each order, as a transcendental function's derivatives do)
                ancestry = ancestry or _Ancestry(steps)
                sub = ancestry.of(inputs[0])
                if sub is None:
                    step_work, transient = 2 * work_before, size_before
                else:
                    step_work = 2 * sum(work_of.get(ref, 0) for ref in sub)
                    walked = sub if not record else sub & grad
                    transient = sum(size[ref] + graph_of.get(ref, 0) for ref in walked)
                kept, back_work, back_peak = transient, 2 * step_work, size[sid]
                graph_of[sid] = transient
        if tables.grads:  # what a grad node's walk reads: the work and bytes before it
            work_of[sid] = step_work
            work_before, size_before = work_before + step_work, size_before + size[sid] + graph_of.get(sid, 0)
        work += step_work
        if step_work > node_work:
            work_node, node_work = sid, step_work
        live += size[sid]
        if live + transient > peak:
            peak, peak_node = live + transient, sid
        if record and differentiable and not grad.isdisjoint(inputs):
            grad.add(sid)
            saves = list(map(inputs.__getitem__, saved))
            if uses_output:
                saves.append(sid)
            for ref in saves:
                saved_count[ref] = saved_count.get(ref, 0) + 1
            live += kept
            work += back_work if differentiate else 0
            recorded.append((sid, inputs, kept, back_peak, saves))
        if not saved_count:
            live -= ends_bytes[index]
        else:
            for ref in ends[index]:
                if not saved_count.get(ref):
                    live -= size[ref]
    if record and differentiate:
        peak, peak_node = _backward_peak(steps, size, grad, saved_count, held, recorded, live, peak, peak_node)
    return Cost(peak, peak_node, work, work_node, max(node_work, 0))


def _function_costs(sub, record, out_size, ops) -> tuple:
    """(work, transient, kept, backward work, backward peak) of a function node: its forward subgraph
    runs inside it, and its backward subgraph in its vjp, reading the forward values it keeps."""
    inner = plan_cost(sub.forward, sub.forward_bounds, sub.forward_functions, False, (), ops)
    args = sum(nbytes(sub.forward_bounds[s.id]) for s in sub.forward.steps if s.op == "arg")
    transient, step_work, kept, back_work, back_peak = max(0, inner.peak_bytes - args), inner.work, 0, 0, 0
    if record:
        reads = {s.attrs["node"] for s in sub.backward.steps if s.op == "forward_value"}
        kept = sum(nbytes(sub.forward_bounds[n]) for n in reads if n in sub.forward_bounds)
        back = plan_cost(sub.backward, sub.backward_bounds, sub.backward_functions, False, (), ops)
        leaves = sum(nbytes(sub.backward_bounds[s.id]) for s in sub.backward.steps if s.op in LEAVES)
        back_work, back_peak = back.work, max(0, back.peak_bytes - leaves)
    return step_work, transient, kept, back_work, back_peak + out_size  # + a temporary of the output's size


def _backward_peak(steps, size, grad, saved_count, held, recorded, live, peak, peak_node):
    """The peak of the reverse walk over the recorded steps, starting from the forward's end."""
    live_grads = {s.id for s in steps if s.id in grad and s.id in held and s.op not in LEAVES}
    grads = sum(size[g] for g in live_grads)
    for sid, inputs, kept, back_peak, saves in reversed(recorded):
        new = set()
        added = 0
        for i in inputs:
            if i in grad and i not in live_grads and i not in new:
                new.add(i)
                added += size[i]
        if live + grads + added + back_peak > peak:
            peak, peak_node = live + grads + added + back_peak, sid
        if sid in live_grads:
            grads -= size[sid]
        live_grads.update(new)
        grads += added
        live -= kept
        for i in set(saves):
            count = saved_count.get(i)
            if count:
                saved_count[i] = count - 1
                if count == 1 and i not in held:
                    live -= size[i]
    return peak, peak_node
