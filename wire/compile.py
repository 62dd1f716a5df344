"""Compiling a cached plan into an array-level `Program` (`wire.program`), once per (plan, input
signature, request shape: forward or backward, wrt, which outputs come with a gradient).

The compiler runs the engine's bookkeeping ahead of time, symbolically: which values require
grad and which steps record a node (`engine.node.apply_op`'s rule), how Python scalar constants
are coerced (`engine.registry.coerce`, on placeholders of the known dtypes), and the order in
which `engine.autograd.run_backward` would visit the nodes, call their vjps and add up their
gradients (the ready stack, dependency counts, the nodes that reach a `wrt` target, `_fit`'s
reductions). The program then repeats exactly those array operations, so its results are the
engine's bit for bit, without Variables, Nodes or attribute parsing per step.

What it does not compile raises `Fallback` (the executor runs the engine instead): grad nodes,
function nodes, steps whose shape depends on values (boolean masks), composite ops that would
record, and requests the engine would refuse (it reports those with its own error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from engine import backend
from engine.node import Meta
from engine.registry import OPS, coerce
from engine.variable import Variable
from wire.codegen import generate
from wire.errors import GraphError
from wire.probe import vjps_on_arrays
from wire.program import Forward, Mismatch, Program, Vjp


class Fallback(Exception):
    """Why a plan is run on the engine rather than compiled."""


UNCOMPILED = {
    "function": "function node",
    "grad": "grad node",
    "arg": "subgraph",
    "grad_output": "subgraph",
    "forward_value": "subgraph",
}


@dataclass(eq=False, slots=True)
class _Value:
    reg: int
    shape: tuple
    dtype: object
    rg: bool = False  # requires grad
    node: bool = False  # a recorded node produced it
    scalar: object = None  # a Python number constant (coerced by each consumer)


def _meta(shape, dtype):
    meta = Meta.__new__(Meta)
    meta.shape, meta.dtype = tuple(shape), numpy.dtype(dtype)
    return meta


def _placeholder(value):
    return Variable._result(numpy.zeros((), value.dtype), None)


def _fit(data, shape, dtype):
    """`engine.autograd._fit` on arrays: a gradient summed to its input's shape, cast to its dtype."""
    xp = backend.array_module(data)
    if data.shape != shape:
        data = OPS["sum_to"].forward(xp, data, shape=shape)
        data = data if isinstance(data, xp.ndarray) else xp.asarray(data)
    if data.dtype != dtype:
        data = OPS["cast"].forward(xp, data, dtype=dtype.name)
    return data


