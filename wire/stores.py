"""What the executor keeps between requests: planned graphs and retained tapes.

`PlanCache` maps a `GraphKey` (the graph's text) to a `PlanEntry`, and a `PlanId` (told to clients)
to its key. What is kept per plan nests inside it and is charged to this cache's bytes: each
input signature's Shapes (`Plan.checked`, `keep_signature`) and the programs compiled for a
signature (`Shapes.programs`, `charge`, see `wire.compile`)."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import OrderedDict
from typing import NamedTuple, NewType

import orjson

from engine.api import shown
from wire.compile import program_bytes
from wire.errors import RequestError, TapeFreedError
from wire.graph import Plan, parse
from wire.infer import SIGNATURES_PER_PLAN
from wire.limits import Limits
from wire.program import Program
from wire.run import Execution


class TapeStore:
    """Retained executions by id, bounded by count, bytes and age (oldest evicted first).

    A tape's bytes are what its recorded graph holds (`Execution.nbytes`) plus, once per plan
    however many tapes share it, the plan it keeps alive (`plan_bytes`): counted in any case, cached
    or not, since the plan cache may drop a plan that tapes still hold. A tape taken by a backward
    is in use until it is put back (`restore`) or freed (`release`): still counted, never evicted,
    and a second backward through it is told it is in use (409), not that it expired."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._tapes: OrderedDict[str, tuple] = OrderedDict()  # id -> (execution, expires, own bytes)
        self._in_use: dict[str, tuple] = {}  # id -> (execution, own bytes)
        self._plans: dict[int, list] = {}  # id(plan) -> [its bytes, tapes holding it]
        self._freed: OrderedDict[str, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._tapes) + len(self._in_use)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _hold_plan(self, plan, nbytes: int):
        entry = self._plans.get(id(plan))
        if entry is None:
            self._plans[id(plan)] = [nbytes, 1]
            self._bytes += nbytes
        else:
            entry[1] += 1

    def _let_go(self, execution, own: int):
        self._bytes -= own
        entry = self._plans.get(id(execution.plan))
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                del self._plans[id(execution.plan)]
                self._bytes -= entry[0]

    def _expire(self, now):
        while self._tapes:
            tape_id, (execution, expires, nbytes) = next(iter(self._tapes.items()))
            if expires > now and len(self) <= self.limits.max_tapes and self._bytes <= self.limits.max_tape_bytes:
                break
            self._tapes.popitem(last=False)
            self._let_go(execution, nbytes)

    def put(self, execution: Execution) -> str:
        own = execution.nbytes
        plan = plan_bytes(execution.plan)
        if own + plan > self.limits.max_tape_bytes:
            raise RequestError(
                f"the graph's values and plan take {own + plan} bytes, over the tape limit of "
                f"{self.limits.max_tape_bytes}",
                field="parameters.retain_graph",
                kind="too_large",
            )
        tape_id = uuid.uuid4().hex
        with self._lock:
            self._hold_plan(execution.plan, plan)
            self._tapes[tape_id] = (execution, time.monotonic() + self.limits.tape_ttl_s, own)
            self._bytes += own
            self._expire(time.monotonic())
        return tape_id

    def take(self, tape_id: str) -> Execution:
        """A tape for one backward: in use until `restore`d (retained again) or `release`d."""
        with self._lock:
            self._expire(time.monotonic())
            entry = self._tapes.pop(tape_id, None)
            if entry is None:
                if tape_id in self._in_use:
                    raise RequestError(
                        f"tape {shown(tape_id)} is in use by another backward; retry once it has finished",
                        field="tape",
                        kind="conflict",
                    )
                if tape_id in self._freed:
                    raise TapeFreedError()
                raise RequestError(f"unknown or expired tape {shown(tape_id)}", field="tape", kind="not_found")
            self._in_use[tape_id] = (entry[0], entry[2])
        return entry[0]

    def restore(self, tape_id: str, execution: Execution):
        """Retain a taken tape again (a new time to live)."""
        with self._lock:
            entry = self._in_use.pop(tape_id, None)
            if entry is None:
                return
            self._tapes[tape_id] = (execution, time.monotonic() + self.limits.tape_ttl_s, entry[1])
            self._expire(time.monotonic())

    def release(self, tape_id: str, freed: bool = True):
        """Drop a taken tape; `freed`: a later backward through it is told so (409), else not found."""
        with self._lock:
            entry = self._in_use.pop(tape_id, None)
            if entry is not None:
                self._let_go(*entry)
            if freed:
                self._freed[tape_id] = None
                while len(self._freed) > 4 * self.limits.max_tapes:
                    self._freed.popitem(last=False)

    def drop(self, tape_id: str):
        """Drop a retained tape (whose answer will not be sent), wherever it is."""
        with self._lock:
            entry = self._tapes.pop(tape_id, None)
            if entry is not None:
                self._let_go(entry[0], entry[2])
        self.release(tape_id, freed=False)

    def sweep(self):
        """Drop expired tapes now (their memory is otherwise reclaimed at the next put or take)."""
        with self._lock:
            self._expire(time.monotonic())

    def clear(self):
        with self._lock:
            self._tapes.clear()
            self._in_use.clear()
            self._plans.clear()
            self._bytes = 0


