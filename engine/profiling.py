"""`torch.profiler` and `torch.autograd.profiler`, written once for both sides: `profile(...)` as a context manager
(`schedule`, `on_trace_ready`, `step()`), `record_function(name)` (a context manager and a decorator), and the
results as PyTorch's: `key_averages().table(sort_by=..., row_limit=...)`, `events()`, `export_chrome_trace(path)`.

On the engine, each op's forward (in the forward pass and inside the backward's vjps) is an event, observed through
`engine.node.RECORDING` (the observer wire's plan recorder uses: nothing is added to `apply_op` while no profiler
runs). The engine has no hook before an op starts, so an op's time is the time since the previous event on the
thread (the previous op's end, or a `record_function` boundary): it includes the Python between the two. On the
client (`observe_ops=False`), the events are the session's requests (embedded: each call's execution) and the
`record_function` ranges; the server's ops are not seen."""

from __future__ import annotations

import enum
import functools
import json
import os
import threading
import time
import types

from engine.node import RECORDING

REQUESTS: list = []  # the running client-side profiles, told of each request (client.session)


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1
    MTIA = 2
    XPU = 3
    PrivateUse1 = 4
    HPU = 5
    MPS = 6


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0, skip_first_wait: int = 0):
    """The step -> ProfilerAction function PyTorch's `schedule` makes."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
            f"active={active} (need > 0), repeat={repeat} (need >= 0), skip_first={skip_first} (need >= 0)."
        )

    def schedule_fn(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step = step - skip_first + (wait if skip_first_wait else 0)
        cycle = wait + warmup + active
        if repeat > 0 and step / cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return schedule_fn


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None, use_gzip: bool = False):
    """An `on_trace_ready` writing each trace as Chrome trace JSON into `dir_name` (no gzip here)."""

    def handler(prof) -> None:
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"{os.uname().nodename}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(dir_name, f"{name}.{time.time_ns()}.pt.trace.json"))

    return handler


def _format_time(us: float) -> str:
    return f"{us / 1e6:.3f}s" if us >= 1e6 else f"{us / 1e3:.3f}ms" if us >= 1e3 else f"{us:.3f}us"


class FunctionEvent:
    """One op, request or `record_function` range: its times in microseconds (self: less its children's)."""

    def __init__(self, name, start, end, input_shapes=(), kind="cpu_op", thread=0):
        self.trace_name = name  # PyTorch's steps are "ProfilerStep#N" in a trace, "ProfilerStep*" in its events
        self.name = self.key = "ProfilerStep*" if name.startswith("ProfilerStep#") else name
        self.time_range = types.SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
        self.cpu_time_total = end - start
        self.self_cpu_time_total = self.cpu_time_total
        self.input_shapes, self.kind, self.thread, self.count = list(input_shapes), kind, thread, 1
        self.device_time_total = self.self_device_time_total = self.cpu_memory_usage = self.self_cpu_memory_usage = 0

    cuda_time_total = property(lambda self: 0)

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    def __repr__(self) -> str:
        return f"<FunctionEvent name={self.name} cpu_time_total={_format_time(self.cpu_time_total)} count={self.count}>"


class EventList(list):
    """Events, or their averages by name (`key_averages`), printable as PyTorch's table."""

    _shapes = False  # averages by input shape: the table shows them

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0):
        groups: dict = {}
        for event in self:
            key = (event.key, str(event.input_shapes)) if group_by_input_shape else event.key
            average = groups.get(key)
            if average is None:
                shapes = event.input_shapes if group_by_input_shape else []
                groups[key] = average = FunctionEvent(event.key, 0.0, 0.0, shapes, event.kind)
                average.count = 0
            average.count += 1
            average.cpu_time_total += event.cpu_time_total
            average.self_cpu_time_total += event.self_cpu_time_total
        averages = EventList(groups.values())
        averages._shapes = group_by_input_shape
        return averages

    @property
    def self_cpu_time_total(self) -> float:
        return sum(event.self_cpu_time_total for event in self)

    def table(self, sort_by=None, row_limit: int = 100, max_name_column_width: int = 55, **_options) -> str:
        events = sorted(self, key=lambda e: getattr(e, sort_by), reverse=True) if sort_by else list(self)
        events = events[:row_limit] if row_limit > 0 else events
        total = self.self_cpu_time_total or 1.0
        shapes = self._shapes
        width = min(max([len(e.key) for e in events] + [4]) + 4, max_name_column_width)
        heads = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        widths = [width] + [12] * 6 + ([40] if shapes else [])
        heads = ["Name", *heads] + (["Input Shapes"] if shapes else [])
        line = "".join("-" * w + "  " for w in widths)

        def row(cells):
            return "".join(f"{c:>{w}}  " for c, w in zip(cells, widths))

        rows = [line, row(heads), line]
        for e in events:
            name = e.key if len(e.key) <= width else e.key[: width - 3] + "..."
            cells = [name, f"{100 * e.self_cpu_time_total / total:.2f}%", _format_time(e.self_cpu_time_total)]
            cells += [f"{100 * e.cpu_time_total / total:.2f}%", _format_time(e.cpu_time_total)]
            cells += [_format_time(e.cpu_time), str(e.count)] + ([str(e.input_shapes)] if shapes else [])
            rows.append(row(cells))
        return "\n".join([*rows, line, f"Self CPU time total: {_format_time(self.self_cpu_time_total)}", ""])

    def __str__(self) -> str:
        return self.table()

    def export_chrome_trace(self, path: str) -> None:
        pid = os.getpid()
        trace = [
            {
                "ph": "X",
                "cat": e.kind,
                "name": e.trace_name,
                "pid": pid,
                "tid": e.thread,
                "ts": e.time_range.start,
                "dur": e.cpu_time_total,
                "args": {"Input Dims": e.input_shapes} if e.input_shapes else {},
            }
            for e in self
        ]
        with open(path, "w") as out:
            json.dump({"schemaVersion": 1, "traceEvents": trace, "displayTimeUnit": "ms"}, out)


