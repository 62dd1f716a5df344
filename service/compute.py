"""Running computations off the event loop, with backpressure and a timeout; and when a short
one may run on the loop instead.

At most `max_concurrency` computations run at once, each on a thread of a pool of that size.
The others wait for a slot in one FIFO queue, bounded by bytes and time: the bytes of the bodies
waiting (`max_queued_bytes`) and how long each waits (`queue_timeout_s`). A request is refused
(503 with `Retry-After`, the time the queue needs to drain) only when its body would take the
queue past `max_queued_bytes`, when its wait would plausibly pass `queue_timeout_s` (the requests
ahead of it times the recent mean computation time, over the slots), or when it did wait that
long; the message says which. A freed slot passes straight to the first waiter, so nobody who
arrives later overtakes it. A computation that passes `compute_timeout_s`, whose client
disconnects (waiting or running), or that is still running when shutdown's drain ends, is
cancelled: the engine checks the cancel event between graph steps, so the thread stops at the
next node (one op already running finishes). A computation counts as in flight until its
thread has really finished, so backpressure never admits more work than there are threads.

A computation that certainly takes at most milliseconds may run on the event loop itself,
where it saves the two thread hand-offs (~0.1-0.3 ms): only while no computation is on the
pool or waiting for it, and only while the ones run on the loop lately took at most
INLINE_SHARE of its time (`may_run_inline`, `ran_inline`), or while it is the only request the
server is running (nothing else waits for the loop). A flood of them goes to the pool, so the
loop keeps answering other requests.

Nothing here makes a reference cycle per request (a job reaches its pool, never itself), so a
request's body and answer are freed when it ends, not at the cyclic collector's next pass.
"""

from __future__ import annotations

import asyncio
import collections
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from service.errors import ApiError
from wire import handler
from wire.run import cancel_scope

CANCELLED_AT_SHUTDOWN = threading.Event()  # a pool's shutdown cancelled running computations
INLINE_SHARE = 0.5  # of the event loop's time, at most, for short computations run on it
MEAN_WEIGHT = 0.2  # of the latest computation's time in the running mean the wait is estimated by


def _init_thread():
    # numpy's error state is per thread (a context variable): set it in every compute thread.
    handler.quiet_ieee()


class _Job:
    """One computation: runs `fn(*args)` on a compute thread and hands its outcome to the event
    loop's `answer` future, unless the request gave up first (then `on_abandon(result)` runs on
    the thread). Plain future and lock, no wrapping of concurrent futures: the wait costs one
    future and one timer on the loop. It gives its slot back with `pool._finish(job, seconds)`."""

    __slots__ = (
        "fn",
        "args",
        "on_abandon",
        "pool",
        "loop",
        "answer",
        "cancel",
        "lock",
        "abandoned",
        "finished",
        "result",
    )

    def __init__(self, fn, args, on_abandon, pool, loop):
        self.fn, self.args, self.on_abandon, self.pool, self.loop = fn, args, on_abandon, pool, loop
        self.answer = loop.create_future()
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = self.finished = False
        self.result = None

    def run(self):
        """On the compute thread."""
        if self.cancel.is_set():  # given up while queued behind the thread pool
            self.pool._finish(self, None)
            return
        start = time.perf_counter()
        try:
            with cancel_scope(self.cancel):
                result = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            self.pool._finish(self, time.perf_counter() - start)
            self._hand_over(None, exc)
            return
        with self.lock:
            self.finished, self.result = True, result
            abandoned = self.abandoned
        self.pool._finish(self, time.perf_counter() - start)
        if not abandoned:
            self._hand_over(result, None)
        elif self.on_abandon is not None:
            self.on_abandon(result)

    def _hand_over(self, result, error):
        try:
            self.loop.call_soon_threadsafe(_settle, self.answer, result, error)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    def give_up(self):
        """On the loop, when the request stops waiting: cancel, and clean up a finished result."""
        self.cancel.set()
        with self.lock:
            self.abandoned = True
            finished, result = self.finished, self.result
        if finished and self.on_abandon is not None:
            self.on_abandon(result)


def _settle(answer, result, error):
    if answer is None or answer.done():  # None: the request has its outcome already (`ComputePool.run`)
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)


class _Expired(Exception):
    """compute_timeout_s passed before the computation's answer came."""


class _Waited(Exception):
    """queue_timeout_s passed before a compute slot came."""


class ClientGone(Exception):
    """The client disconnected while its computation waited or ran: nobody is left to answer."""


