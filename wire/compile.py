"""Cached plans run as recordings of the engine's own runs, once per (plan, input signature,
request shape: forward or backward, wrt, which outputs come with a gradient).

The first request of a request shape runs on the engine, unrecorded: recording would add ~30% to
a new 1,000-node graph's first request, which a graph sent once never repays. The second runs on
the engine under `engine.recording.recording()`: the engine computes its answer, and what it did
at the array level (the forward's ops, the backward walk's vjps, gradient sums and unbroadcast
reductions) becomes the `Program` (`wire.program`). The third request runs the program and the
engine both and compares their answers bit for bit; only a program that matched is trusted. From
then on the program answers: interpreted, then by its generated function once `wire.codegen`'s
background generator has compiled it. There is no second backward walk: the engine's is the only
one.

What is not recorded runs on the engine: grad and function nodes, plans whose shapes depend on
values (boolean masks), recordings that something escaped (`Recording.spoiled`), programs that
did not match the engine. A program that fails as it runs is logged with its traceback (once:
it is dropped), counted (`FAILURES`), and the request runs on the engine. `RUNS` counts the
requests that reached `run_compiled` by what answered them.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections import Counter

import numpy

from engine import backend
from engine.api import recording
from wire.codegen import GENERATOR, MAX_TERMS, source_of
from wire.differentiate import gradients
from wire.errors import GraphError
from wire.graph import ProgramKey
from wire.program import ForTheEngine, NotRecorded, program_of
from wire.run import Execution

log = logging.getLogger("gradserve.compile")


class Fallback(Exception):
    """Why a plan's request shape runs on the engine rather than as a program."""


SEEN = "seen once"  # a request shape's programs entry after its first request (run unrecorded)


UNCOMPILED = {
    "function": "function node",
    "grad": "grad node",
    "arg": "subgraph",
    "grad_output": "subgraph",
    "forward_value": "subgraph",
}
PROGRAMS_PER_SIGNATURE = 16  # request shapes (forward, backward per wrt and seeded outputs) recorded per signature
# Plans recorded at most (the default max_nodes): the engine runs a node at ~6 µs with its backward and
# leaves ~5 tracked objects per node to the cyclic GC, a program ~1-2 µs a step and none (issue 24)
MAX_STEPS = 100_000
TERM_BYTES = 600  # a program with its generated code, per Program.terms (tracemalloc: ~1.5 kB a two-input
# step with its vjp, ~0.5 kB per further input of a wide one)
RUNS: Counter = Counter()  # requests that reached run_compiled, by what answered them
FAILURES: Counter = Counter()  # programs that failed as they ran, by executor ("interpreted", "compiled")
_counts = threading.Lock()
_numbers = itertools.count(1)
PLAIN_KEYS = {d: ProgramKey(d, None, frozenset()) for d in (False, True)}  # no wrt, no grad_outputs


def _count(ran: str) -> str:
    with _counts:
        RUNS[ran] += 1
    return ran


def program_bytes(program) -> int:
    """What a program is charged to the plan cache: with its generated code, or interpreted only
    (over codegen.MAX_TERMS: what its compact steps hold, `Program.nbytes`)."""
    terms = program.terms
    return TERM_BYTES * terms if terms <= MAX_TERMS else program.nbytes


def _slimmed(program):
    """A program that stays interpreted (over codegen.MAX_TERMS) without what only its generated
    source shows: the node each step computes."""
    return program.slim() if program.terms > MAX_TERMS else program


def _kept(plan, shapes) -> bool:
    return any(kept is shapes for kept in list(plan.checked.values()))


def _unrecorded(plan, shapes) -> str | None:
    """Why `plan` is not recorded for inputs of `shapes` (None when it is)."""
    if shapes.all_known and plan.noted.isdisjoint(UNCOMPILED):
        return None
    for step in plan.steps:
        if step.op in UNCOMPILED:
            return UNCOMPILED[step.op]
        if shapes.known.get(step.id) is None:
            return f"node {step.id!r}: its shape depends on values"
    return None


def _engine(plan, request, differentiate: bool):
    """(outputs, grads or None) of the engine's run of `request` (within a recording, its steps are kept)."""
    execution = Execution(plan, request.inputs, record=differentiate, wrt=request.wrt or ())
    grads = gradients(execution, request.grad_outputs, request.wrt) if differentiate else None
    return execution.output_arrays(), grads


def record(plan, request, differentiate: bool):
    """(outputs, grads or None, Program or Fallback): the engine's run of `request`, recorded."""
    with recording() as made:
        outputs, grads = _engine(plan, request, differentiate)
    try:
        program = program_of(made, outputs, grads)
    except NotRecorded as why:
        program = Fallback(f"not recorded: {why}")
    return outputs, grads, program


