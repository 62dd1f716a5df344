"""Recording the engine's array-level steps: what a compiled plan is made of (`wire.compile`).

Inside `recording()`, every array-level call the engine makes on this thread is told to the
`Recording`: each op's forward in `engine.node.apply_op` (in the forward pass and inside the
backward walk's vjps, which are written in ops, and for the walk's own gradient sums and
unbroadcast reductions, which are ops too), a vjp's local derivative computed on arrays
(`engine.registry.local`), and the gradient-free arrays a vjp derives from values (`derived`:
masks, tie weights). Every array seen is a register; a step reads registers and writes one.
Python scalars turned into arrays (`engine.registry.coerce`) and a graph's constants are
constants. Replaying the steps on other inputs of the same shapes and dtypes recomputes exactly
what the engine computed, bit for bit, with no Variable or Node.

An array that no step produced and that was not declared an input or constant (a value made
from `._data` outside `derived`) spoils the recording: `Recording.spoiled` says where, and the
engine's own run goes on unaffected.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy

from engine import backend
from engine.node import RECORDING
from engine.variable import Variable

_ident = threading.get_ident


@dataclass(eq=False, slots=True)
class Step:
    """`registers[out] = fn(xp, *registers[ins], **attrs)` (`xp` only for an op's forward)."""

    name: str  # the op's name, or what computed it ("local", a derived function's name)
    fn: object
    ins: tuple
    attrs: dict | None
    out: int
    xp: bool  # whether fn takes the array module first (an op's forward)
    where: str  # the graph node (forward) or grad_fn (backward) being computed, for the reader
    scalar: bool  # a 0-d result (which NumPy gives as a scalar: replays make it an array, as the engine does)


def _strong(array):
    return lambda: array


class Recording:
    """The steps of one run, over numbered registers (see the module docstring)."""

    def __init__(self):
        self.steps: list[Step] = []
        self.inputs: dict = {}  # name -> register
        self.constants: list = []  # (register, array)
        self.labels: list[str] = []  # per register: what made it (op name, "input", "constant")
        self.spoiled: str | None = None  # why the steps cannot be replayed (the first escape seen)
        self.where = ""
        self._known: dict = {}  # id(array) -> (register, a reference to the array)

    def _new(self, array, label) -> int:
        reg = len(self.labels)
        self.labels.append(label)
        try:
            ref = weakref.ref(array)
        except TypeError:
            ref = _strong(array)
        self._known[id(array)] = (reg, ref)
        return reg

    def register(self, array) -> int | None:
        """The register holding `array` (the very object), or None when no step made it."""
        entry = self._known.get(id(array))
        if entry is not None and entry[1]() is array:
            return entry[0]
        return None

    def input(self, name, array) -> int:
        reg = self._new(array, "input")
        self.inputs[name] = reg
        return reg

    def constant(self, array) -> int:
        reg = self.register(array)
        if reg is None:
            reg = self._new(array, "constant")
            self.constants.append((reg, array))
        return reg

    def spoil(self, why: str) -> None:
        if self.spoiled is None:
            self.spoiled = why

    def step(self, name, fn, arrays, attrs, out, xp) -> None:
        if self.spoiled is not None:
            return
        ins = []
        for array in arrays:
            reg = self.register(array)
            if reg is None:
                where = f" ({self.where})" if self.where else ""
                self.spoil(f"{name}{where} read an array that no recorded step made (a value computed outside the ops)")
                return
            ins.append(reg)
        self.steps.append(Step(name, fn, tuple(ins), attrs, self._new(out, name), xp, self.where, out.ndim == 0))


def current() -> Recording | None:
    """This thread's recording, or None."""
    return RECORDING.get(_ident()) if RECORDING else None


@contextmanager
def recording():
    """Record this thread's array-level engine calls into the `Recording` it yields."""
    ident = _ident()
    if ident in RECORDING:
        raise RuntimeError("a recording is already under way on this thread")
    made = Recording()
    RECORDING[ident] = made
    try:
        yield made
    finally:
        del RECORDING[ident]


def note_input(name, array) -> None:
    """Declare `array` the run's input `name` (when this thread records)."""
    made = current()
    if made is not None:
        made.input(name, array)


def note_constant(array) -> None:
    """Declare `array` a constant of the run: the same whatever the inputs' values (when this thread records)."""
    made = current()
    if made is not None:
        made.constant(array)


def note_where(text: str) -> None:
    """Say which node the next steps compute (shown beside them in generated code)."""
    made = current()
    if made is not None:
        made.where = text


def fixed(array) -> bool:
    """Whether a vjp may branch on `array`'s value: always when this thread does not record, else only
    when `array` is a constant of the run (a Python number's array), which a replay does not change."""
    made = RECORDING.get(_ident()) if RECORDING else None
    if made is None:
        return True
    reg = made.register(array)
    return reg is not None and made.labels[reg] == "constant"


def tell(name, fn, arrays, attrs, out, xp=False) -> None:
    """A step computed outside `apply_op` (`engine.registry.local`, `derived`): `out = fn(*arrays)`."""
    made = RECORDING.get(_ident())
    if made is not None:
        made.step(name, fn, arrays, attrs, out, xp)


def as_array(out, like):
    """`out` as an array of `like`'s module (NumPy gives a scalar for a 0-d result)."""
    if type(out) is numpy.ndarray:
        return out
    xp = backend.array_module(like)
    return out if isinstance(out, xp.ndarray) else xp.asarray(out)


def derived(fn, *variables) -> Variable:
    """A gradient-free Variable of `fn(*arrays of variables)`: an array a vjp computes from values
    outside the graph (a mask, tie weights, a sign). `fn` may read only these arrays (and fixed
    attributes); a recording keeps it as a step, so a replay recomputes it from its inputs."""
    arrays = [v._data for v in variables]
    out = as_array(fn(*arrays), arrays[0])
    if RECORDING:
        tell(getattr(fn, "__name__", "derived").strip("<>_") or "derived", fn, arrays, None, out)
    return Variable._result(out, None)
