"""A compiled plan's runtime: straight-line array code over a register file (see `wire.compile`).

A `Program` holds, for one (plan, input signature, request shape), the forward instructions and
the backward instructions that the engine's walk would run for the requested `wrt`, in the order
it would run them, with every register freed after its last reader. Running it touches no Node and
parses nothing; vjps are the registry's own, called under no_grad on Variables that wrap the
arrays (as the engine's backward calls them), so results are the engine's, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy

from engine import backend
from engine.grad_mode import state as grad_state
from engine.node import Meta
from engine.variable import Variable
from wire.run import cancelled, current_cancel

_result = Variable._result
_ndarray = numpy.ndarray


class Mismatch(Exception):
    """A compiled program met something it was not compiled for: it is dropped, the engine runs."""


class ForTheEngine(Exception):
    """This request (not the program) is one the engine must run: it reports the request's error."""


@dataclass(eq=False, slots=True)
class Forward:
    """`regs[out] = forward(xp, *regs[ins], **attrs)`, then `regs[d] = None` for d in drops."""

    step_id: str
    forward: object
    ins: tuple
    attrs: dict
    out: int
    drops: tuple
    shape: tuple
    dtype: object
    composite: object = None  # an OpDef whose forward takes Variables (run without recording)


@dataclass(eq=False, slots=True)
class Vjp:
    """One node of the backward walk: optional capture of its gradient, then its vjps."""

    op: object
    attrs: dict
    grad: int  # register of the node's accumulated output gradient
    ans: int | None  # register of its output (ops whose vjps read it)
    saved: tuple  # per input: a register, or a Meta (shape and dtype only)
    needs: tuple  # per input: whether its gradient is wanted
    dests: tuple  # per input: (register to accumulate into, shape, dtype) or None
    capture: int | None  # register of a wrt target's gradient to add this node's gradient to
    drops: tuple
    on_arrays: tuple | None = None  # its vjps are array operators only, called on the arrays themselves:
    # per input, the (shape, dtype) of the gradient they give (wire.probe)


@dataclass(eq=False)
class Program:
    registers: int
    inputs: tuple  # (name, register)
    constants: tuple  # (register, array)
    forward: list
    outputs: tuple  # (name, register)
    seeds: tuple = ()  # (output name, register, shape, dtype): gradient seeds of the outputs
    backward: list = field(default_factory=list)
    grads: tuple = ()  # (wrt name, gradient register, target value register)
    roots: tuple = ()  # (register of a seed, register to accumulate it into)
    verified: bool = False  # the first run checks every value's shape and dtype against the compile
    generated: object = None  # once verified: the same program as one function (wire.codegen), if generated

    @property
    def terms(self) -> int:
        """The program's size in what generating and keeping it costs: one per instruction and one per
        register it reads or writes, so fan-in counts (a `cat` of 100,000 inputs is 100,000 terms: as
        many arguments in its generated call and as many gradients in its vjp), not one per step."""
        forward = sum(1 + len(ins.ins) + len(ins.drops) for ins in self.forward)
        backward = sum(1 + len(ins.saved) + len(ins.dests) + len(ins.drops) for ins in self.backward)
        return forward + backward + len(self.inputs) + len(self.outputs) + len(self.grads)

    def run(self, tensors: dict, grad_outputs: dict | None = None):
        """(outputs, grads or None) as arrays; Mismatch when the run leaves what was compiled."""
        if self.generated:
            return self.generated(tensors, grad_outputs or {}, current_cancel(), backend.xp)
        regs = [None] * self.registers
        to_active = backend.to_active
        for name, reg in self.inputs:
            regs[reg] = to_active(tensors[name])
        for reg, array in self.constants:
            regs[reg] = array
        self._forward(regs)
        outputs = {name: regs[reg] for name, reg in self.outputs}
        if not self.seeds and not self.grads:
            self.verified = True
            return outputs, None
        self._seed(regs, grad_outputs or {})
        previous = grad_state.enabled
        grad_state.enabled = False
        try:
            self._backward(regs)
        finally:
            grad_state.enabled = previous
        grads = {}
        for name, reg, target in self.grads:
            g = regs[reg]
            grads[name] = g if g is not None else backend.array_module(regs[target]).zeros_like(regs[target])
        self.verified = True
        return outputs, grads

    def _forward(self, regs):
        cancel = current_cancel()
        check = not self.verified
        xp = numpy if backend.xp is numpy else backend.xp
        for ins in self.forward:
            if cancel is not None and cancel.is_set():
                raise cancelled(ins.step_id)
            args = [regs[i] for i in ins.ins]
            if ins.composite is None:
                out = ins.forward(xp, *args, **ins.attrs)
                if type(out) is not _ndarray:
                    out = _as_array(out, xp)
            else:
                out = ins.composite.call([_result(a, None) for a in args], ins.attrs)._data
            if check and (tuple(out.shape) != ins.shape or out.dtype != ins.dtype):
                raise Mismatch(f"node {ins.step_id!r}: {out.shape} {out.dtype}, compiled for {ins.shape} {ins.dtype}")
            regs[ins.out] = out
            for d in ins.drops:
                regs[d] = None

    def _seed(self, regs, grad_outputs):
        for name, reg, shape, dtype in self.seeds:
            seed = grad_outputs.get(name)
            if seed is None:
                regs[reg] = backend.xp.ones(shape, dtype)
                continue
            if tuple(seed.shape) != shape:
                raise ForTheEngine(f"grad_outputs {name!r} has another shape")
            regs[reg] = backend.to_active(seed).astype(dtype, copy=False)
        for src, dst in self.roots:
            regs[dst] = regs[src] if regs[dst] is None else _add(regs[dst], regs[src])

    def _backward(self, regs):
        cancel = current_cancel()
        for ins in self.backward:
            if cancel is not None and cancel.is_set():
                raise cancelled()
            g = regs[ins.grad]
            regs[ins.grad] = None
            if ins.capture is not None:
                held = regs[ins.capture]
                regs[ins.capture] = g if held is None else _add(held, g)
            if ins.dests:
                _vjp(ins, regs, g)
            for d in ins.drops:
                regs[d] = None


