"""A program (`wire.program`) as generated Python source, compiled off the request path.

The source is meant to be read: registers are local variables named after what made them and
their number (`mul_7`, `x_0`, `grad_x_12`), each step calls the op's own forward (`mul(xp, x_0,
w_1)`) with its attributes written out, and a comment names the graph node (or, in the backward,
the grad_fn) the steps compute. It is registered with `linecache` under the program's filename
(`<gradserve plan 3f2a... program 4>`), so a traceback through it shows its lines; `gradserve plan
show` prints it.

The steps are split into parts of `PART_STEPS` steps, each its own function over the register
list `R` (a part loads the registers it reads and stores the ones read after it), so that no
`compile()` call is long: Python's compiler holds the GIL while it runs and cannot be cancelled.
`Generator` compiles one program at a time on a background thread, yielding the GIL between
parts; requests run the program interpreted until its function is ready. Programs over
`MAX_TERMS` (`Program.terms`: steps and the registers they name, so fan-in counts) stay interpreted.
"""

from __future__ import annotations

import keyword
import linecache
import logging
import math
import queue
import re
import threading
import time
import weakref

import numpy

from engine import backend
from wire.program import ForTheEngine
from wire.run import cancelled

log = logging.getLogger("gradserve.codegen")
MAX_TERMS = 16_000  # about 4,000 two-input ops with their vjps
PART_STEPS = 200  # steps per generated function: ~10 ms of compile() each
QUEUE = 64  # programs waiting to be generated; more stay interpreted
FIXED = {"R", "T", "G", "xp", "cancel", "cancelled", "to_active", "nd", "asarray", "ForTheEngine", "run", "seed"}


def _asarray(out, xp):
    return out if isinstance(out, xp.ndarray) else xp.asarray(out)


def _identifier(text: str, limit: int = 24) -> str:
    name = re.sub(r"\W", "_", str(text), flags=re.ASCII)[:limit].strip("_") or "v"
    return name if name[0].isalpha() else f"v_{name}"


def _literal(value):
    """`repr(value)` when it reads back as the same value (numbers, strings, None, tuples of them), else None."""
    if value is None or type(value) in (bool, int, str):
        return repr(value)
    if type(value) is float:
        return repr(value) if math.isfinite(value) else None
    if type(value) in (tuple, list):
        items = [_literal(v) for v in value]
        if None in items:
            return None
        inner = ", ".join(items) + ("," if len(items) == 1 and type(value) is tuple else "")
        return f"({inner})" if type(value) is tuple else f"[{inner}]"
    return None


class _Source:
    """Names and bound values of one generated module."""

    def __init__(self, program):
        self.env = {
            "nd": numpy.ndarray,
            "asarray": _asarray,
            "cancelled": cancelled,
            "ForTheEngine": ForTheEngine,
            "to_active": backend.to_active,
        }
        self.names = []
        inputs = {reg: name for name, reg in program.inputs}
        inputs.update({reg: f"seed_{name}" for name, reg, _, _ in program.seeds})
        grads = {reg: name for name, reg in program.grads or ()}
        for reg, label in enumerate(program.labels):
            if reg in inputs:
                label = inputs[reg]
            elif reg in grads and label == "grad":
                label = f"grad_{grads[reg]}"
            self.names.append(f"{_identifier(label)}_{reg}")

    def bind(self, label: str, value) -> str:
        """A name in the module's namespace for `value` (an op's forward, a constant)."""
        base = _identifier(label)
        if keyword.iskeyword(base) or base in FIXED or base.startswith("part_"):
            base = f"op_{base}"
        name, n = base, 1
        while name in self.env and self.env[name] is not value:
            n += 1
            name = f"{base}_{n}"
        self.env[name] = value
        return name

    def call(self, step) -> str:
        fn = self.bind(step.name, step.fn)
        args = [self.names[i] for i in step.ins]
        if step.xp:
            args.insert(0, "xp")
        for key, value in (step.attrs or {}).items():
            text = _literal(value) if key.isidentifier() and not keyword.iskeyword(key) else None
            args.append(f"{key}={text if text is not None else self.bind(f'{step.name}_{key}', value)}")
        return f"{fn}({', '.join(args)})"