def _now() -> float:
    return time.perf_counter_ns() / 1000.0


class _Observer:
    """What `engine.node.RECORDING` holds for this thread while a profile runs: each op's forward is an event."""

    where, labels, spoiled = "", (), None

    def __init__(self, profile):
        self.profile = profile

    def step(self, name, fn, arrays, attrs, out, xp) -> None:
        self.profile._add(name, [list(getattr(a, "shape", ())) for a in arrays])

    def register(self, array):  # (engine.recording.fixed: no value is a plan's constant here)
        return None

    def input(self, name, array) -> None:
        pass

    def constant(self, array) -> None:
        pass

    spoil = constant


class profile:
    """torch.profiler.profile: events from `__enter__` (or `start()`) to `__exit__` (`stop()`), within the steps
    `schedule` records; `on_trace_ready(self)` at the end of each recorded cycle (or at `stop()`)."""

    observe_ops = True

    def __init__(self, activities=None, *, schedule=None, on_trace_ready=None, record_shapes=False, **_options):
        self.activities = set(activities or (ProfilerActivity.CPU,))
        self.schedule = schedule or (lambda step: ProfilerAction.RECORD)
        self._steps = schedule is not None  # each step a range "ProfilerStep#N", as PyTorch's with a schedule
        self._step_range = None
        self.on_trace_ready, self.record_shapes = on_trace_ready, record_shapes
        self.step_num, self._events, self._ranges = 0, EventList(), []
        self._recording = self._running = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._thread, self._running = threading.get_ident(), True
        if self.observe_ops:
            if self._thread in RECORDING:
                raise RuntimeError("the profiler cannot start: this thread is recording a plan (engine.recording)")
            RECORDING[self._thread] = _Observer(self)
        else:
            REQUESTS.append(self)
        self._last = _now()
        self._act(self.schedule(self.step_num))
        self._step_began()

    def _step_began(self) -> None:
        if self._steps:
            self._step_range = record_function(f"ProfilerStep#{self.step_num}").__enter__()

    def _step_ended(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def stop(self) -> None:
        if not self._running:
            return
        self._step_ended()
        self._running = False
        if self.observe_ops:
            RECORDING.pop(self._thread, None)
        elif self in REQUESTS:
            REQUESTS.remove(self)
        if self._recording and self.on_trace_ready is not None:
            self.on_trace_ready(self)
        self._recording = False

    def step(self) -> None:
        """Mark a step's end: the schedule's action for the next step begins (a cycle's end calls on_trace_ready)."""
        self._step_ended()
        previous = self.schedule(self.step_num)
        self.step_num += 1
        if previous is ProfilerAction.RECORD_AND_SAVE:
            self._recording = False
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        self._act(self.schedule(self.step_num))
        self._step_began()

    def _act(self, action) -> None:
        recording = action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if recording and not self._recording:
            self._events, self._ranges = EventList(), []
        self._recording = recording

    def _add(self, name, shapes, kind="cpu_op", start=None) -> None:
        """An event ending now, begun at `start` (by default the previous event's end on this thread)."""
        now = _now()
        start, self._last = self._last if start is None else start, now
        if self._recording:
            event = FunctionEvent(name, start, now, shapes if self.record_shapes else (), kind, self._thread)
            self._events.append(event)
            if self._ranges:
                self._ranges[-1][1].append(event)

    def events(self) -> EventList:
        return self._events

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0) -> EventList:
        return self._events.key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path: str) -> None:
        self._events.export_chrome_trace(path)

    def table(self, sort_by=None, row_limit: int = 100, **options) -> str:
        return self._events.table(sort_by=sort_by, row_limit=row_limit, **options)

    @property
    def function_events(self) -> EventList:
        return self._events