class _Compiler:
    def __init__(self, plan, shapes, differentiate):
        self.plan = plan
        self.known = shapes.known
        self.record = differentiate
        self.values: dict[str, _Value] = {}
        self.registers = 0
        self.constants = []
        self.forward = []
        self.edges = {}  # node (step id) -> per input: ("n", step id), ("l", input name) or None
        self.steps = {}  # node -> (Step, [input _Value])
        self.reads = {}  # register -> last instruction index reading it (forward, then backward)

    def new(self) -> int:
        self.registers += 1
        return self.registers - 1

    def constant(self, array) -> int:
        reg = self.new()
        self.constants.append((reg, array))
        return reg

    def run_forward(self, needs):
        for step in self.plan.steps:
            op = step.op
            if op in UNCOMPILED:
                raise Fallback(UNCOMPILED[op])
            meta = self.known.get(step.id)
            if meta is None:  # downstream of a boolean mask: the engine checks sizes as it runs
                raise Fallback(f"node {step.id!r}: its shape depends on values")
            shape, dtype = meta
            if op == "input":
                rg = self.record and step.id in needs
                if rg and dtype.kind != "f":
                    raise Fallback("an integer input requires grad")  # the engine's error
                self.values[step.id] = _Value(self.new(), shape, dtype, rg)
            elif op == "constant":
                value = step.attrs["value"]
                if hasattr(value, "shape"):
                    self.values[step.id] = _Value(self.constant(backend.to_active(value)), shape, dtype)
                else:
                    self.values[step.id] = _Value(-1, shape, dtype, scalar=value)
            elif not isinstance(dtype, numpy.dtype):  # an op of scalar constants only: coerce decides at run time
                raise Fallback(f"node {step.id!r}: its dtype is known only by running")
            else:
                self._op_step(step, shape, dtype)

    def _op_step(self, step, shape, dtype):
        spec = OPS[step.op]
        inputs = self._coerced([self.values[i] for i in step.inputs])
        regs = [v.reg for v in inputs]
        rg_in = self.record and any(v.rg for v in inputs)
        out = self.new()
        if spec.composite:
            if rg_in:
                raise Fallback(f"node {step.id!r}: composite op {step.op} would record")
            self.forward.append(Forward(step.id, None, tuple(regs), step.attrs, out, (), shape, dtype, spec))
        else:
            self.forward.append(Forward(step.id, spec.forward, tuple(regs), step.attrs, out, (), shape, dtype))
        node = rg_in and spec.differentiable and dtype.kind == "f"
        self.values[step.id] = _Value(out, shape, dtype, node, node)
        if node:
            self.edges[step.id] = tuple(
                ("n", i) if v.node else ("l", i) if v.rg else None for i, v in zip(step.inputs, inputs)
            )
            self.steps[step.id] = (step, inputs, regs)
        for r in regs:
            self.reads[r] = len(self.forward) - 1

    def _coerced(self, inputs):
        """The inputs as the engine's `coerce` makes them: a scalar constant becomes an array (in a
        register of its own) of the dtype NumPy's weak-scalar rule gives it next to the others."""
        if all(v.scalar is None for v in inputs):
            return inputs
        made = coerce([v.scalar if v.scalar is not None else _placeholder(v) for v in inputs])
        return [
            v if v.scalar is None else _Value(self.constant(m._data), m._data.shape, m._data.dtype)
            for v, m in zip(inputs, made)
        ]

    def output_register(self, name):
        value = self.values[name]
        if value.scalar is None:
            return value.reg
        return self.constant(coerce([value.scalar])[0]._data)  # as `wire.run.as_variable` makes it


def compile_program(plan, shapes, differentiate: bool, wrt=None, seeded=frozenset()) -> Program:
    """The Program of `plan` for inputs of `shapes` (a forward, or a backward with respect to
    `wrt`, None meaning the inputs that require grad, with grad_outputs for the `seeded` outputs)."""
    compiler = _Compiler(plan, shapes, differentiate)
    compiler.run_forward(plan.requires_grad | plan.grad_inputs | set(wrt or ()))
    outputs = tuple((name, compiler.output_register(name)) for name in plan.outputs)
    program = Program(0, tuple((n, compiler.values[n].reg) for n in plan.inputs), (), compiler.forward, outputs)
    keep = {reg for _, reg in outputs}
    if differentiate:
        _Backward(compiler, program, keep).build(wrt, seeded)
    _drop(compiler, program, keep)
    program.registers = compiler.registers
    program.constants = tuple(compiler.constants)
    return program