def _vjp(ins, regs, g):
    ans = None if ins.ans is None else regs[ins.ans]
    saved = [regs[s] if type(s) is int else s for s in ins.saved]
    if ins.on_arrays:
        attrs = ins.attrs
        results = [fn(g, ans, *saved, **attrs) if need else None for fn, need in zip(ins.op.vjps, ins.needs)]
    else:
        results = _vjp_results(ins, g, ans, saved)
    for dest, data in zip(ins.dests, results):
        if dest is None:
            continue
        reg, shape, dtype, fit = dest
        if type(data) is not _ndarray:
            data = _as_array(data, backend.xp)
        if data.shape != shape or data.dtype != dtype:
            data = fit(data, shape, dtype)
        if reg is not None:
            held = regs[reg]
            regs[reg] = data if held is None else _add(held, data)


def _vjp_results(ins, g, ans, saved):
    """The node's wanted input gradients (arrays, not yet fitted), its vjps called on Variables as
    the engine's backward calls them (grad mode off)."""
    op = ins.op
    gv = _result(g, None)
    ans = None if ans is None else _result(ans, None)
    saved = [s if s is None or type(s) is Meta else _result(s, None) for s in saved]
    if op.vjp is not None:
        results = op.vjp(gv, ans, saved, list(ins.needs), **ins.attrs)
    else:
        attrs = ins.attrs
        results = [fn(gv, ans, *saved, **attrs) if need else None for fn, need in zip(op.vjps, ins.needs)]
    out = []
    for dest, gi in zip(ins.dests, results):
        if dest is not None and gi is None:
            raise Mismatch(f"the {op.name} vjp gave no gradient where one was needed")
        out.append(None if dest is None else gi._data)
    return out


def _as_array(out, xp):
    return out if isinstance(out, xp.ndarray) else xp.asarray(out)


def _add(a, b):
    """`a + b` as the engine's Variable addition computes it (an array, also for 0-d results)."""
    out = a + b
    return out if type(out) is _ndarray else _as_array(out, backend.array_module(a))