class _AutogradProfile(profile):
    """torch.autograd.profiler.profile(enabled=True, ..., record_shapes=False, ...)."""

    def __init__(self, enabled: bool = True, *, record_shapes: bool = False, **options):
        super().__init__(record_shapes=record_shapes)
        self.enabled = enabled

    def start(self) -> None:
        if self.enabled:
            super().start()


def _running() -> list:
    observer = RECORDING.get(threading.get_ident()) if RECORDING else None
    found = [observer.profile] if isinstance(observer, _Observer) else []
    return found + [p for p in REQUESTS if p._thread == threading.get_ident()]


class record_function:
    """A named range in the running profile's events (a context manager, or a decorator of a function)."""

    def __init__(self, name: str, args: str | None = None):
        self.name, self.args = name, args

    def __enter__(self):
        self._profiles = _running()
        for running in self._profiles:
            running._last = start = _now()
            running._ranges.append((start, []))
        return self

    def __exit__(self, *exc) -> None:
        for running in self._profiles:
            if not running._ranges:
                continue
            start, children = running._ranges.pop()
            running._add(self.name, (), "user_annotation", start)
            event = running._events[-1] if running._recording else None
            if event is not None:
                event.self_cpu_time_total -= sum(child.cpu_time_total for child in children)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)

        return wrapped


def request(name: str, send):
    """`send()`, timed as the event `name` in the running client-side profiles (client.session's requests)."""
    start = _now()
    try:
        return send()
    finally:
        for running in _running():
            running._add(name, (), "request", start)


def namespace(observe_ops: bool) -> tuple:
    """A side's `torch.profiler` and `torch.autograd.profiler` (observing the engine's ops, or the client's requests)."""
    kinds = {c.__name__: type(c.__name__, (c,), {"observe_ops": observe_ops}) for c in (profile, _AutogradProfile)}
    common = {"record_function": record_function, "EventList": EventList, "FunctionEvent": FunctionEvent}
    names = {"ProfilerActivity": ProfilerActivity, "ProfilerAction": ProfilerAction, "schedule": schedule}
    names["tensorboard_trace_handler"] = tensorboard_trace_handler
    return (
        types.SimpleNamespace(profile=kinds["profile"], **names, **common),
        types.SimpleNamespace(profile=kinds["_AutogradProfile"], **common),
    )
