"""Requests and responses of the graph protocol, executed in-process.

`Executor` is what `/forward` and `/backward` do, minus HTTP: the service wraps it, and the
client's embedded mode calls it directly, so both run exactly the same code. It owns the
cache of planned graphs (keyed by the graph's text) and the retained tapes; it plans a request
and admits it (`admit`: `wire.admission` decides), then runs the ticket (`run`).
"""

from __future__ import annotations

import contextlib

from engine.api import anomaly_mode, shown
from wire.admission import INLINE, POOL, Ticket, admit
from wire.compile import run_compiled
from wire.differentiate import gradients
from wire.errors import RequestError
from wire.infer import check_request_inputs, known_shapes
from wire.layouts import Layouts
from wire.limits import Limits
from wire.messages import Request, Result
from wire.resident_update import apply_update
from wire.residents import ResidentStore
from wire.run import Execution, element_guard
from wire.stores import PlanCache, TapeStore

RESIDENT_ONLY = "resident only"  # the `plan` of a ticket that only moves resident arrays (no graph runs)


def key_of(request: Request) -> tuple:
    """The key its session's resident arrays are kept under: (scope, session)."""
    if request.session is None:
        raise RequestError("a graph that reads resident arrays needs the request's 'session'", field="session")
    return (request.scope, request.session)