def _digests(outputs: dict, grads: dict | None) -> dict:
    """{(kind, name): (shape, dtype, digest of the bytes)} of an answer: what the verification compares,
    so that it holds one answer's arrays at a time, not two."""
    out = {}
    for kind, arrays in (("output", outputs), ("gradient", grads or {})):
        for name, array in arrays.items():
            host = numpy.ascontiguousarray(backend.to_numpy(array))
            out[kind, name] = (host.shape, host.dtype, hashlib.blake2b(memoryview(host).cast("B")).digest())
    return out


def _failed(program, filename, executor: str, why: BaseException) -> Fallback:
    with _counts:
        FAILURES[executor] += 1
    log.error(
        "the %s program %s failed (%s: %s): dropped, its requests run on the engine",
        executor,
        filename,
        type(why).__name__,
        why,
        exc_info=why,
    )
    return Fallback(f"failed as it ran: {type(why).__name__}: {why}")


def run_compiled(plan, shapes, request, differentiate: bool, charge, plan_id: str = "?"):
    """(outputs, grads or None, what ran: "engine", "interpreted" or "compiled") of `request`, or
    None where the executor must run it on the engine (not recorded, or this request's error is
    the engine's to report). Programs live in `shapes.programs`, kept as long as the plan's
    signature is; `charge(plan, nbytes)` counts each against the plan cache's bytes
    (`PlanCache.charge`) and refuses it when the plan is not cached or the program would not fit."""
    if len(plan.steps) > MAX_STEPS:
        _count("engine")
        return None
    wrt, seeded = request.wrt, request.grad_outputs  # the usual key (no wrt, no seeds): made once, ~2k instructions
    key = PLAIN_KEYS[differentiate] if wrt is None and not seeded else None
    key = key or ProgramKey(differentiate, None if wrt is None else tuple(wrt), frozenset(seeded))
    program = shapes.programs.get(key)
    if program is None:
        if len(shapes.programs) >= PROGRAMS_PER_SIGNATURE or not _kept(plan, shapes) or not charge(plan, 0):
            _count("engine")
            return None  # recorded only for a signature the cached plan keeps: else it would be per request
        why = _unrecorded(plan, shapes)
        shapes.programs[key] = SEEN if why is None else Fallback(why)
        _count("engine")
        return None  # the first request: the engine answers, unrecorded (a graph sent once is never recorded)
    if program is SEEN:
        outputs, grads, program = record(plan, request, differentiate)
        if isinstance(program, Fallback):  # something escaped the recording: an op to fix, so say so
            log.warning("plan %s: %s; its requests run on the engine", plan_id, program)
        else:
            program.filename = f"<gradserve plan {plan_id} program {next(_numbers)}>"
            if not charge(plan, program_bytes(_slimmed(program))):
                program = Fallback("the program would not fit in the plan cache's bytes")
        shapes.programs[key] = program
        return outputs, grads, _count("engine")
    if isinstance(program, Fallback):
        _count("engine")
        return None
    if not program.verified:
        return _verify(program, shapes, key, plan, request, differentiate)
    ran = "compiled" if program.generated is not None else "interpreted"
    try:
        outputs, grads = program.run(request.inputs, request.grad_outputs)
    except GraphError:
        raise  # cancelled
    except ForTheEngine:
        _count("engine")
        return None
    except Exception as err:  # noqa: BLE001 - logged and counted; the engine answers
        shapes.programs[key] = _failed(program, program.filename, ran, err)
        _count("engine")
        return None
    return outputs, grads, _count(ran)


def _verify(program, shapes, key, plan, request, differentiate):
    """The third request of a request shape: the program and then the engine run it, and the
    program is trusted (and queued for code generation) only if every answer matched bit for bit.
    The engine's answer is returned."""
    try:
        got = _digests(*program.interpret(request.inputs, request.grad_outputs))
    except GraphError:
        raise
    except ForTheEngine:
        _count("engine")
        return None
    except Exception as err:  # noqa: BLE001 - logged and counted; the engine answers
        shapes.programs[key] = _failed(program, program.filename, "interpreted", err)
        _count("engine")
        return None
    outputs, grads = _engine(plan, request, differentiate)
    expected = _digests(outputs, grads)
    differs = next((k for k in expected if got.get(k) != expected[k]), None) or (set(got) != set(expected) or None)
    if differs is not None:
        log.warning("the program %s differs from the engine at %s: dropped", program.filename, differs)
        shapes.programs[key] = Fallback(f"differed from the engine at {differs}")
    else:
        program.verified = True
        GENERATOR.submit(program, program.filename)
    return outputs, grads, _count("engine")


def program_source(plan, shapes, request, differentiate: bool) -> str:
    """The generated source of `request`'s program (for `gradserve plan show`); Fallback when it is
    not recorded."""
    why = _unrecorded(plan, shapes)
    if why is not None:
        raise Fallback(why)
    _, _, program = record(plan, request, differentiate)
    if isinstance(program, Fallback):
        raise program
    return source_of(program)[0]
