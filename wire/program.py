"""A recorded run of the engine (`engine.recording`) as a program: the array-level steps the
engine took for one (plan, input signature, request shape), with the steps nothing read removed
and every register freed after its last reader. Running it on other inputs of the signature
recomputes what the engine would, bit for bit (`wire.compile` checks that on the request after
the recorded one before trusting it), touching no Variable or Node and parsing nothing. It runs interpreted
(`Program.interpret`) until its generated function (`wire.codegen`) is ready.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from functools import cached_property, partial
from typing import NamedTuple

import numpy

from engine import backend
from engine.api import array_like
from wire.run import cancelled, current_cancel


class NotRecorded(Exception):
    """Why a recording cannot be replayed (the engine keeps running the request shape)."""


class ForTheEngine(Exception):
    """This request (not the program) is one the engine must run: it reports the request's error."""


class Step(NamedTuple):
    """One step as code generation reads it: `registers[out] = fn(xp, *registers[ins], **attrs)`."""

    name: str
    fn: object
    ins: tuple
    attrs: dict | None
    out: int
    xp: bool
    where: str
    scalar: bool


@dataclass(eq=False)
class Program:
    """The steps in compact form, so that a 100,000-node plan's program fits the plan cache: each
    distinct (what made it, fn, attrs, xp, scalar) once in `kinds`, and per step a few int32s."""

    kinds: tuple  # distinct (name, fn, attrs, xp, scalar) of the steps (see `Step`)
    kind: array  # per step: its index in kinds
    out: array  # per step: the register it writes
    arity: array  # per step: how many registers it reads, from `ins` in turn
    ins: array  # the registers the steps read, one after the other
    nfree: array  # per step: how many registers it was the last reader of, from `frees` in turn
    frees: array
    inputs: tuple  # (input name, register)
    seeds: tuple  # (output name, register, shape, dtype): the given grad_outputs
    constants: tuple  # (register, array)
    outputs: tuple  # (output name, register)
    grads: tuple | None  # (wrt name, register); None for a forward
    labels: tuple  # per register: what made it (an op's name, "input", "constant", "grad")
    registers: int
    wheres: tuple = ()  # (first step, the node it computes) where that changes: generated comments only
    verified: bool = False  # checked against the engine on a request of its own
    generated: object = None  # the generated function (wire.codegen), once ready
    source: str | None = None  # its source, once generated (also in `linecache` under `filename`)
    filename: str = "<gradserve program>"

    def __repr__(self):
        state = "generated" if self.generated is not None else "verified" if self.verified else "recorded"
        return f"<Program {self.filename} of {len(self.kind)} steps, {state}>"

    @cached_property
    def terms(self) -> int:
        """The program's size in what generating and keeping it costs: one per step and one per
        register it reads or frees, so fan-in counts (a `cat` of 100,000 inputs is 100,000 terms)."""
        return len(self.kind) + len(self.ins) + len(self.frees) + len(self.outputs) + 1

    @property
    def nbytes(self) -> int:
        """What it holds, measured: its arrays and tuples (the kinds' functions and attrs counted
        at KIND_BYTES each; constants are the plan's)."""
        held = sum(a.__sizeof__() for a in (self.kind, self.out, self.arity, self.ins, self.nfree, self.frees))
        held += sys.getsizeof(self.labels)
        held += sum(sys.getsizeof(t) for t in (self.inputs, self.outputs, self.grads or (), self.wheres))
        return PROGRAM_BYTES + held + KIND_BYTES * len(self.kinds) + WHERE_BYTES * len(self.wheres)

    def steps(self) -> list:
        """The steps as `Step`s, with per step the registers it frees (for code generation)."""
        ins, frees, wheres, where = iter(self.ins), iter(self.frees), dict(self.wheres), ""
        out = []
        for index, (kind, reg, n, f) in enumerate(zip(self.kind, self.out, self.arity, self.nfree)):
            name, fn, attrs, xp, scalar = self.kinds[kind]
            where = wheres.get(index, where)
            reads = tuple([next(ins) for _ in range(n)])
            out.append((Step(name, fn, reads, attrs, reg, xp, where, scalar), tuple([next(frees) for _ in range(f)])))
        return out

    def run(self, tensors: dict, grad_outputs: dict | None = None):
        """(outputs, grads or None) as arrays, by the generated function once there is one."""
        generated = self.generated
        if generated is not None:
            return generated(tensors, grad_outputs or {}, current_cancel(), backend.xp)
        return self.interpret(tensors, grad_outputs)

    def load(self, tensors: dict, grad_outputs: dict) -> list:
        """The register file with the inputs, the given output gradients and the constants in place."""
        regs = [None] * self.registers
        to_active = backend.to_active
        for name, reg in self.inputs:
            regs[reg] = to_active(tensors[name])
        for name, reg, shape, dtype in self.seeds:
            seed = grad_outputs.get(name)
            if seed is None or tuple(seed.shape) != shape:
                raise ForTheEngine(f"grad_outputs {name!r} is missing or has another shape")
            regs[reg] = to_active(seed).astype(dtype, copy=False)
        for reg, value in self.constants:
            regs[reg] = value
        return regs

    def interpret(self, tensors: dict, grad_outputs: dict | None = None):
        regs = self.load(tensors, grad_outputs or {})
        cancel = current_cancel()
        xp = backend.xp
        nd = numpy.ndarray
        calls = [partial(fn, xp, **attrs) if takes_xp else fn for _, fn, attrs, takes_xp, _ in self.kinds]
        read, free = iter(self.ins).__next__, iter(self.frees).__next__
        for index, (kind, reg, n, f) in enumerate(zip(self.kind, self.out, self.arity, self.nfree)):
            if not index & CHECK_MASK and cancel is not None and cancel.is_set():
                raise cancelled()
            if n == 2:
                first = regs[read()]
                out = calls[kind](first, regs[read()])
            elif n == 1:
                first = regs[read()]
                out = calls[kind](first)
            else:
                args = [regs[read()] for _ in range(n)]
                first = args[0] if args else None
                out = calls[kind](*args)
            regs[reg] = out if type(out) is nd else array_like(out, first)
            while f:
                regs[free()] = None
                f -= 1
        outputs = {name: regs[reg] for name, reg in self.outputs}
        if self.grads is None:
            return outputs, None
        return outputs, {name: regs[reg] for name, reg in self.grads}

    def slim(self):
        """Without what only generated source shows (the node each step computes): for a program
        that stays interpreted."""
        self.wheres = ()
        return self