def source_of(program) -> tuple[str, dict, list]:
    """(source, namespace, [(function name, first line, its source)]) of `program`'s function
    `run(T, G, cancel, xp) -> (outputs, grads or None)`, parts after it."""
    src = _Source(program)
    names = src.names
    steps, drops = zip(*program.steps()) if len(program.kind) else ((), ())
    bounds = list(range(0, len(steps), PART_STEPS)) or [0]
    parts = [(start, min(start + PART_STEPS, len(steps))) for start in bounds]
    # per register: the last part that reads it, and the part that writes it
    last_part, written = {}, {}
    for p, (start, end) in enumerate(parts):
        for step in steps[start:end]:
            for reg in step.ins:
                last_part[reg] = p
            written[step.out] = p
    kept = {reg for _, reg in program.outputs} | {reg for _, reg in program.grads or ()}
    head = ["def run(T, G, cancel, xp):", f"    R = [None] * {program.registers}"]
    for name, reg in program.inputs:
        head.append(f"    R[{reg}] = to_active(T[{name!r}])  # input {name!r}")
    for name, reg, shape, dtype in program.seeds:
        head.append(f"    seed = G.get({name!r})")
        head.append(f"    if seed is None or tuple(seed.shape) != {shape!r}:")
        head.append(f"        raise ForTheEngine({f'grad_outputs {name!r} has another shape'!r})")
        head.append(f"    R[{reg}] = to_active(seed).astype({src.bind(f'dtype_{dtype.name}', dtype)}, copy=False)")
    for reg, array in program.constants:
        head.append(f"    R[{reg}] = {src.bind(f'constant_{reg}', array)}  # {array.dtype.name} {list(array.shape)}")
    functions = []
    if steps:
        for p in range(len(parts)):
            head.append(f"    part_{p}(R, cancel, xp)")
    outputs = ", ".join(f"{name!r}: R[{reg}]" for name, reg in program.outputs)
    grads = "None" if program.grads is None else "{" + ", ".join(f"{n!r}: R[{r}]" for n, r in program.grads) + "}"
    head.append(f"    return {{{outputs}}}, {grads}")
    functions.append(("run", head))
    for p, (start, end) in enumerate(parts if steps else ()):
        body = [f"def part_{p}(R, cancel, xp):"]
        loaded = set()
        for step in steps[start:end]:
            for reg in step.ins:
                if written.get(reg, -1) < p and reg not in loaded:
                    loaded.add(reg)
        for reg in sorted(loaded):
            body.append(f"    {names[reg]} = R[{reg}]")
            if last_part.get(reg) == p and reg not in kept:
                body.append(f"    R[{reg}] = None")
        where = None
        for index in range(start, end):
            step = steps[index]
            if step.where != where:
                where = step.where
                body.append(f"    # {where}" if where else "    #")
                body.append("    if cancel is not None and cancel.is_set(): raise cancelled()")
            out = names[step.out]
            body.append(f"    {out} = {src.call(step)}")
            if step.scalar:
                body.append(f"    if type({out}) is not nd: {out} = asarray({out}, xp)")
            if step.out in kept or last_part.get(step.out, p) > p:
                body.append(f"    R[{step.out}] = {out}")
            dead = [names[d] for d in drops[index]]
            if dead:
                body.append(f"    {' = '.join(dead)} = None")
        body.append("    return None")
        functions.append((f"part_{p}", body))
    out, line = [], 1
    for name, body in functions:
        out.append((name, line, "\n".join(body) + "\n"))
        line += len(body) + 1
    return "\n".join(text for _, _, text in out), src.env, out


def generate(program, filename: str, stop=None):
    """Compile `program`'s generated source (registered in `linecache` under `filename`) and set
    `program.generated`, `.source` and `.filename`; None without generating when it is over
    `MAX_TERMS` or `stop()` says so between parts."""
    if program.terms > MAX_TERMS:
        return None
    source, namespace, functions = source_of(program)
    for name, first, text in functions:
        if stop is not None and stop():
            return None
        code = compile(text, filename, "exec")
        exec(code, namespace)  # noqa: S102 - our own source: node ids appear only as repr() literals
        fn = namespace[name]
        fn.__code__ = fn.__code__.replace(co_firstlineno=first)
        time.sleep(0)  # let request threads have the GIL between parts
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    weakref.finalize(program, linecache.cache.pop, filename, None)
    program.source, program.filename = source, filename
    program.generated = namespace["run"]
    return program.generated


class Generator:
    """One background thread that generates programs one at a time, `QUEUE` waiting at most."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue(QUEUE)
        self._thread = None
        self._lock = threading.Lock()
        self._epoch = 0  # bumped by cancel(): what was queued before is dropped, a generation under way stops

    def submit(self, program, filename: str) -> bool:
        """Queue `program` (held weakly: an evicted one is not generated); False when the queue is
        full or the program too long (it stays interpreted)."""
        if program.terms > MAX_TERMS:
            return False
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="gradserve-codegen", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((weakref.ref(program), filename, self._epoch))
        except queue.Full:
            return False
        return True

    def _work(self):
        while True:
            ref, filename, epoch = self._queue.get()
            program = ref()
            try:
                if program is not None and epoch == self._epoch:
                    generate(program, filename, lambda epoch=epoch: epoch != self._epoch)
            except Exception:  # noqa: BLE001 - a program that does not generate stays interpreted, visibly
                log.exception("generating %s failed: it stays interpreted", filename)
            finally:
                del program
                self._queue.task_done()

    def idle(self, timeout: float = 10.0) -> bool:
        """Wait until nothing is queued or being generated (tests, `gradserve plan show`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._queue.unfinished_tasks:
                return True
            time.sleep(0.005)
        return False

    def cancel(self):
        """Drop what is queued and stop the generation under way after its current part (at a
        server's shutdown); later programs are generated again."""
        self._epoch += 1
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
            self._queue.task_done()


GENERATOR = Generator()
