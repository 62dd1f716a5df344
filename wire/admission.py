"""Admission: one decision, before a request runs, of whether it may run, where and at what cost.

`admit` turns a decoded request (with its plan and inferred shapes, from the executor's planner)
into a `Ticket` or raises a `Refusal` (413, kind too_large) naming the node or field and the
figure: every value within `max_tensor_elements` and the values together within
`max_total_elements` (x4), the answer's JSON part within `max_json_output_elements`, the planned
peak memory and work within `max_request_bytes` and `max_request_work` (`wire.budget`). Invalid
requests raise their own errors first (422/404), as running them would.

A ticket says where the request runs: `INLINE` (certainly cheap: a few small nodes of known
shapes; the service runs it on its event loop), `SHORT` (certainly milliseconds: on the event
loop when it is free, see `service.compute.ComputePool.may_run_inline`) or `POOL` (a compute
thread). A request the caller could not plan cheaply gets an unplanned POOL ticket, admitted again
(planned fully) where it runs. `bound_answer` is the same answer bound after running, for answers
whose shapes only running tells.

Elsewhere a size is bounded while a body is read or parsed, before anything is planned (the
body's bytes in `service.body` and the embedded transport, a tensor header's shape in
`wire.codec`, the request's tensors in `wire.messages.check_total`, a graph's nodes, depth and
derivative order in `wire.graph`/`wire.grad_node`), and while running, where only running tells
(a value whose shape depends on data in `wire.run`, a retained tape's bytes in `wire.stores`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.api import shown
from wire import jvp_node
from wire.budget import Cost
from wire.errors import RequestError
from wire.infer import Shapes
from wire.limits import Limits
from wire.messages import Request, Result

INLINE, SHORT, POOL = "inline", "short", "pool"

# Certainly cheap (INLINE): a graph of at most LIGHT_STEPS nodes, none a function node, every
# value's shape known, LIGHT_ELEMENTS values in all.
LIGHT_STEPS, LIGHT_ELEMENTS = 32, 4096
# Certainly milliseconds (SHORT): at most SHORT_STEPS nodes of known shapes and SHORT_ELEMENTS
# values computed (the request's own input tensors are there already, not computed), a planned cost (forward and backward) within SHORT_WORK flop-equivalents and SHORT_BYTES
# at its peak, and a JSON answer of at most SHORT_JSON_ELEMENTS. These bound it at ~15 ms on a slow
# CPU: elementwise passes over 2^18 values with their vjps at ~20 ns per value, 2^27 flops of
# matrix products, per-step dispatch of 256 steps (the seed net's /backward, 6 steps, 1.8e5 values
# and 6.1e7 flop-equivalents, takes ~0.5 ms).
SHORT_STEPS, SHORT_ELEMENTS, SHORT_WORK, SHORT_BYTES = 256, 2**18, 2**27, 32 * 2**20
SHORT_JSON_ELEMENTS = 4096


class Refusal(RequestError):
    """A request over a limit or budget (413), refused before it runs."""

    def __init__(self, message, node=None, field=None):
        super().__init__(message, node=node, field=field, kind="too_large")


@dataclass(frozen=True)
class JsonAnswer:
    """Which tensors of a request's answer are encoded as JSON (the rest binary), and how a refusal
    of too many says to ask for them in binary. `outputs`/`grads`: names, or None for all of them."""

    outputs: tuple | None
    grads: tuple | None
    advice: str
    field: str

    def refusal(self, elements: int, limit: int) -> Refusal:
        return Refusal(self.advice.format(elements=elements, limit=limit), field=self.field)


# The answer of /forward and /backward without parameters.binary_data_output: every tensor in JSON.
ALL_JSON = JsonAnswer(
    None,
    None,
    "the answer would hold {elements} elements, over the limit of {limit} for JSON answers "
    "(max_json_output_elements): JSON encoding is slow and blocks the server; ask for a binary answer with "
    "parameters.binary_data_output=true",
    "parameters.binary_data_output",
)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~1 µs more, on every request
class Ticket:
    """An admitted request: what to run (`request`, `kind`), where (`where`), and what was planned
    for it: its plan and shapes, its cost (peak memory and work, `wire.budget.Cost`) and the
    elements of its answer's JSON part (0: none, or not known before running). `plan` is None for
    a backward through a retained tape, and for a request not planned yet (`planned` False)."""

    request: Request
    kind: str  # "forward" or "backward"
    where: str  # INLINE, SHORT or POOL
    plan: object = None  # wire.graph.Plan
    shapes: Shapes | None = None
    cost: Cost | None = None  # or an upper bound of it, where that was within the budgets (`Shapes.upper`)
    answer_elements: int = 0

    @property
    def planned(self) -> bool:
        return self.plan is not None or self.request.tape is not None

    @property
    def differentiate(self) -> bool:
        """Whether it records a graph: a backward, or a forward that retains its tape."""
        return self.kind == "backward" or self.request.retain_graph


def admit(request: Request, kind: str, limits: Limits, planner) -> Ticket:
    """The Ticket of a decoded `request` to `kind` ("forward" or "backward"), or the error that
    refuses it. `planner(request)` gives its (plan, Shapes), or None when it cannot be planned
    cheaply here (an unplanned POOL ticket then: admit it again where it runs)."""
    _check_kind(request, kind)
    if request.tape is not None:
        return Ticket(request, kind, POOL)
    planned = planner(request)
    if planned is None:
        return Ticket(request, kind, POOL)
    plan, shapes = planned
    _check_elements(shapes, limits)
    answer = _json_elements(request, kind, plan, shapes)
    if answer > limits.max_json_output_elements:
        raise request.json_answer.refusal(answer, limits.max_json_output_elements)
    backward = kind == "backward" or request.retain_graph
    cost = shapes.upper.get(backward)  # within the budgets, the cost is: priced only where not
    if cost is None or cost.peak_bytes > limits.max_request_bytes or cost.work > limits.max_request_work:
        cost = shapes.cost(backward)
        check_budgets(cost, plan, limits)
    return Ticket(request, kind, _where(plan, shapes, answer, request.inputs), plan, shapes, cost, answer)


def bound_answer(ticket: Ticket, result: Result, limits: Limits) -> None:
    """Refuse a result whose answer's JSON part is over `max_json_output_elements`, now that its
    shapes are known (admission refused what inference could tell)."""
    selection = ticket.request.json_answer
    if selection is None or ticket.answer_elements:  # none, or counted by admission from known shapes
        return
    elements = sum(int(a.size) for a in _selected(result.outputs, selection.outputs))
    elements += sum(int(a.size) for a in _selected(result.grads or {}, selection.grads))
    if elements > limits.max_json_output_elements:
        raise selection.refusal(elements, limits.max_json_output_elements)


def _selected(arrays: dict, names):
    return arrays.values() if names is None else (arrays[n] for n in names if n in arrays)


def _check_kind(request: Request, kind: str) -> None:
    if kind == "forward":
        if request.tape is not None or request.grad_outputs or request.wrt is not None:
            raise RequestError(
                "/forward takes no tape, grad_outputs or wrt", field="tape" if request.tape else "grad_outputs"
            )
    elif request.tape is not None and (request.graph is not None or request.inputs):
        raise RequestError("a backward through a tape takes no graph or inputs", field="tape")


def _check_elements(shapes: Shapes, limits: Limits) -> None:
    """Refuse a graph whose values `shapes` says would be over the element limits."""
    big = limits.max_tensor_elements
    if shapes.largest > big:
        node_id = shapes.largest_node
        meta = shapes.bounds.get(node_id)
        where = (
            f" (shape {list(meta[0])})"
            if meta is not None and math.prod(meta[0]) == shapes.largest
            else " (inside its function)"
        )
        raise Refusal(
            f"node {shown(node_id)} would hold {shapes.largest} elements{where}, over the limit of {big}", node_id
        )
    if shapes.total > 4 * limits.max_total_elements:
        raise Refusal(f"the graph's values would hold {shapes.total} elements, over the limit", field="graph")


def _json_elements(request: Request, kind: str, plan, shapes: Shapes) -> int:
    """Elements of the answer's JSON part by shape inference; 0 when there is none or not every
    one of its shapes is known."""
    selection = request.json_answer
    if selection is None:
        return 0
    total = 0
    for name in plan.outputs if selection.outputs is None else selection.outputs:
        meta = shapes.known.get(name)
        if meta is None:
            return 0
        total += math.prod(meta[0])
    if kind == "backward":
        wrt = selection.grads
        if wrt is None:
            wrt = request.wrt if request.wrt is not None else [n for n in plan.inputs if n in plan.requires_grad]
        total += sum(int(request.inputs[n].size) for n in wrt if n in request.inputs)
    return total


def _where(plan, shapes: Shapes, answer: int, inputs: dict) -> str:
    """INLINE, SHORT or POOL (see the module doc and the bounds above)."""
    steps, known = len(plan.steps), shapes.all_known
    if steps <= LIGHT_STEPS and known and shapes.total <= LIGHT_ELEMENTS:
        return INLINE
    if (
        steps <= SHORT_STEPS
        and known
        and shapes.total - sum(a.size for a in inputs.values()) <= SHORT_ELEMENTS
        and answer <= SHORT_JSON_ELEMENTS
    ):
        cost = shapes.backward_cost  # priced here for a short forward only
        if cost.work <= SHORT_WORK and cost.peak_bytes <= SHORT_BYTES:
            return SHORT
    return POOL


def _figure(nbytes: int) -> str:
    if nbytes >= 2**80:
        return f"about 2^{int(nbytes).bit_length() - 1} bytes"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def _count(work) -> str:  # a bound doubled by nested grad nodes can be past a float's range
    return f"{work:.3g}" if work < 2**80 else f"about 2^{int(work).bit_length() - 1}"


def _node(plan, node_id):
    """(how a budget error names the node, its id): a jvp node's for the steps it expands into."""
    head = jvp_node.owner(node_id, plan.jvps) if node_id is not None else None
    if head is not None:
        return f"node {shown(head)} (jvp)", head
    op = next((s.op for s in plan.steps if s.id == node_id), None)
    return (f"node {shown(node_id)} ({op})" if op else "the request"), node_id


def check_budgets(cost: Cost, plan, limits: Limits) -> None:
    """Refuse a request whose planned cost is over a budget of `limits`, naming the node and figure."""
    if cost.peak_bytes > limits.max_request_bytes:
        name, node = _node(plan, cost.peak_node)
        raise Refusal(
            f"{name}: the request would need {_figure(cost.peak_bytes)} at its peak, "
            f"over the budget of {_figure(limits.max_request_bytes)} (max_request_bytes)",
            node=node,
        )
    if cost.work > limits.max_request_work:
        name, node = _node(plan, cost.work_node)
        raise Refusal(
            f"{name}: the request's work would be {_count(cost.work)} flop-equivalents "
            f"(this node {_count(cost.node_work)}), over the budget of {_count(limits.max_request_work)} "
            f"(max_request_work)",
            node=node,
        )
