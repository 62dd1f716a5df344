"""A compiled program as one generated Python function: the same instructions as `Program`'s
interpreter, in the same order, with registers as local variables and the accumulation pattern
(first gradient assigned, later ones added) resolved at compile time. Per step it costs the op's
own call and a cancel check; nothing is looked up in a list or decided again.

The interpreter runs a program's first request (which verifies every value's shape and dtype);
the generated function runs the later ones. Programs over `MAX_TERMS` (`Program.terms`: instructions
and the registers they name, so fan-in counts) stay interpreted: Python's compiler is slow on very long
functions, holds the GIL and cannot be cancelled.
"""

from __future__ import annotations

import numpy

from engine import backend
from engine.grad_mode import state as grad_state
from engine.variable import Variable
from wire.program import ForTheEngine, _add, _as_array, _vjp_results
from wire.run import cancelled

MAX_TERMS = 16_000  # about 4,000 two-input instructions and their vjps


class _Source:
    def __init__(self):
        self.lines = []
        self.env = {
            "nd": numpy.ndarray,
            "asarray": _as_array,
            "add": _add,
            "cancelled": cancelled,
            "ForTheEngine": ForTheEngine,
            "V": Variable._result,
            "grad_state": grad_state,
            "backend": backend,
        }

    def const(self, value, prefix="k") -> str:
        name = f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def line(self, text, indent=1):
        self.lines.append("    " * indent + text)


def generate(program):
    """The function `run(tensors, grad_outputs, cancel, xp) -> (outputs, grads or None)` of `program`,
    or None when it is too long to generate."""
    if program.terms > MAX_TERMS:
        return None
    src = _Source()
    src.line("def run(T, G, cancel, xp):", 0)
    src.line("to_active = backend.to_active")
    for name, reg in program.inputs:
        src.line(f"r{reg} = to_active(T[{name!r}])")
    for reg, array in program.constants:
        src.line(f"r{reg} = {src.const(array)}")
    for ins in program.forward:
        _forward(src, ins)
    outputs = ", ".join(f"{name!r}: r{reg}" for name, reg in program.outputs)
    src.line(f"outputs = {{{outputs}}}")
    if not program.seeds and not program.grads:
        src.line("return outputs, None")
    else:
        _backward(src, program)
    namespace = dict(src.env)
    exec(compile("\n".join(src.lines), f"<compiled plan of {len(program.forward)} steps>", "exec"), namespace)  # noqa: S102
    return namespace["run"]


def _forward(src, ins):
    src.line(f"if cancel is not None and cancel.is_set(): raise cancelled({ins.step_id!r})")
    args = ", ".join(f"r{i}" for i in ins.ins)
    attrs = f", **{src.const(ins.attrs, 'a')}" if ins.attrs else ""
    if ins.composite is None:
        src.line(f"r{ins.out} = {src.const(ins.forward, 'f')}(xp, {args}{attrs})")
        if ins.shape == ():  # NumPy gives a scalar for a 0-d result; the engine an array
            src.line(f"if type(r{ins.out}) is not nd: r{ins.out} = asarray(r{ins.out}, xp)")
    else:
        wrapped = ", ".join(f"V(r{i}, None)" for i in ins.ins)
        src.line(f"r{ins.out} = {src.const(ins.composite, 'c')}.call([{wrapped}], {src.const(ins.attrs, 'a')})._data")
    for d in ins.drops:
        src.line(f"r{d} = None")


def _accumulate(src, assigned, reg, value, indent, scalar):
    if reg in assigned:
        src.line(f"r{reg} = add(r{reg}, {value})" if scalar else f"r{reg} = r{reg} + {value}", indent)
    else:
        src.line(f"r{reg} = {value}", indent)
        assigned.add(reg)