class Executor:
    """Runs protocol requests: compiled programs where a plan compiles (`wire.compile`), the engine
    otherwise (and for tapes)."""

    def __init__(self, limits: Limits | None = None, compiled: bool = True):
        self.limits = limits or Limits()
        self.compiled = compiled  # run admitted plans by their compiled programs (wire.compile) where they compile
        self.plans = PlanCache(self.limits.plan_cache_size, self.limits.plan_cache_bytes)
        self.tapes = TapeStore(self.limits)
        self.residents = ResidentStore(self.limits)
        self.layouts = Layouts()  # binary requests' headers seen before (wire.layouts)

    def admit(self, request: Request, kind: str, cheap_steps: int | None = None) -> Ticket:
        """The `wire.admission.Ticket` of `request` to `kind` ("forward" or "backward"), or the
        error that refuses it. With `cheap_steps`, it is planned only where that is cheap
        (`_cheaply_planned`): else its ticket is an unplanned POOL one, admitted again there."""
        if request.session is not None or request.upload:
            ticket = self._admit_residents(request, kind)
            if ticket is not None:
                return ticket
        admitted = None if request.layout is None else request.layout.admitted.get(kind)
        plan, shapes = (None, None) if admitted is None else (admitted[1](), admitted[2]())  # held weakly
        if plan is not None and shapes is not None and request.planned is None and self.plans.hit(plan):
            if plan.residents or request.update:  # (its resident arrays as they are now: the same signature?)
                self._bind_residents(request, plan)
                request.planned = (plan, None, None)
            if request.planned is None or known_shapes(plan, request.inputs) is shapes:
                request.planned = (plan, shapes, None)  # a header seen before, on a plan still cached:
                return Ticket(request, kind, admitted[0], plan, shapes, admitted[3], admitted[4])  # as kept
        if cheap_steps is None:
            return admit(request, kind, self.limits, self._plan)
        backward = kind == "backward" or request.retain_graph
        return admit(request, kind, self.limits, lambda r: self._cheaply_planned(r, cheap_steps, backward))

    def _plan(self, request: Request):
        """(plan, Shapes) of a request's graph and inputs; planned once per request (the plan is
        cached only once the request runs, see `run`)."""
        if request.planned is None or request.planned[1] is None:
            plan, _, key = self._resolved(request)
            shapes = check_request_inputs(plan, request.inputs, None if key is not None else self._keeper(request))
            request.planned = (plan, shapes, key)
        return request.planned[:2]

    def _cheaply_planned(self, request: Request, max_steps: int, backward: bool):
        """(plan, Shapes) of a request with work bounded by its own bytes and `max_steps`: a plan
        parsed from the request's graph, or its Shapes already kept for these inputs' signature
        and priced for its kind (`backward`), or a plan of at most `max_steps` steps (no function
        node) to infer and price; else None (the compute pool plans it). Invalid requests of
        those raise here as they would when run."""
        plan, shapes, key = self._resolved(request)
        if shapes is None:
            shapes = known_shapes(plan, request.inputs)
            if key is None and (shapes is None or backward not in shapes.costs):  # is planning it here cheap?
                if len(plan.steps) > max_steps or "function" in plan.noted:
                    return None
            request.planned = (plan, shapes, key)
        return self._plan(request)

    def _resolved(self, request: Request) -> tuple:
        """request.planned, with at least its plan resolved: (plan, Shapes or None, key)."""
        if request.planned is None:
            plan, key = self._resolve(request)
            if plan.residents or request.update:
                self._bind_residents(request, plan)
            request.planned = (plan, None, key)
        return request.planned

    # --- resident arrays (wire.residents) ------------------------------------------------------

    def _admit_residents(self, request: Request, kind: str) -> Ticket | None:
        """Refuse early what the resident store cannot take; the ticket of a request that only moves
        resident arrays (None for one with a graph to run: admitted as usual)."""
        if request.update and (kind != "backward" or request.tape is not None):
            raise RequestError("an update applies after a backward that sends its graph (no tape)", field="update")
        key = key_of(request)
        if request.upload:
            self.residents.check_room(key, sum(int(a.nbytes) for a in request.upload.values()))
        if not request.resident_only:
            return None
        if request.inputs or request.grad_outputs or request.wrt is not None:
            raise RequestError(
                "'graph' is required (or 'plan', or 'tape'): a request without one only uploads, fetches or frees "
                "resident arrays",
                field="graph",
            )
        return Ticket(request, kind, POOL if request.upload else INLINE, RESIDENT_ONLY)

    def _bind_residents(self, request: Request, plan) -> None:
        """Its resident inputs' arrays as the request's inputs (read-only views: updated only after the
        run), from its upload or the store; every handle it updates must be one of them."""
        key = key_of(request)
        if request.order[1] is not None:
            with self.residents.updating(key):  # (its inputs are read after step `after` or not at all)
                self.residents.check_after(key, request.order[1])
        bound = {}
        for node, handle in plan.residents.items():
            if node in request.inputs:
                raise RequestError(
                    f"input node {shown(node)} reads resident {shown(handle)}: it is not also sent in 'inputs'",
                    node=node,
                    field="inputs",
                )
            if handle in bound:
                raise RequestError(
                    f"resident {shown(handle)} is read by two input nodes ({shown(bound[handle])} and {shown(node)})",
                    node=node,
                    field="resident",
                )
            bound[handle] = node
            array = request.upload.get(handle)
            if array is None:
                request.inputs[node] = self.residents.view(key, handle)
            else:
                view = request.inputs[node] = array.view()
                view.flags.writeable = False
        for _, _, handles in request.update or ():
            for handle in handles:
                if handle not in bound:
                    raise RequestError(
                        f"update names resident {shown(handle)}, which no input node of the graph reads",
                        node=handle,
                        field="update",
                    )

    def _settle_residents(self, request: Request, plan, result: Result) -> Result:
        """After a run: the update applied (the updated inputs' gradients not sent back), then the
        fetch and the free."""
        key = key_of(request)
        if request.update and result.grads is not None:
            by_handle = {h: result.grads[n] for n, h in plan.residents.items() if n in result.grads}
            for node in plan.residents:  # its views let go: an array nothing else reads is stepped in place
                request.inputs.pop(node, None)  # (an output, a retained tape or another request holds its own)
            apply_update(self.residents, key, request.update, by_handle, request.order)
            updated = {h for _, _, handles in request.update for h in handles}
            result.grads = {n: g for n, g in result.grads.items() if plan.residents.get(n) not in updated}
        return self._fetch_and_free(request, key, result)

    def _fetch_and_free(self, request: Request, key: tuple, result: Result) -> Result:
        if request.fetch:
            result.fetched = self.residents.fetch(key, request.fetch)
            if request.json_answer is not None:
                elements = sum(int(a.size) for a in result.fetched.values())
                if elements > self.limits.max_json_output_elements:
                    raise request.json_answer.refusal(elements, self.limits.max_json_output_elements)
        if request.free:
            self.residents.free(key, request.free)
        return result

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

    def forward(self, request: Request) -> Result:
        """Admit and run a /forward request."""
        return self.run(self.admit(request, "forward"))

    def backward(self, request: Request) -> Result:
        """Admit and run a /backward request."""
        return self.run(self.admit(request, "backward"))

    def run(self, ticket: Ticket) -> Result:
        """Run an admitted request (a ticket not planned yet is admitted fully first); its plan is
        cached from then on."""
        request = ticket.request
        if ticket.plan is None and request.tape is None:  # (not `ticket.planned`: a property's call, per request)
            ticket = self.admit(request, ticket.kind)
        if request.upload:
            self.residents.put(key_of(request), request.upload)
        if ticket.plan is RESIDENT_ONLY:
            return self._fetch_and_free(request, key_of(request), Result(request.id, {}))
        if request.tape is not None:
            result = self._through_tape(request)
            return result if request.session is None else self._fetch_and_free(request, key_of(request), result)
        plan, shapes = ticket.plan, ticket.shapes
        result = self._run_plan(ticket, request, plan, shapes)
        return result if request.session is None else self._settle_residents(request, plan, result)

    def _run_plan(self, ticket: Ticket, request: Request, plan, shapes) -> Result:
        key, layout = request.planned[2], request.layout
        if key is not None:
            self.plans.store(key, plan)
            request.planned = (plan, shapes, None)
        elif layout is not None:
            layout.keep(ticket, request.inputs)  # the next request of this header is admitted so
        backward = ticket.kind == "backward"
        if not (request.retain_graph or request.detect_anomaly) and self.compiled:  # (programs check no NaN)
            pid = self.plans.id_of(plan)
            done = run_compiled(plan, shapes, request, backward, self.plans.charge, pid)
            if done is not None:
                return Result(request.id, done[0], done[1] if backward else None, plan=pid, ran=done[2])
        record = backward or request.retain_graph
        with element_guard(self.limits.max_tensor_elements), _anomaly_checks(request):
            execution = Execution(plan, request.inputs, record=record, wrt=request.wrt or ())
            grads = None
            if ticket.kind == "backward":
                grads = gradients(execution, request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(
            request.id, execution.output_arrays(), grads, tape=tape, plan=self.plans.id_of(plan), ran="engine"
        )

    def _through_tape(self, request: Request) -> Result:
        """A backward through a retained tape."""
        execution = self.tapes.take(request.tape)
        try:
            with element_guard(self.limits.max_tensor_elements), _anomaly_checks(request):
                grads = gradients(execution, request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
        except BaseException:
            self.tapes.restore(request.tape, execution)
            raise
        if request.retain_graph:
            self.tapes.restore(request.tape, execution)
        else:
            self.tapes.release(request.tape)
        return Result(
            request.id,
            execution.output_arrays(),
            grads,
            tape=request.tape if request.retain_graph else None,
            ran="engine",
        )


def _anomaly_checks(request: Request):
    """The engine's NaN check on this thread for a request with parameters.detect_anomaly (a client in anomaly mode)."""
    return anomaly_mode.checking_nan() if request.detect_anomaly else contextlib.nullcontext()
