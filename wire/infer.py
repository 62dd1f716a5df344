"""Shapes and dtypes of every node, from the inputs' and the ops' shape rules, before anything runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy

from engine.api import OPS, Bounded, ShapeError, as_array, current_interrupt, shown
from wire import grad_node
from wire.budget import Kinds, Priced, held_metas, price, priced, upper_costs
from wire.errors import GraphError
from wire.graph import Plan, Programs, Signature

LEAVES = ("input", "arg", "grad_output", "forward_value")
CHECK_EVERY = 256  # steps inferred between two checks of the cancel event


@dataclass(frozen=True)
class Shapes:
    """Every node's (shape, dtype), or None where it is known only by running, for one input
    signature; with the element counts that admission compares (`wire.admission`), and the
    request's planned costs (`wire.budget`), each priced when first read (a backward request never
    walks a forward's). `bounds` holds every node's shape or, where only
    running tells (a boolean mask's result), an upper bound of it: what costs and limits use.
    `functions` holds each function node's `Subgraphs`."""

    known: dict
    bounds: dict
    functions: dict
    total: int  # elements of all the values (bounds), function subgraphs' included
    largest: int  # elements of the biggest of them (its node: `largest_node`)
    all_known: bool
    plan: Priced | None = field(default=None, compare=False, repr=False)  # what pricing reads of the plan
    programs: Programs = field(default_factory=Programs, compare=False, repr=False)  # compiled programs (wire.compile)
    nbytes: int = 0  # an estimate of what it holds (SIGNATURE_NODE_BYTES per node), programs aside
    costs: dict = field(default_factory=dict, compare=False, repr=False)  # True/False (backward or not) -> Cost
    upper: dict = field(default_factory=dict, compare=False, repr=False)  # the same -> an upper bound of it

    @classmethod
    def of(cls, known: dict, bounds: dict, functions: dict, plan: Plan | None = None, kinds=None) -> Shapes:
        """`kinds` (`wire.budget.Kinds`, from inference) gives the costs' upper bounds (`upper`)."""
        held = None if functions else held_metas(bounds, kinds)  # (read twice: found once)
        total, largest = _counts(bounds, functions, held)
        plan = None if plan is None else priced(plan)
        return cls(
            known,
            bounds,
            functions,
            total,
            largest,
            None not in known.values() and not functions,
            plan=plan,
            nbytes=SIGNATURE_NODE_BYTES * _nodes(bounds, functions),
            upper={} if kinds is None or plan is None or functions else upper_costs(plan, bounds, kinds, held),
        )

    def cost(self, backward: bool):
        """`wire.budget.Cost` of a forward, or (`backward`) of a forward recorded and differentiated."""
        found = self.costs.get(backward)
        if found is None:
            found = self.costs[backward] = price(self.plan, self, backward)
        return found

    @property
    def largest_node(self) -> str | None:
        """The node of the biggest value (a function node for a value inside one): read by a refusal only."""
        return _largest(self.bounds, self.functions)[1]

    @property
    def forward_cost(self):
        return self.cost(False)

    @property
    def backward_cost(self):
        return self.cost(True)


# What a signature's Shapes keeps per node (known, bounds, costs), measured with tracemalloc on a
# 9,000-node chain: ~102 bytes.
SIGNATURE_NODE_BYTES = 120


def _nodes(bounds, functions) -> int:
    count = len(bounds)
    for sub in functions.values():
        count += _nodes(sub.forward_bounds, sub.forward_functions) + _nodes(sub.backward_bounds, sub.backward_functions)
    return count


@dataclass(frozen=True)
class Subgraphs:
    """A function node's subgraphs with their inferred bounds (and their own function nodes')."""

    forward: object  # wire.graph.Plan
    backward: object
    forward_bounds: dict
    backward_bounds: dict
    forward_functions: dict
    backward_functions: dict


def _counts(bounds, functions, held) -> tuple:
    """(elements of all the values, of the biggest): each distinct meta's counted once (inference shares
    one meta per value kind, `_rule`), times the nodes that hold it (`held`: `held_metas`)."""
    if functions:
        largest, _, total = _largest(bounds, functions)
        return total, largest
    total, largest = 0, 0
    for meta, nodes in held:
        count = math.prod(meta[0])
        total += nodes * count
        largest = max(largest, count)
    return total, largest


def _largest(bounds, functions, owner=None) -> tuple:
    """(elements of the biggest value, its node, elements of all): node by node, subgraphs' included."""
    total, largest, largest_node = 0, 0, None
    for node_id, meta in bounds.items():
        count = math.prod(meta[0])
        total += count
        if count > largest:
            largest, largest_node = count, owner or node_id
    for node_id, sub in functions.items():
        for sub_bounds, sub_functions in (
            (sub.forward_bounds, sub.forward_functions),
            (sub.backward_bounds, sub.backward_functions),
        ):
            big, _, t = _largest(sub_bounds, sub_functions, owner or node_id)
            total += t
            if big > largest:
                largest, largest_node = big, owner or node_id
    return largest, largest_node, total


def _fallback_bound(step, bounds):
    """A shape for a node whose inputs' sizes are only bounds and whose rule refuses the bounds
    (e.g. a mask's result broadcast with another shape): as many elements as its largest input."""
    metas = [bounds[i] for i in step.inputs]
    biggest = max(metas, key=lambda m: math.prod(m[0]))
    return (math.prod(biggest[0]),), numpy.result_type(*[m[1] for m in metas])


def infer(steps, known: dict, bounds: dict | None = None, functions: dict | None = None, kinds=None) -> dict:
    """(shape, dtype) of every node given the inputs' (and, in a subgraph, the leaves'), by the ops'
    shape rules; None where only running can tell. Fills `bounds` (see Shapes) and `functions`, and
    `kinds` (`wire.budget.Kinds`, when given) with the op steps by kind, for an upper bound of the cost."""
    bounds = {} if bounds is None else bounds
    functions = {} if functions is None else functions
    memo: dict = {}  # a rule's key -> (meta, bounded): inferred once per distinct (op, input metas, attrs)
    seen: dict = {}  # (op, id(attrs), *ids of input metas) -> [the same, its first step, its steps] (bounds and
    # steps hold what the ids name)
    check = current_interrupt()  # a compute thread's cancel check (wire.run.cancel_scope)
    for index, step in enumerate(steps):
        if check is not None and not index % CHECK_EVERY:
            check()
        op = step.op
        if op in UNRULED:
            _infer_unruled(step, known, bounds, functions)
            if kinds is not None:
                kinds.unruled.append(bounds[step.id])
            continue
        attrs, refs = step.attrs, step.inputs
        # found first by the identity of the attrs and metas (parsing shares equal attrs, and this one
        # meta per distinct value kind: `_rule`), then by the key of this op's rule on these metas: a
        # dtype that is a lone constant's number keeps its type (2, 2.0 and True are equal keys, not
        # equal dtypes)
        if len(refs) == 2:  # (the common step: its two inputs looked up directly, no map)
            exact = known.get(refs[0]) is not None and known.get(refs[1]) is not None
            ident = (op, id(attrs), id(bounds[refs[0]]), id(bounds[refs[1]]))
        else:
            exact = None not in map(known.get, refs)  # (no generator's frame a step)
            ident = (op, id(attrs), *map(id, map(bounds.__getitem__, refs)))
        kind = seen.get(ident)
        if kind is None:
            metas = list(map(bounds.__getitem__, step.inputs))
            key = (op, *[m if isinstance(m[1], numpy.dtype) else (*m, type(m[1])) for m in metas])
            if attrs:
                key = (*key, *[(k, v.__class__, v) for k, v in attrs.items()])
            try:
                found = memo.get(key)
            except TypeError:  # an unhashable attribute (a list, an array): inferred each time
                key, found = None, None
            if found is None:
                try:
                    found = _rule(op, metas, attrs)
                except (ShapeError, ValueError, TypeError, IndexError, RuntimeError) as err:  # (PyTorch refuses dtypes)
                    if not exact:
                        known[step.id], bounds[step.id] = None, _fallback_bound(step, bounds)
                        if kinds is not None:  # (a step of no kind: no upper bound)
                            kinds.whole = False
                        continue
                    described = ", ".join(f"{i} {list(m[0])}" for i, m in zip(step.inputs, metas))
                    raise GraphError(
                        f"node {shown(step.id)} ({op}): {err} (inputs: {described})", node=step.id, field="inputs"
                    ) from None
                if key is not None:
                    memo[key] = found
            kind = seen[ident] = [found, step, 0]
            if kinds is not None:
                kinds.found.append(kind)
        kind[2] += 1
        meta, bounded = kind[0]
        bounds[step.id] = meta
        known[step.id] = meta if exact and not bounded else None
    return known


UNRULED = frozenset({*LEAVES, "constant", "grad", "function"})  # the steps no op's shape rule infers


def _infer_unruled(step, known, bounds, functions):
    """A leaf's, constant's, grad node's or function node's meta, into `known` and `bounds`."""
    op = step.op
    if op == "constant":
        value = step.attrs["value"]
        known[step.id] = bounds[step.id] = (
            ((), value) if not hasattr(value, "shape") else (tuple(value.shape), value.dtype)
        )
    elif op == "grad":
        known[step.id] = bounds[step.id] = grad_node.infer(step, bounds)
    elif op == "function":
        known[step.id], bounds[step.id] = _infer_function(
            step, [known.get(i) for i in step.inputs], [bounds[i] for i in step.inputs], functions
        )
    else:
        bounds.setdefault(step.id, known.get(step.id))


def _rule(op, metas, attrs) -> tuple:
    """(meta, whether its shape is only a bound) by the op's shape rule; a meta shared by the steps
    with the same rule's key (`infer`), so a signature's Shapes holds one per distinct value kind."""
    shape, dtype = OPS[op].infer([m[0] for m in metas], [m[1] for m in metas], attrs)
    return (tuple(shape), _dtype(dtype)), isinstance(shape, Bounded)


def _dtype(dtype):
    """A rule's dtype; a rule that passes on a lone scalar constant's meta gives the number itself,
    whose dtype is the engine's for a lone Python number (`engine.variable.as_array`: 7.0 is float32)."""
    return (
        dtype
        if isinstance(dtype, numpy.dtype)
        else as_array(dtype).dtype
        if isinstance(dtype, (bool, int, float))
        else numpy.dtype(dtype)
    )


def _infer_function(step, arg_known, arg_bounds, functions):
    """(known, bound) of a function node's output, inferring its forward subgraph from the
    node's inputs and its backward subgraph from those and the forward's values."""
    forward, backward = step.subgraphs
    try:
        fk, fb, ff = _leaves(forward, arg_known), _leaves(forward, arg_bounds), {}
        infer(forward.steps, fk, fb, ff)
        out = forward.outputs[0]
        bk, bb, bf = _leaves(backward, arg_known, fk[out], fk), _leaves(backward, arg_bounds, fb[out], fb), {}
        infer(backward.steps, bk, bb, bf)
    except GraphError as err:
        raise GraphError(
            f"function node {shown(step.id)}: {err}", node=step.id, field=err.field, kind=err.kind
        ) from None
    functions[step.id] = Subgraphs(forward, backward, fb, bb, ff, bf)
    return fk[out], fb[out]


def _leaves(plan, args, grad_output=None, forward=None):
    """The metas of a subgraph's leaves: its args (the node's inputs), grad_output, forward values."""
    out = {}
    for s in plan.steps:
        if s.op == "arg":
            out[s.id] = args[s.attrs["index"]]
        elif s.op == "grad_output":
            out[s.id] = grad_output
        elif s.op == "forward_value":
            out[s.id] = forward[s.attrs["node"]]
    return out


SIGNATURES_PER_PLAN = 64


def signature_of(plan: Plan, arrays: dict) -> Signature:
    """The key under which a plan keeps the Shapes of inputs like `arrays` (their shapes and dtypes)."""
    return tuple((arrays[name].shape, arrays[name].dtype) for name in plan.inputs)


def known_shapes(plan: Plan, arrays: dict) -> Shapes | None:
    """The Shapes a plan already holds for these tensors' signature (no inference), or None."""
    if arrays.keys() != plan.input_names:
        return None
    return plan.checked.get(signature_of(plan, arrays))


def check_request_inputs(plan: Plan, arrays: dict, keep=None) -> Shapes:
    """The request's tensors against the plan's input nodes (names, declared shapes and dtypes),
    then every node's shape by inference. All but the name check depend only on the tensors'
    shapes and dtypes, so they run once per such signature of a plan; a later request with
    the same signature gets the same answer from the plan's cache, one with another reruns them.
    `keep(plan, signature, shapes)` decides whether a new signature is kept (and charges it,
    see `wire.stores.PlanCache.keep_signature`); without it, up to SIGNATURES_PER_PLAN are."""
    if arrays.keys() != plan.input_names:
        _check_names(plan, arrays)
    key = signature_of(plan, arrays)
    shapes = plan.checked.get(key)
    if shapes is None:
        _check_declared(plan, arrays)
        known = {name: (tuple(a.shape), numpy.dtype(a.dtype)) for name, a in arrays.items()}
        bounds, functions, kinds = dict(known), {}, Kinds()
        infer(plan.steps, known, bounds, functions, kinds)
        shapes = Shapes.of(known, bounds, functions, plan, kinds)
        if keep is not None:
            keep(plan, key, shapes)
        elif len(plan.checked) < SIGNATURES_PER_PLAN:
            plan.checked[key] = shapes
    return shapes


def _check_names(plan: Plan, arrays: dict):
    missing = [n for n in plan.inputs if n not in arrays]
    if missing:
        raise GraphError(
            f"no tensor given for input node(s) {', '.join(map(repr, missing))}", node=missing[0], field="inputs"
        )
    extra = [n for n in arrays if n not in plan.input_names]
    if extra:
        raise GraphError(
            f"tensor(s) {', '.join(map(repr, extra))} match no input node of the graph", node=extra[0], field="inputs"
        )


def _check_declared(plan: Plan, arrays: dict):
    for step in plan.input_steps:
        array = arrays[step.id]
        if step.shape is not None and tuple(array.shape) != step.shape:
            raise GraphError(
                f"input {shown(step.id)} is declared with shape {list(step.shape)} but the tensor has shape {list(array.shape)}",
                node=step.id,
                field="shape",
            )
        if step.dtype is not None and numpy.dtype(array.dtype) != step.dtype:
            raise GraphError(
                f"input {shown(step.id)} is declared {step.dtype.name} but the tensor is {numpy.dtype(array.dtype).name}",
                node=step.id,
                field="dtype",
            )
        if step.requires_grad and numpy.dtype(array.dtype).kind != "f":
            raise GraphError(
                f"input {shown(step.id)} requires grad but its tensor is {numpy.dtype(array.dtype).name}",
                node=step.id,
                field="requires_grad",
            )
