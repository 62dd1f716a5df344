"""Requests and responses of the graph protocol, executed in-process.

`Executor` is what `/forward` and `/backward` do, minus HTTP: the service wraps it, and the
client's embedded mode calls it directly, so both run exactly the same code. It owns the
cache of planned graphs (keyed by a hash of the graph's structure) and the retained tapes.
"""

from __future__ import annotations

import math

from wire.budget import check_budgets
from wire.compile import run_compiled
from wire.differentiate import gradients
from wire.errors import GraphError, RequestError
from wire.infer import Shapes, check_request_inputs
from wire.limits import Limits
from wire.messages import Request, Result
from wire.run import Execution, element_guard
from wire.stores import PlanCache, TapeStore


class Executor:
    """Runs protocol requests: compiled programs where a plan compiles (`wire.compile`), the engine
    otherwise (and for tapes)."""

    def __init__(self, limits: Limits | None = None, compiled: bool = True):
        self.limits = limits or Limits()
        self.compiled = compiled  # run admitted plans by their compiled programs (wire.compile) where they compile
        self.plans = PlanCache(self.limits.plan_cache_size, self.limits.plan_cache_bytes)
        self.tapes = TapeStore(self.limits)

    def _plan(self, request: Request):
        """(plan, Shapes) of a request's graph and inputs, within the element limits; planned once
        per request (the plan is cached only once the request is admitted, see `_admit`)."""
        if request.planned is None:
            request.planned = self._check_plan(request)
        return request.planned[:2]

    def _check_plan(self, request: Request):
        if request.graph is None and request.plan is not None:
            plan, key = self.plans.by_id(request.plan), None
            if plan is None:
                raise RequestError(
                    f"plan {request.plan!r} is not (or no longer) held by this server; send the graph",
                    field="plan",
                    kind="not_found",
                )
        elif request.graph is None:
            raise RequestError(
                "'graph' is required (or 'plan', or 'tape' for a backward through a retained tape)", field="graph"
            )
        else:
            plan, key = self.plans.lookup(request.graph, self.limits)
        shapes = check_request_inputs(plan, request.inputs)
        if shapes.largest > self.limits.max_tensor_elements or shapes.total > 4 * self.limits.max_total_elements:
            self._refuse(shapes)
        return plan, shapes, key

    def _admit(self, request: Request, differentiate: bool):
        """(plan, Shapes) of a request whose planned cost is within the budgets (else a 413 naming
        the node and the figure); its plan is cached from then on."""
        plan, shapes = self._plan(request)
        cost = shapes.backward_cost if differentiate else shapes.forward_cost
        check_budgets(cost, plan, self.limits)
        key = request.planned[2]
        if key is not None:
            self.plans.store(key, plan)
            request.planned = (plan, shapes, None)
        return plan, shapes

    def _refuse(self, shapes: Shapes):
        """Raise the 413 for a graph whose values `shapes` says would be over the limits."""
        big = self.limits.max_tensor_elements
        if shapes.largest > big:
            node_id = shapes.largest_node
            meta = shapes.bounds.get(node_id)
            where = (
                f" (shape {list(meta[0])})"
                if meta is not None and math.prod(meta[0]) == shapes.largest
                else " (inside its function)"
            )
            raise RequestError(
                f"node {node_id!r} would hold {shapes.largest} elements{where}, over the limit of {big}",
                node=node_id,
                kind="too_large",
            )
        raise RequestError(
            f"the graph's values would hold {shapes.total} elements, over the limit", field="graph", kind="too_large"
        )

    def is_light(self, request: Request, max_steps: int = 32, max_elements: int = 4096) -> bool:
        """Whether running `request` is certainly cheap: a graph (not a tape) of at most `max_steps`
        nodes (no function node), every value's shape known and `max_elements` elements in all.
        Plans the graph (cached), so an invalid one raises here as it would when run."""
        if request.tape is not None or (request.graph is None and request.plan is None):
            return False
        plan, shapes = self._plan(request)
        return len(plan.steps) <= max_steps and shapes.all_known and shapes.total <= max_elements

    def is_short(
        self,
        request: Request,
        max_steps: int = 256,
        max_elements: int = 2**18,
        max_work: int = 2**27,
        max_bytes: int = 32 * 2**20,
    ) -> bool:
        """Whether running `request` certainly takes at most milliseconds: `is_light`'s test with
        `max_steps` and `max_elements`, and a planned cost (forward and backward, wire.budget)
        within `max_work` flop-equivalents and `max_bytes` at its peak. The defaults bound it at
        ~15 ms on a slow CPU: elementwise passes over 2^18 values with their vjps at ~20 ns per
        value, 2^27 flops of matrix products, per-step dispatch of 256 steps (the seed net's
        /backward, 6 steps, 1.8e5 values and 6.1e7 flop-equivalents, takes ~0.5 ms)."""
        if not self.is_light(request, max_steps, max_elements):
            return False
        cost = self._plan(request)[1].backward_cost
        return cost.work <= max_work and cost.peak_bytes <= max_bytes

    def forward(self, request: Request) -> Result:
        if request.tape is not None or request.grad_outputs or request.wrt is not None:
            raise RequestError(
                "/forward takes no tape, grad_outputs or wrt", field="tape" if request.tape else "grad_outputs"
            )
        plan, shapes = self._admit(request, differentiate=request.retain_graph)
        if not request.retain_graph and self.compiled:
            done = run_compiled(plan, shapes, request, False, self.plans.charge)
            if done is not None:
                return Result(request.id, done[0], plan=self.plans.id_of(plan), ran=done[2])
        with element_guard(self.limits.max_tensor_elements):
            execution = Execution(plan, request.inputs, record=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(request.id, execution.output_arrays(), tape=tape, plan=self.plans.id_of(plan), ran="engine")

    def backward(self, request: Request) -> Result:
        if request.tape is not None:
            if request.graph is not None or request.inputs:
                raise RequestError("a backward through a tape takes no graph or inputs", field="tape")
            execution = self.tapes.take(request.tape)
            try:
                with element_guard(self.limits.max_tensor_elements):
                    grads = gradients(execution, request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
            except GraphError:
                self.tapes.restore(request.tape, execution)
                raise
            if request.retain_graph:
                self.tapes.restore(request.tape, execution)
            else:
                self.tapes.mark_freed(request.tape)
            return Result(
                request.id,
                execution.output_arrays(),
                grads,
                tape=request.tape if request.retain_graph else None,
                ran="engine",
            )
        plan, shapes = self._admit(request, differentiate=True)
        if not request.retain_graph and self.compiled:
            done = run_compiled(plan, shapes, request, True, self.plans.charge)
            if done is not None:
                return Result(request.id, done[0], done[1], plan=self.plans.id_of(plan), ran=done[2])
        with element_guard(self.limits.max_tensor_elements):
            execution = Execution(plan, request.inputs, record=True, wrt=request.wrt or ())
            grads = gradients(execution, request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(
            request.id, execution.output_arrays(), grads, tape=tape, plan=self.plans.id_of(plan), ran="engine"
        )
