"""Requests and responses of the graph protocol, executed in-process.

`Executor` is what `/forward` and `/backward` do, minus HTTP: the service wraps it, and the
client's embedded mode calls it directly, so both run exactly the same code. It owns the
cache of planned graphs (keyed by a hash of the graph's structure) and the retained tapes.
"""

from __future__ import annotations

import math

from engine.attrs import shown
from wire.budget import check_budgets
from wire.compile import run_compiled
from wire.differentiate import gradients
from wire.errors import RequestError
from wire.infer import Shapes, check_request_inputs, known_shapes
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
        if request.planned is None or request.planned[1] is None:
            plan, _, key = self._resolved(request)
            request.planned = (plan, self._check_inputs(request, plan, key), key)
        return request.planned[:2]

    def planned(self, request: Request):
        """(plan, Shapes) of a request if it is planned already, else None (nothing computed)."""
        return None if request.planned is None or request.planned[1] is None else request.planned[:2]

    def _cheaply_planned(self, request: Request, max_steps: int):
        """(plan, Shapes) of a request with work bounded by its own bytes and `max_steps`: a plan
        parsed from the request's graph, or its Shapes already kept for these inputs' signature,
        or a plan of at most `max_steps` steps (no function node) to infer; else None (the
        compute pool plans it). Invalid requests of those raise here as they would when run."""
        plan, shapes, key = self._resolved(request)
        if shapes is None:
            shapes = known_shapes(plan, request.inputs)
            if shapes is None and key is None:  # a plan the server holds: is inferring it cheap?
                if len(plan.steps) > max_steps or any(step.subgraphs for step in plan.steps):
                    return None
            if shapes is not None:
                self._check_elements(shapes)
            request.planned = (plan, shapes, key)
        return self._plan(request)

    def _resolved(self, request: Request) -> tuple:
        """request.planned, with at least its plan resolved: (plan, Shapes or None, key)."""
        if request.planned is None:
            plan, key = self._resolve(request)
            request.planned = (plan, None, key)
        return request.planned

    def _resolve(self, request: Request):
        """(plan, key): the request's plan, and the key to cache it under when it is new (None
        for a plan the server holds already)."""
        if request.held is not None:
            plan, key, _ = request.held
            self.plans.store(key, plan)  # a registered model's plan, cached again if it was dropped
            return plan, None
        if request.graph is None and request.plan is not None:
            plan = self.plans.by_id(request.plan)
            if plan is None:
                raise RequestError(
                    f"plan {shown(request.plan)} is not (or no longer) held by this server; send the graph",
                    field="plan",
                    kind="not_found",
                )
            return plan, None
        if request.graph is None:
            raise RequestError(
                "'graph' is required (or 'plan', or 'tape' for a backward through a retained tape)", field="graph"
            )
        return self.plans.lookup(request.graph, self.limits)

    def _check_inputs(self, request: Request, plan, key):
        shapes = check_request_inputs(plan, request.inputs, None if key is not None else self._keeper(request))
        self._check_elements(shapes)
        return shapes

    def _check_elements(self, shapes: Shapes):
        if shapes.largest > self.limits.max_tensor_elements or shapes.total > 4 * self.limits.max_total_elements:
            self._refuse(shapes)

    def _keeper(self, request: Request):
        """How a cached plan keeps a new input signature's Shapes: as the plan cache allows and, for
        a plan held by its owner (a registered model), as the owner's `admits(nbytes)` allows too.
        (A new plan keeps its signatures: they are counted when it is cached.)"""
        admits = request.held[2] if request.held is not None else None
        if admits is None:
            return self.plans.keep_signature

        def keep(plan, signature, shapes):
            if admits(shapes.nbytes):
                self.plans.keep_signature(plan, signature, shapes)

        return keep

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
                f"node {shown(node_id)} would hold {shapes.largest} elements{where}, over the limit of {big}",
                node=node_id,
                kind="too_large",
            )
        raise RequestError(
            f"the graph's values would hold {shapes.total} elements, over the limit", field="graph", kind="too_large"
        )

    def is_light(self, request: Request, max_steps: int = 32, max_elements: int = 4096) -> bool:
        """Whether running `request` is certainly cheap: a graph (not a tape) of at most `max_steps`
        nodes (no function node), every value's shape known and `max_elements` elements in all.
        Decided from the request's own bytes and what is cached only (`_cheaply_planned`): a
        plan the server holds is never inferred here beyond `max_steps` steps."""
        if request.tape is not None or (request.graph is None and request.plan is None and request.held is None):
            return False
        planned = self._cheaply_planned(request, max_steps)
        if planned is None:
            return False
        plan, shapes = planned
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
            done = run_compiled(plan, shapes, request, False, self.plans.charge, self.plans.id_of(plan))
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
            except BaseException:
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
            done = run_compiled(plan, shapes, request, True, self.plans.charge, self.plans.id_of(plan))
            if done is not None:
                return Result(request.id, done[0], done[1], plan=self.plans.id_of(plan), ran=done[2])
        with element_guard(self.limits.max_tensor_elements):
            execution = Execution(plan, request.inputs, record=True, wrt=request.wrt or ())
            grads = gradients(execution, request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(
            request.id, execution.output_arrays(), grads, tape=tape, plan=self.plans.id_of(plan), ran="engine"
        )