GraphKey = NewType("GraphKey", bytes)  # a graph's JSON text, re-serialised with sorted keys: equal graphs, equal keys
PlanId = NewType("PlanId", str)  # a digest of a GraphKey (`plan_id`), told to clients to send instead of the graph


class PlanEntry(NamedTuple):
    """A cached plan and the bytes it is counted for (`plan_size`, plus what was charged to it since)."""

    plan: Plan
    nbytes: int


# What a parsed node holds, measured with tracemalloc on a 100,000-node chain of two-input ops
# (issue 24): its Step (~120 bytes with slots), inputs tuple (~56), liveness tuple (~57), id (~53) and
# entry in the steps list; its op and inputs are shared strings, equal attrs one shared dict.
PLAN_STEP_BYTES = 300
INPUT_BYTES = 8  # per input reference beyond the two the figure above holds
ATTR_BYTES = 160  # per attribute of an attrs dict of its own (not shared with an equal one)
FUNCTION_BYTES = 4096  # a function node's Function class (a type object and its namespace)


def plan_id(key: GraphKey) -> PlanId:
    """A cached plan's id: a digest of its graph's text, so equal graphs share it."""
    return PlanId(hashlib.blake2b(key, digest_size=16).hexdigest())


def _steps_bytes(steps, shared: set) -> int:
    """PLAN_STEP_BYTES per step with what its inputs, attrs and function add, and its constants' arrays."""
    total = PLAN_STEP_BYTES * len(steps)
    for step in steps:
        if len(step.inputs) > 2:
            total += INPUT_BYTES * (len(step.inputs) - 2)
        if step.attrs and id(step.attrs) not in shared:
            shared.add(id(step.attrs))
            total += ATTR_BYTES * len(step.attrs)
        if step.op == "constant":
            total += int(getattr(step.attrs["value"], "nbytes", 0))
        if step.subgraphs:
            total += FUNCTION_BYTES + sum(_steps_bytes(sub.steps, shared) for sub in step.subgraphs)
    return total


def signature_bytes(shapes) -> int:
    """What one input signature of a plan holds: its inferred shapes and costs, and the programs
    compiled for it (`wire.compile`)."""
    programs = list(shapes.programs.values())
    return shapes.nbytes + sum(program_bytes(p) for p in programs if isinstance(p, Program))


def plan_base_bytes(plan) -> int:
    """An estimate of what a parsed plan holds: its steps (subgraphs included) and its constants'
    arrays (not their JSON: zeros are 2 bytes of JSON and 8 of FP64)."""
    return _steps_bytes(plan.steps, set())


def plan_signatures_bytes(plan) -> int:
    """What the input signatures a plan keeps hold (`signature_bytes`, at most SIGNATURES_PER_PLAN)."""
    return sum(signature_bytes(s) for s in list(plan.checked.values()))


def plan_bytes(plan) -> int:
    """`plan_base_bytes` and `plan_signatures_bytes`: what a plan holds."""
    return plan_base_bytes(plan) + plan_signatures_bytes(plan)


def graph_key(graph) -> GraphKey:
    """The key a graph's plan is cached under (TypeError or orjson.JSONEncodeError for what is no JSON)."""
    return GraphKey(orjson.dumps(graph, option=orjson.OPT_SORT_KEYS))


def plan_size(plan, key: GraphKey) -> int:
    """What a cached plan holds: its key (the graph's JSON) and `plan_bytes`."""
    return len(key) + plan_bytes(plan)