def _backward(src, program):
    assigned = set()
    for name, reg, shape, dtype in program.seeds:
        src.line(f"r{reg} = G.get({name!r})")
        ones = (
            f"backend.xp.array(1, {src.const(dtype, 'd')})"
            if shape == ()
            else f"backend.xp.ones({shape!r}, {src.const(dtype, 'd')})"
        )
        src.line(f"if r{reg} is None: r{reg} = {ones}")  # array(1, d): ones((), d) parses its shape (1 µs)
        src.line(f"elif tuple(r{reg}.shape) != {shape!r}: raise ForTheEngine('grad_outputs shape')")
        src.line(f"else: r{reg} = backend.to_active(r{reg}).astype({src.const(dtype, 'd')}, copy=False)")
    for seed, dst in program.roots:
        _accumulate(src, assigned, dst, f"r{seed}", 1, False)
    src.line("previous = grad_state.enabled")
    src.line("grad_state.enabled = False")
    src.line("try:")
    for ins in program.backward:
        _vjp(src, ins, assigned)
    src.line("pass", 2)
    src.line("finally:")
    src.line("grad_state.enabled = previous", 2)
    grads = ", ".join(
        f"{name!r}: r{reg}" if reg in assigned else f"{name!r}: backend.array_module(r{target}).zeros_like(r{target})"
        for name, reg, target in program.grads
    )
    src.line(f"return outputs, {{{grads}}}")


def _vjp(src, ins, assigned):
    src.line("if cancel is not None and cancel.is_set(): raise cancelled()", 2)
    src.line(f"g = r{ins.grad}", 2)
    src.line(f"r{ins.grad} = None", 2)
    if ins.capture is not None:
        _accumulate(src, assigned, ins.capture, "g", 2, True)
    if ins.dests:
        saved = ", ".join(f"r{s}" if type(s) is int else src.const(s, "m") for s in ins.saved)
        ans = "None" if ins.ans is None else f"r{ins.ans}"
        if ins.on_arrays:
            attrs = f", **{src.const(ins.attrs, 'a')}" if ins.attrs else ""
            for i, (fn, dest) in enumerate(zip(ins.op.vjps, ins.dests)):
                if dest is not None:
                    src.line(f"g{i} = {src.const(fn, 'v')}(g, {ans}, {saved}{attrs})", 2)
        elif ins.op.vjp is None:  # per-input vjps on Variables, as the engine calls them (grad mode off)
            wrapped = ", ".join(f"V(r{s}, None)" if type(s) is int else src.const(s, "m") for s in ins.saved)
            ans_v = "None" if ins.ans is None else f"V(r{ins.ans}, None)"
            attrs = f", **{src.const(ins.attrs, 'a')}" if ins.attrs else ""
            src.line("gv = V(g, None)", 2)
            for i, (fn, dest) in enumerate(zip(ins.op.vjps, ins.dests)):
                if dest is not None:  # a vjp that gives None fails on `._data`: the engine reruns the request
                    src.line(f"g{i} = {src.const(fn, 'v')}(gv, {ans_v}, {wrapped}{attrs})._data", 2)
        else:
            names = ", ".join(f"g{i}" if dest is not None else "_" for i, dest in enumerate(ins.dests))
            src.line(f"{names}, = {src.const(_vjp_results, 'h')}({src.const(ins, 'i')}, g, {ans}, [{saved}])", 2)
        for i, dest in enumerate(ins.dests):
            if dest is None:
                continue
            reg, shape, dtype, fit = dest
            d = src.const(dtype, "d")
            given = ins.on_arrays[i] if ins.on_arrays else None
            if given is None:  # decided as it runs, as the engine does
                src.line(f"if type(g{i}) is not nd: g{i} = asarray(g{i}, xp)", 2)
                src.line(
                    f"if g{i}.shape != {shape!r} or g{i}.dtype != {d}: g{i} = {src.const(fit, 'fit')}(g{i}, {shape!r}, {d})",
                    2,
                )
            else:  # array operators: shape and dtype follow from the operands', known now
                if given[0] == ():
                    src.line(f"if type(g{i}) is not nd: g{i} = asarray(g{i}, xp)", 2)
                if given != (shape, dtype):
                    src.line(f"g{i} = {src.const(fit, 'fit')}(g{i}, {shape!r}, {d})", 2)
            if reg is not None:
                _accumulate(src, assigned, reg, f"g{i}", 2, shape == ())
    for d in ins.drops:
        src.line(f"r{d} = None", 2)