def _expire(answer, error=_Expired):
    if not answer.done():
        answer.set_exception(error())


def _watch(gone: asyncio.Future | None, answer: asyncio.Future):
    """Make `answer` raise ClientGone when `gone` completes (the client disconnected); the callback,
    to remove it again (None without `gone`)."""
    if gone is None:
        return None

    def on_gone(watch):
        if not watch.cancelled():
            _expire(answer, ClientGone)

    gone.add_done_callback(on_gone)
    return on_gone


def _figure(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} bytes"


class ComputePool:
    def __init__(
        self,
        max_concurrency: int,
        timeout_s: float,
        queue_timeout_s: float = 0.0,
        max_queued_bytes: float = math.inf,
    ):
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.queue_timeout_s = queue_timeout_s
        self.max_queued_bytes = max_queued_bytes
        self._pool = None  # made on first use, so an app whose lifespan ran twice still computes
        self._lock = threading.Lock()  # _in_flight, _waiters and _queued_bytes change under it
        self._in_flight = 0  # slots taken: running, or passed to a waiter that has not started yet
        self._jobs = set()
        self._waiters = collections.deque()  # (future, bytes) of the requests waiting for a slot, first first
        self._queued_bytes = 0
        self._mean_s = self._last_s = 0.0  # a computation's time on a thread: running mean, latest (0: none yet)
        self._loop = None
        self._inline_after = 0.0  # time.monotonic() from which a short computation may run on the loop again
        self.on_loop = 0  # short computations run on the event loop instead (`ran_inline`)
        self.rejected = 0  # refused with 503 because no slot came in time (or the queue was full)
        self.timed_out = 0  # answered 503 after compute_timeout_s
        self.abandoned = 0  # cancelled because the client disconnected

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def may_run_inline(self, alone: bool = False) -> bool:
        """Whether a short computation may run on the event loop now (see the module doc); `alone`: its request
        is the only one the server is running, so its turn comes whatever the loop's share."""
        return self._in_flight == 0 and not self._waiters and (alone or time.monotonic() >= self._inline_after)

    def ran_inline(self, seconds: float) -> None:
        """Charge a computation that ran `seconds` on the loop: the next one may run there after the
        loop has done other things for as long as INLINE_SHARE allows."""
        self._inline_after = max(self._inline_after, time.monotonic()) + seconds * (1 / INLINE_SHARE - 1)
        self.on_loop += 1

    def drain_s(self, ahead: int | None = None) -> float:
        """Seconds, by the recent mean, until the computations in flight and `ahead` waiting ones (all
        that wait by default) have left the queue and a slot is free for one more."""
        waiting = len(self._waiters) if ahead is None else ahead
        return (waiting // self.max_concurrency + 1) * self._mean_s

    def _retry_after(self) -> dict:
        return {"Retry-After": str(max(1, math.ceil(self.drain_s())))}

    def _refusal(self, nbytes: int) -> str | None:
        """Why a request of `nbytes` that finds every slot taken may not wait (None: it may). Its
        wait is refused by estimate only when even an optimistic one passes queue_timeout_s: the
        requests ahead, a computation each at the lesser of the recent mean and the latest."""
        waiting, slots = len(self._waiters), self.max_concurrency
        if self.queue_timeout_s <= 0:
            return f"all {slots} compute slot(s) are taken and queue_timeout_s=0 lets nothing wait"
        if self._queued_bytes + nbytes > self.max_queued_bytes:
            return (
                f"the wait queue holds {_figure(self._queued_bytes)} of requests ({waiting}); with this one's "
                f"{_figure(nbytes)} it would pass max_queued_bytes={_figure(self.max_queued_bytes)}"
            )
        each = min(self._mean_s, self._last_s)
        if waiting // slots * each > self.queue_timeout_s:
            return (
                f"{waiting} request(s) wait for {slots} compute slot(s): at {each * 1000:.0f} ms a computation "
                f"lately, about {waiting // slots * each:.1f} s, over queue_timeout_s={self.queue_timeout_s:g} s"
            )
        return None

    def busy_error(self, why: str) -> ApiError:
        with self._lock:
            self.rejected += 1
        return ApiError(503, f"the server is busy: {why}; retry later", headers=self._retry_after())

    async def _acquire(self, nbytes: int, gone: asyncio.Future | None) -> None:
        """Take a slot: at once when one is free and nobody waits, else in turn (FIFO) within
        queue_timeout_s; else raise the busy error (or ClientGone when the client leaves)."""
        with self._lock:
            if not self._waiters and self._in_flight < self.max_concurrency:
                self._in_flight += 1
                return
            why = self._refusal(nbytes)
            if why is None:
                loop = asyncio.get_running_loop()
                entry = (loop.create_future(), nbytes)
                self._waiters.append(entry)
                self._queued_bytes += nbytes
        if why is not None:
            raise self.busy_error(why)
        waiter = entry[0]
        timer = loop.call_later(self.queue_timeout_s, _expire, waiter, _Waited)
        watch = _watch(gone, waiter)
        try:
            await waiter  # a slot passed to it by `_pass_slot`
        except BaseException as exc:
            with self._lock:
                if entry in self._waiters:  # bounded by max_queued_bytes; only when it gives up
                    self._waiters.remove(entry)
                    self._queued_bytes -= nbytes
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._pass_slot()  # given a slot as it gave up: pass it on
            if isinstance(exc, _Waited):
                raise self.busy_error(
                    f"waited {self.queue_timeout_s:g} s (queue_timeout_s) for a compute slot, "
                    f"behind {len(self._waiters)} other request(s) now waiting"
                ) from None
            if isinstance(exc, ClientGone):
                with self._lock:
                    self.abandoned += 1
            raise
        finally:
            timer.cancel()
            if watch is not None:
                gone.remove_done_callback(watch)
            entry = waiter = watch = None  # a _Waited's traceback holds this frame: it must not reach the future

    def _pass_slot(self):
        """On the loop: the slot freed by a computation goes to the first request still waiting, or
        back to the pool when none waits."""
        with self._lock:
            while self._waiters:
                waiter, nbytes = self._waiters.popleft()
                self._queued_bytes -= nbytes
                if not waiter.done():
                    waiter.set_result(None)
                    return
            self._in_flight -= 1

    def _finish(self, job, seconds: float | None):
        """On the compute thread, when `job` is done: its slot to the next waiter, or free."""
        with self._lock:
            self._jobs.discard(job)
            if seconds is not None:
                self._mean_s += MEAN_WEIGHT * (seconds - self._mean_s) if self._mean_s else seconds
                self._last_s = seconds
            loop = self._loop if self._waiters else None
            if loop is None:
                self._in_flight -= 1
                return
        try:
            loop.call_soon_threadsafe(self._pass_slot)
        except RuntimeError:  # the loop is closed: nobody will take it
            with self._lock:
                self._in_flight -= 1

    async def run(self, fn, *args, on_abandon=None, gone: asyncio.Future | None = None, nbytes: int = 0):
        """fn(*args) on a compute thread; `nbytes`: what the request holds while it waits (its body).
        `on_abandon(result)` runs on that thread when the computation finishes after its request
        gave up on it (timeout, client gone, shutdown). `gone` completes when the client
        disconnects: the computation (or its wait) is then cancelled and `ClientGone` raised."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        await self._acquire(nbytes, gone)
        job = _Job(fn, args, on_abandon, self, loop)
        with self._lock:
            self._jobs.add(job)
        try:
            self._threads().submit(job.run)
        except BaseException:
            self._finish(job, None)
            raise
        timer = loop.call_later(self.timeout_s, _expire, job.answer)
        watch = _watch(gone, job.answer)
        try:
            return await job.answer
        except _Expired:
            job.give_up()
            with self._lock:
                self.timed_out += 1
            raise ApiError(
                503,
                f"the computation took longer than compute_timeout_s={self.timeout_s:g} s and was cancelled",
                headers=self._retry_after(),
            ) from None
        except (ClientGone, asyncio.CancelledError) as exc:
            job.give_up()
            if isinstance(exc, ClientGone):
                with self._lock:
                    self.abandoned += 1
            raise
        finally:
            timer.cancel()
            if watch is not None:
                gone.remove_done_callback(watch)
            # an error's traceback holds this frame and the thread's (with the job): they must not reach the future
            job.answer = watch = None

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.max_concurrency, thread_name_prefix="gradserve-compute", initializer=_init_thread
                )
            return self._pool

    def cancel_all(self) -> int:
        """Cancel every running computation (at its next graph step); how many there were."""
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            job.cancel.set()
        return len(jobs)

    def shutdown(self):
        """Cancel running computations and let go of the threads (they stop at their next step)."""
        if self.cancel_all():
            CANCELLED_AT_SHUTDOWN.set()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