class PlanCache:
    """Validated, planned graphs by `GraphKey`, their JSON text (LRU), bounded by count and by bytes (an
    estimate, `plan_size`, plus what each input signature keeps: its inferred shapes and costs,
    see `keep_signature`, and its compiled programs, see `charge`). A graph is parsed by
    `lookup` and kept only when the executor `store`s it, after its request was admitted: a
    refused graph is never kept.

    The key is the text itself, not a digest of it: two graphs share a plan only when they are
    equal. It is the graph re-serialised with sorted keys, so the same graph in another key
    order shares its plan (sorting costs ~1.4x: 7.5 µs against 5.4 µs for a 100-node graph,
    1.1 µs against 0.8 µs for the seed net's)."""

    def __init__(self, size: int, max_bytes: int = 64 * 2**20):
        self.size = size
        self.max_bytes = max_bytes
        self._plans: OrderedDict[GraphKey, PlanEntry] = OrderedDict()
        self._keys: dict[int, GraphKey] = {}  # id(plan) -> its key, for `charge`
        self._ids: dict[PlanId, GraphKey] = {}
        self._plan_ids: dict[int, PlanId] = {}  # id(plan) -> its plan id
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._plans)

    def lookup(self, graph, limits: Limits):
        """(plan, key): the cached plan (key None), or a freshly parsed one and the key to `store` it under."""
        try:
            key = graph_key(graph)
        except (TypeError, orjson.JSONEncodeError):
            key = None
        if key is not None:
            with self._lock:
                entry = self._plans.get(key)
                if entry is not None:
                    self._plans.move_to_end(key)
                    self.hits += 1
                    return entry.plan, None
        plan = parse(graph, limits.max_nodes, limits.max_depth)
        with self._lock:
            self.misses += 1
        return plan, key

    def by_id(self, pid: PlanId):
        """The cached plan whose id is `pid`, or None."""
        with self._lock:
            key = self._ids.get(pid)
            entry = None if key is None else self._plans.get(key)
            if entry is None:
                return None
            self._plans.move_to_end(key)
            self.hits += 1
            return entry.plan

    def id_of(self, plan) -> PlanId | None:
        """The id under which a cached plan can be asked for again (`by_id`); None when not cached."""
        return self._plan_ids.get(id(plan))

    def hold(self, graph, limits: Limits) -> tuple:
        """(plan, key) of a graph its caller admits as it is and keeps (a registered model): looked
        up, parsed when new, and cached; the key stores it again (`store`) if it is dropped."""
        plan, key = self.lookup(graph, limits)
        if key is None:
            key = graph_key(graph)
        self.store(key, plan)
        return plan, key

    def store(self, key: GraphKey | None, plan):
        if key is None or self.size <= 0:
            return
        with self._lock:
            if key in self._plans:
                return
        key = GraphKey(bytes(memoryview(key)))  # orjson's bytes hold ~4x their length (tracemalloc): kept, a copy
        nbytes = plan_size(plan, key)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            if key in self._plans:
                return
            self._plans[key] = PlanEntry(plan, nbytes)
            self._keys[id(plan)] = key
            self._plan_ids[id(plan)] = pid = plan_id(key)
            self._ids[pid] = key
            self.nbytes += nbytes
            self._evict()

    def hit(self, plan) -> bool:
        """Whether `plan` is still cached; when it is, counted and kept as a `lookup` that found it."""
        with self._lock:
            key = self._keys.get(id(plan))
            entry = self._plans.get(key)  # (None when key is: never a key of the cache's)
            if entry is None or entry.plan is not plan:
                return False
            self._plans.move_to_end(key)
            self.hits += 1
            return True

    def keep_signature(self, plan, signature, shapes) -> None:
        """Keep a cached plan's `shapes` for an input signature (`wire.infer.check_request_inputs`),
        charged to the cache (`signature_bytes`): not when the plan is no longer cached or it
        would not fit, nor past SIGNATURES_PER_PLAN."""
        nbytes = signature_bytes(shapes)
        with self._lock:
            if len(plan.checked) >= SIGNATURES_PER_PLAN or signature in plan.checked:
                return
            if self._charge(plan, nbytes):
                plan.checked[signature] = shapes

    def charge(self, plan, nbytes: int) -> bool:
        """Count `nbytes` more against a cached plan (what is compiled for it, see wire.compile):
        False, and nothing counted, when the plan is not cached or would not fit."""
        with self._lock:
            return self._charge(plan, nbytes)

    def _charge(self, plan, nbytes: int) -> bool:
        key = self._keys.get(id(plan))
        entry = None if key is None else self._plans.get(key)
        if entry is None or entry.plan is not plan or entry.nbytes + nbytes > self.max_bytes:
            return False
        self._plans[key] = PlanEntry(plan, entry.nbytes + nbytes)
        self._plans.move_to_end(key)
        self.nbytes += nbytes
        self._evict()
        return True

    def _evict(self):
        while len(self._plans) > self.size or self.nbytes > self.max_bytes:
            _, (dropped_plan, dropped) = self._plans.popitem(last=False)
            self._keys.pop(id(dropped_plan), None)
            self._ids.pop(self._plan_ids.pop(id(dropped_plan), None), None)
            self.nbytes -= dropped