CHECK_MASK = 63  # the cancel event is checked every 64 steps
PROGRAM_BYTES = 2048  # the Program object, its attribute dict and its small tuples (tracemalloc: ~1 kB)
KIND_BYTES = 400  # a kind's tuple with its share of an attrs dict (a vjp's own closure is the engine's)
WHERE_BYTES = 120  # a (step, node text) pair of `wheres`


def program_of(recording, outputs: dict, grads: dict | None) -> Program:
    """The Program of a recorded run whose answer was `outputs` (and `grads`, None for a forward):
    NotRecorded when the recording is spoiled or an answer is an array no step made."""
    if recording.spoiled is not None:
        raise NotRecorded(recording.spoiled)

    def register_of(kind, name, array):
        reg = recording.register(array)
        if reg is None:
            raise NotRecorded(f"{kind} {name!r} is an array that no recorded step made")
        return reg

    out_regs = tuple((name, register_of("output", name, a)) for name, a in outputs.items())
    grad_regs = None if grads is None else tuple((name, register_of("gradient", name, a)) for name, a in grads.items())
    keep = {reg for _, reg in out_regs} | {reg for _, reg in grad_regs or ()}
    steps, live = [], set(keep)
    for step in reversed(recording.steps):  # registers are written once: a step nothing reads is dropped
        if step.out in live:
            steps.append(step)
            live.update(step.ins)
    steps.reverse()
    last = {}
    for index, step in enumerate(steps):
        for reg in step.ins:
            last[reg] = index
    drops = [[] for _ in steps]
    for reg, index in last.items():
        if reg not in keep:
            drops[index].append(reg)
    kinds: dict = {}  # equal (name, fn, attrs, xp, scalar) shared: a backward's vjps get a dict of their own per call
    kind_of, outs, arity, ins, nfree, frees = (array("i") for _ in range(6))
    wheres, where = [], None
    by_identity: dict = {}  # (name, fn, id(attrs), xp, scalar) -> its kind: the content key built once per attrs dict
    for index, step in enumerate(steps):
        attrs = step.attrs
        ident = (step.name, step.fn, id(attrs), step.xp, step.scalar)
        kind = by_identity.get(ident)
        if kind is None:
            try:
                key = (
                    step.name,
                    step.fn,
                    None if attrs is None else tuple([(k, v.__class__, v) for k, v in attrs.items()]),
                )
                hash(key)
            except TypeError:  # an unhashable value: a kind of its own
                key = (step.name, step.fn, id(attrs))
            kind = kinds.setdefault(
                (*key, step.xp, step.scalar), (len(kinds), (step.name, step.fn, attrs, step.xp, step.scalar))
            )
            by_identity[ident] = kind
        kind_of.append(kind[0])
        outs.append(step.out)
        arity.append(len(step.ins))
        ins.extend(step.ins)
        nfree.append(len(drops[index]))
        frees.extend(drops[index])
        if step.where != where:
            where = step.where
            wheres.append((index, where))
    labels = list(recording.labels)
    for _, reg in grad_regs or ():
        if labels[reg] not in ("input", "constant"):
            labels[reg] = "grad"
    inputs, seeds = [], []
    for name, reg in recording.inputs.items():
        if isinstance(name, tuple):  # ("grad_outputs", output name): a given gradient of an output
            seeds.append((name[1], reg, tuple(outputs[name[1]].shape), outputs[name[1]].dtype))
        elif reg in live:
            inputs.append((name, reg))
    return Program(
        kinds=tuple([made for _, made in kinds.values()]),
        kind=kind_of,
        out=outs,
        arity=arity,
        ins=ins,
        nfree=nfree,
        frees=frees,
        wheres=tuple(wheres),
        inputs=tuple(inputs),
        seeds=tuple(seeds),
        constants=tuple((reg, array) for reg, array in recording.constants if reg in live),
        outputs=out_regs,
        grads=grad_regs,
        labels=tuple(labels),
        registers=len(labels),
    )
