"""A recorded run of the engine (`engine.recording`) as a program: the array-level steps the
engine took for one (plan, input signature, request shape), with the steps nothing read removed
and every register freed after its last reader. Running it on other inputs of the signature
recomputes what the engine would, bit for bit (`wire.compile` checks that on the second request
before trusting it), touching no Variable or Node and parsing nothing. It runs interpreted
(`Program.interpret`) until its generated function (`wire.codegen`) is ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy

from engine import backend
from engine.api import array_like
from wire.run import cancelled, current_cancel


class NotRecorded(Exception):
    """Why a recording cannot be replayed (the engine keeps running the request shape)."""


class ForTheEngine(Exception):
    """This request (not the program) is one the engine must run: it reports the request's error."""


@dataclass(eq=False)
class Program:
    steps: tuple  # engine.recording.Step, in the order the engine took them
    drops: tuple  # per step: the registers it was the last reader of
    inputs: tuple  # (input name, register)
    seeds: tuple  # (output name, register, shape, dtype): the given grad_outputs
    constants: tuple  # (register, array)
    outputs: tuple  # (output name, register)
    grads: tuple | None  # (wrt name, register); None for a forward
    labels: tuple  # per register: what made it (an op's name, "input", "constant", "grad")
    registers: int
    verified: bool = False  # checked against the engine on a request of its own
    generated: object = None  # the generated function (wire.codegen), once ready
    source: str | None = None  # its source, once generated (also in `linecache` under `filename`)
    filename: str = "<gradserve program>"

    def __repr__(self):
        state = "generated" if self.generated is not None else "verified" if self.verified else "recorded"
        return f"<Program {self.filename} of {len(self.steps)} steps, {state}>"

    @cached_property
    def terms(self) -> int:
        """The program's size in what generating and keeping it costs: one per step and one per
        register it reads or frees, so fan-in counts (a `cat` of 100,000 inputs is 100,000 terms)."""
        return sum(1 + len(s.ins) for s in self.steps) + sum(map(len, self.drops)) + len(self.outputs) + 1

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
        for reg, array in self.constants:
            regs[reg] = array
        return regs

    def interpret(self, tensors: dict, grad_outputs: dict | None = None):
        regs = self.load(tensors, grad_outputs or {})
        cancel = current_cancel()
        xp = backend.xp
        nd = numpy.ndarray
        for step, drops in zip(self.steps, self.drops):
            if cancel is not None and cancel.is_set():
                raise cancelled()
            args = [regs[i] for i in step.ins]
            out = step.fn(xp, *args, **step.attrs) if step.xp else step.fn(*args)
            regs[step.out] = out if type(out) is nd else array_like(out, args[0])
            for d in drops:
                regs[d] = None
        outputs = {name: regs[reg] for name, reg in self.outputs}
        if self.grads is None:
            return outputs, None
        return outputs, {name: regs[reg] for name, reg in self.grads}


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
    attrs: dict = {}  # equal attributes shared: a backward's vjps get a dict of their own per call
    for step in steps:
        if step.attrs is not None:
            try:
                step.attrs = attrs.setdefault(tuple([(k, v.__class__, v) for k, v in step.attrs.items()]), step.attrs)
            except TypeError:  # an unhashable value: kept as it is
                pass
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
        steps=tuple(steps),
        drops=tuple([tuple(d) if d else () for d in drops]),
        inputs=tuple(inputs),
        seeds=tuple(seeds),
        constants=tuple((reg, array) for reg, array in recording.constants if reg in live),
        outputs=out_regs,
        grads=grad_regs,
        labels=tuple(labels),
        registers=len(labels),
    )