class _Backward:
    """`engine.autograd.run_backward`'s walk, symbolically, emitting the instructions it would run."""

    def __init__(self, compiler, program, keep):
        self.c = compiler
        self.program = program
        self.keep = keep
        self.grad_reg = {}  # node -> register of its accumulated gradient
        self.capture = {}  # wrt name -> register of its gradient

    def build(self, wrt, seeded):
        c, plan = self.c, self.c.plan
        wrt = [n for n in plan.inputs if n in plan.requires_grad] if wrt is None else list(wrt)
        self._check(wrt, seeded)
        for name in wrt:
            self.capture[name] = reg = c.new()
            self.keep |= {reg, c.values[name].reg}
        seeds, roots, root_nodes = [], [], []
        for name in plan.outputs:
            value = c.values[name]
            if not value.rg:
                continue
            if name not in seeded and math.prod(value.shape) != 1:
                raise Fallback(f"output {name!r} is not a scalar and has no grad_outputs")  # the engine's error
            seed = c.new()
            seeds.append((name, seed, value.shape, value.dtype))
            if not value.node:
                if name in self.capture:
                    roots.append((seed, self.capture[name]))
                continue
            roots.append((seed, self._grad(name)))
            root_nodes.append(name)
        self.program.seeds, self.program.roots = tuple(seeds), tuple(roots)
        self.program.grads = tuple((n, self.capture[n], c.values[n].reg) for n in wrt)
        if root_nodes:
            self._walk(root_nodes, wrt)

    def _check(self, wrt, seeded):
        values, plan = self.c.values, self.c.plan
        if not wrt or len(set(wrt)) != len(wrt) or set(seeded) - set(plan.outputs):
            raise Fallback("the engine reports this request's error")
        for name in wrt:
            value = values.get(name)
            if value is None or value.scalar is not None or not value.rg:
                raise Fallback("the engine reports this request's error")

    def _grad(self, node):
        reg = self.grad_reg.get(node)
        if reg is None:
            reg = self.grad_reg[node] = self.c.new()
        return reg

    def _walk(self, root_nodes, wrt):
        edges = self.c.edges
        deps, seen = {}, set(root_nodes)
        stack = list(seen)
        while stack:
            for edge in edges[stack.pop()]:
                if edge is not None and edge[0] == "n":
                    if edge[1] in deps:
                        deps[edge[1]] += 1
                    else:
                        deps[edge[1]] = 1
                        if edge[1] not in seen:
                            seen.add(edge[1])
                            stack.append(edge[1])
        target_nodes = [n for n in wrt if self.c.values[n].node]
        leaves = {n for n in wrt if not self.c.values[n].node}
        needed = self._needed(seen, target_nodes, leaves)
        grads = set(root_nodes)
        ready = [n for n in dict.fromkeys(root_nodes) if deps.get(n, 0) == 0]
        while ready:
            node = ready.pop()
            grads.discard(node)
            needs = tuple(e is not None and (e[1] in leaves if e[0] == "l" else e[1] in needed) for e in edges[node])
            self._emit(node, needs, node if node in target_nodes else None)
            op = OPS[self.c.steps[node][0].op]
            for i, (edge, need) in enumerate(zip(edges[node], needs)):
                if edge is None:
                    continue
                present = need and (op.vjp is not None or op.vjps[i] is not None)
                if edge[0] == "l":
                    continue
                if present:
                    grads.add(edge[1])
                deps[edge[1]] -= 1
                if deps[edge[1]] == 0:
                    if edge[1] in grads:
                        ready.append(edge[1])
                    else:
                        self._release(edge[1], deps, grads, ready)

    def _release(self, node, deps, grads, ready):
        stack = [node]
        while stack:
            for edge in self.c.edges[stack.pop()]:
                if edge is not None and edge[0] == "n":
                    deps[edge[1]] -= 1
                    if deps[edge[1]] == 0:
                        (ready.append if edge[1] in grads else stack.append)(edge[1])

    def _needed(self, nodes, target_nodes, leaves):
        """`engine.autograd.nodes_reaching` on the step graph."""
        parents = {}
        for node in nodes:
            for edge in self.c.edges[node]:
                if edge is not None:
                    parents.setdefault(edge, []).append(node)
        needed = set()
        stack = [n for n in target_nodes if n in nodes]
        for leaf in leaves:
            stack.extend(parents.get(("l", leaf), ()))
        needed.update(stack)
        while stack:
            node = stack.pop()
            for parent in parents.get(("n", node), ()):
                if parent not in needed:
                    needed.add(parent)
                    stack.append(parent)
        return needed

    def _emit(self, node, needs, target):
        c = self.c
        step, inputs, regs = c.steps[node]
        op = OPS[step.op]
        index = len(c.forward) + len(self.program.backward)
        called = any(needs)
        dests, saved = [], []
        for i, (edge, need, value, reg) in enumerate(zip(c.edges[node], needs, inputs, regs)):
            present = need and (op.vjp is not None or op.vjps[i] is not None)
            if present:
                dest = self.capture[edge[1]] if edge[0] == "l" else self._grad(edge[1])
                dests.append((dest, value.shape, value.dtype, _fit))
            else:
                dests.append(None)
            saved.append(_saved(op, i, len(inputs), edge, value, reg))
        ans = c.values[node].reg if op.uses_output and called else None
        if called:
            for reg in [ans, *saved]:
                if type(reg) is int:
                    c.reads[reg] = index
        on_arrays = vjps_on_arrays(op, needs, inputs, c.values[node], step.attrs, saved) if called else None
        self.program.backward.append(
            Vjp(
                op,
                step.attrs,
                self.grad_reg[node],
                ans,
                tuple(saved),
                needs,
                tuple(dests) if called else (),
                self.capture.get(target),
                (),
                on_arrays,
            )
        )


