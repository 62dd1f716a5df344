"""Requests and responses of the graph protocol, executed in-process.

`Executor` is what `/forward` and `/backward` do, minus HTTP: the service wraps it, and the
client's embedded mode calls it directly, so both run exactly the same code. It owns the
cache of planned graphs (keyed by a hash of the graph's structure) and the retained tapes.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, fields

import orjson

from engine import backend, codec
from engine.graph import Execution, GraphError, Shapes, TapeFreedError, check_request_inputs, parse

REQUEST_KEYS = {"id", "graph", "inputs", "grad_outputs", "wrt", "parameters", "tape", "outputs"}
PARAMETERS = {"retain_graph", "binary_data_output"}


@dataclass
class Limits:
    """Every bound the protocol enforces; all configurable (see service settings)."""

    max_body_bytes: int = 512 * 2**20
    max_tensor_elements: int = 2**27
    max_total_elements: int = 2**28
    max_nodes: int = 100_000
    max_depth: int = 100_000
    max_tapes: int = 1024
    max_tape_bytes: int = 2 * 2**30
    tape_ttl_s: float = 600.0
    plan_cache_size: int = 512

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RequestError(GraphError):
    """A request that is malformed or over a limit (status 400/404/413/422)."""


@dataclass
class Request:
    graph: dict | None = None
    inputs: dict = field(default_factory=dict)
    grad_outputs: dict = field(default_factory=dict)
    wrt: list | None = None
    id: object = None
    tape: str | None = None
    retain_graph: bool = False
    binary_output: bool = False
    planned: tuple | None = field(default=None, repr=False)  # (plan, known shapes), once planned


@dataclass
class Result:
    id: object
    outputs: dict
    grads: dict | None = None
    tape: str | None = None


def _tensor_map(pairs, where):
    out = {}
    for name, array in pairs:
        if name in out:
            raise RequestError(f"{where}: tensor {name!r} is given twice", node=name, field=where)
        out[name] = array
    return out


def decode_request(header, tail, limits: Limits) -> Request:
    """A Request from a parsed JSON header and the body's binary tail (None for plain JSON)."""
    if not isinstance(header, dict):
        raise RequestError("the body must be a JSON object", status=400)
    unknown = set(header) - REQUEST_KEYS
    if unknown:
        raise RequestError(f"unknown field(s) in request: {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
    params = header.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("'parameters' must be an object", field="parameters")
    for key in ("retain_graph", "binary_data_output"):
        if key in params and not isinstance(params[key], bool):
            raise RequestError(f"parameters.{key} must be true or false", field=f"parameters.{key}")
    rid = header.get("id")
    if rid is not None and not isinstance(rid, (str, int)):
        raise RequestError("'id' must be a string or an integer", field="id")
    wrt = header.get("wrt")
    if wrt is not None and (not isinstance(wrt, list) or not all(isinstance(w, str) for w in wrt)):
        raise RequestError("'wrt' must be a list of input names", field="wrt")
    tape = header.get("tape")
    if tape is not None and not isinstance(tape, str):
        raise RequestError("'tape' must be a string", field="tape")
    checked = {}
    for where in ("inputs", "grad_outputs"):
        objs = header.get(where)
        if objs is not None and not isinstance(objs, list):
            raise RequestError(f"'{where}' must be a list of tensor objects", field=where)
        checked[where] = codec.check_headers(objs, where, limits.max_tensor_elements)
    total = sum(count for headers in checked.values() for *_, count in headers)
    if total > limits.max_total_elements:
        raise RequestError(f"the request's tensors hold {total} elements, over the limit of {limits.max_total_elements}",
                           field="inputs", status=413)
    inputs, offset = codec.decode_tensors(header.get("inputs"), "inputs", tail, 0, limits.max_tensor_elements,
                                          checked["inputs"])
    grads, offset = codec.decode_tensors(header.get("grad_outputs"), "grad_outputs", tail, offset,
                                         limits.max_tensor_elements, checked["grad_outputs"])
    if tail is not None and offset != len(tail):
        raise RequestError(f"the body has {len(tail) - offset} bytes of binary data that no tensor claims",
                           field=codec.HEADER_LENGTH, status=400)
    return Request(
        graph=header.get("graph"), inputs=_tensor_map(inputs, "inputs"), grad_outputs=_tensor_map(grads, "grad_outputs"),
        wrt=wrt, id=rid, tape=tape, retain_graph=params.get("retain_graph", False),
        binary_output=params.get("binary_data_output", False),
    )


def encode_result_parts(result: Result, binary: bool) -> tuple[list, int | None]:
    """([body pieces], header length or None) of a Result in JSON or binary form. Binary pieces
    are the JSON header then zero-copy views of the arrays: send them in order, or join them."""
    body = {"id": result.id} if result.id is not None else {}
    buffers = []
    encode = (lambda n, a: codec.encode_binary(n, a, buffers)) if binary else codec.encode_json
    body["outputs"] = [encode(name, backend.to_numpy(a)) for name, a in result.outputs.items()]
    if result.grads is not None:
        body["grads"] = [encode(name, backend.to_numpy(a)) for name, a in result.grads.items()]
    if result.tape is not None:
        body["tape"] = result.tape
    if binary:
        return codec.body_parts(body, buffers)
    return [codec.dumps(body)], None


def encode_result(result: Result, binary: bool) -> tuple[bytes, int | None]:
    """(body bytes, header length or None) of a Result in JSON or binary form."""
    parts, length = encode_result_parts(result, binary)
    return parts[0] if len(parts) == 1 else b"".join(parts), length


class TapeStore:
    """Retained executions by id, bounded by count, bytes and age (oldest evicted first)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._tapes: OrderedDict[str, tuple] = OrderedDict()
        self._freed: OrderedDict[str, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._tapes)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _expire(self, now):
        while self._tapes:
            tape_id, (_, expires, nbytes) = next(iter(self._tapes.items()))
            if expires > now and len(self._tapes) <= self.limits.max_tapes and self._bytes <= self.limits.max_tape_bytes:
                break
            self._tapes.popitem(last=False)
            self._bytes -= nbytes

    def put(self, execution: Execution) -> str:
        if execution.nbytes > self.limits.max_tape_bytes:
            raise RequestError(f"the graph's values take {execution.nbytes} bytes, over the tape limit of "
                               f"{self.limits.max_tape_bytes}", field="parameters.retain_graph", status=413)
        tape_id = uuid.uuid4().hex
        with self._lock:
            self._tapes[tape_id] = (execution, time.monotonic() + self.limits.tape_ttl_s, execution.nbytes)
            self._bytes += execution.nbytes
            self._expire(time.monotonic())
        return tape_id

    def take(self, tape_id: str) -> Execution:
        """Remove and return a tape (callers put it back when it is retained again)."""
        with self._lock:
            self._expire(time.monotonic())
            entry = self._tapes.pop(tape_id, None)
            if entry is None:
                if tape_id in self._freed:
                    raise TapeFreedError()
                raise RequestError(f"unknown or expired tape {tape_id!r}", field="tape", status=404)
            self._bytes -= entry[2]
        return entry[0]

    def mark_freed(self, tape_id: str):
        with self._lock:
            self._freed[tape_id] = None
            while len(self._freed) > 4 * self.limits.max_tapes:
                self._freed.popitem(last=False)

    def restore(self, tape_id: str, execution: Execution):
        with self._lock:
            self._tapes[tape_id] = (execution, time.monotonic() + self.limits.tape_ttl_s, execution.nbytes)
            self._bytes += execution.nbytes
            self._expire(time.monotonic())

    def sweep(self):
        """Drop expired tapes now (their memory is otherwise reclaimed at the next put or take)."""
        with self._lock:
            self._expire(time.monotonic())

    def clear(self):
        with self._lock:
            self._tapes.clear()
            self._bytes = 0


class PlanCache:
    """Validated, planned graphs keyed by their canonical JSON (sorted keys; LRU, bounded).

    The key is the text itself, not a digest of it: two graphs share a plan only when they are
    equal, and the key costs one serialisation (a few µs for a small graph)."""

    def __init__(self, size: int):
        self.size = size
        self._plans: OrderedDict[bytes, object] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._plans)

    def get(self, graph, limits: Limits):
        try:
            key = orjson.dumps(graph, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            key = None
        if key is not None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is not None:
                    self._plans.move_to_end(key)
                    self.hits += 1
                    return plan
        plan = parse(graph, limits.max_nodes, limits.max_depth)
        if key is not None and self.size > 0:
            with self._lock:
                self.misses += 1
                self._plans[key] = plan
                while len(self._plans) > self.size:
                    self._plans.popitem(last=False)
        return plan


class Executor:
    """Runs protocol requests on the engine: forward, backward, and tapes."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.plans = PlanCache(self.limits.plan_cache_size)
        self.tapes = TapeStore(self.limits)

    def _plan(self, request: Request):
        """(plan, Shapes) of a request's graph and inputs, within the limits; planned once per request."""
        if request.planned is None:
            request.planned = self._check_plan(request)
        return request.planned

    def _check_plan(self, request: Request):
        if request.graph is None:
            raise RequestError("'graph' is required (or 'tape' for a backward through a retained tape)", field="graph")
        plan = self.plans.get(request.graph, self.limits)
        shapes = check_request_inputs(plan, request.inputs)
        if shapes.largest > self.limits.max_tensor_elements or shapes.total > 4 * self.limits.max_total_elements:
            self._refuse(shapes)
        return plan, shapes

    def _refuse(self, shapes: Shapes):
        """Raise the 413 for a graph whose values `shapes` says would be over the limits."""
        big = self.limits.max_tensor_elements
        for node_id, meta in shapes.known.items():
            count = 0 if meta is None else math.prod(meta[0])
            if count > big:
                raise RequestError(f"node {node_id!r} would hold {count} elements (shape {list(meta[0])}), over the limit of {big}",
                                   node=node_id, status=413)
        raise RequestError(f"the graph's values would hold {shapes.total} elements, over the limit", field="graph", status=413)

    def is_light(self, request: Request, max_steps: int = 32, max_elements: int = 4096) -> bool:
        """Whether running `request` is certainly cheap: a graph (not a tape) of at most `max_steps`
        nodes (no function node), every value's shape known and `max_elements` elements in all.
        Plans the graph (cached), so an invalid one raises here as it would when run."""
        if request.tape is not None or request.graph is None:
            return False
        plan, shapes = self._plan(request)
        return len(plan.steps) <= max_steps and shapes.all_known and shapes.total <= max_elements

    def forward(self, request: Request) -> Result:
        if request.tape is not None or request.grad_outputs or request.wrt is not None:
            raise RequestError("/forward takes no tape, grad_outputs or wrt", field="tape" if request.tape else "grad_outputs")
        plan, _ = self._plan(request)
        execution = Execution(plan, request.inputs, record=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(request.id, execution.output_arrays(), tape=tape)

    def backward(self, request: Request) -> Result:
        if request.tape is not None:
            if request.graph is not None or request.inputs:
                raise RequestError("a backward through a tape takes no graph or inputs", field="tape")
            execution = self.tapes.take(request.tape)
            try:
                grads = execution.backward(request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
            except GraphError:
                self.tapes.restore(request.tape, execution)
                raise
            if request.retain_graph:
                self.tapes.restore(request.tape, execution)
            else:
                self.tapes.mark_freed(request.tape)
            return Result(request.id, execution.output_arrays(), grads, tape=request.tape if request.retain_graph else None)
        plan, _ = self._plan(request)
        execution = Execution(plan, request.inputs, record=True, wrt=request.wrt or ())
        grads = execution.backward(request.grad_outputs, request.wrt, retain_graph=request.retain_graph)
        tape = self.tapes.put(execution) if request.retain_graph else None
        return Result(request.id, execution.output_arrays(), grads, tape=tape)