def _saved(op, i, count, edge, value, reg):
    """What the engine's node keeps of input i (`OpNode.__init__`): the value, its Meta, or None."""
    saves = op.saves
    if saves is True or (saves is not False and i in range(count)[saves]):
        return reg
    if saves is False and op.vjp is None and edge is None:
        return None
    return _meta(value.shape, value.dtype)


def _drop(compiler, program, keep):
    """Free each register after its last reader (forward values read by vjps live into the backward)."""
    forward, backward = compiler.forward, program.backward
    last = {}
    for reg, index in compiler.reads.items():
        last[reg] = index
    for ins_index, ins in enumerate(forward):
        last.setdefault(ins.out, ins_index)
    drops = {}
    for reg, index in last.items():
        if reg not in keep:
            drops.setdefault(index, []).append(reg)
    for index, ins in enumerate(forward):
        ins.drops = tuple(drops.get(index, ()))
    for index, ins in enumerate(backward):
        ins.drops = tuple(drops.get(len(forward) + index, ()))


PROGRAMS_PER_SIGNATURE = 16  # request shapes (forward, backward per wrt and seeded outputs) compiled per signature
# Plans compiled at most: a program of this many steps and its backward stays within wire.codegen's
# limit. Beyond it an interpreted program gains nothing on the engine (20k-step chain: 0.66 s
# against 0.71 s) and its compile (about one engine run) would be uncancellable time.
MAX_STEPS = 2000
TERM_BYTES = 600  # a compiled program with its generated code, per Program.terms (tracemalloc: ~1.5 kB a
# two-input instruction with its vjp, ~0.5 kB per further input of a wide one)


def _kept(plan, shapes) -> bool:
    return any(kept is shapes for kept in list(plan.checked.values()))


def run_compiled(plan, shapes, request, differentiate: bool, charge):
    """(outputs, grads or None, what ran: "interpreted" or "compiled") of `request` by its compiled
    program (its instructions, or once verified its generated function), or None where the engine
    must run it (not compilable, or this run left what was compiled: the engine reports errors).
    Programs live in `shapes.programs`, kept as long as the plan's signature is; `charge(plan,
    nbytes)` counts each against the plan cache's bytes (`PlanCache.charge`) and refuses it when
    the plan is not cached or the program would not fit."""
    if len(plan.steps) > MAX_STEPS:
        return None
    key = (differentiate, None if request.wrt is None else tuple(request.wrt), frozenset(request.grad_outputs))
    program = shapes.programs.get(key)
    if program is None:
        if len(shapes.programs) >= PROGRAMS_PER_SIGNATURE or not _kept(plan, shapes) or not charge(plan, 0):
            return None  # compiled only for a signature the cached plan keeps: else it would be per request
        try:
            program = compile_program(plan, shapes, differentiate, request.wrt, key[2])
        except Fallback as why:
            program = why
        except Exception as err:  # noqa: BLE001 - a plan the compiler does not understand runs on the engine
            program = Fallback(f"not compiled: {type(err).__name__}: {err}")
        if isinstance(program, Program) and not charge(plan, TERM_BYTES * program.terms):
            program = Fallback("the program would not fit in the plan cache's bytes")
        shapes.programs[key] = program
    if isinstance(program, Fallback):
        return None
    ran = "compiled" if program.generated else "interpreted"  # its generated function, or its instructions
    try:
        done = program.run(request.inputs, request.grad_outputs)
        if program.generated is None:
            program.generated = generate(program) or False
        return (*done, ran)
    except GraphError:
        raise  # cancelled
    except Mismatch as err:
        shapes.programs[key] = Fallback(str(err))
        return None
    except Exception:  # noqa: BLE001 - the engine reruns it and reports the failure with its node
        return None
