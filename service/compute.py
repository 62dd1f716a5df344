"""Running computations off the event loop, with backpressure and a timeout; and when a short
one may run on the loop instead.

At most `max_concurrency` computations run at once, each on a thread of a pool of that size.
One more waits for a slot at most `queue_timeout_s` (and at most `max_queued` wait at once);
past that it is refused (503, `Retry-After: 1`). A computation that passes `compute_timeout_s`,
whose client disconnects, or that is still running when shutdown's drain ends, is cancelled:
the engine checks the cancel event between graph steps, so the thread stops at the next node
(one op already running finishes). A computation counts as in flight until its thread has
really finished, so backpressure never admits more work than there are threads.

A computation that certainly takes at most milliseconds may run on the event loop itself,
where it saves the two thread hand-offs (~0.1-0.3 ms): only while no computation is on the
pool or waiting for it, and only while the ones run on the loop lately took at most
INLINE_SHARE of its time (`may_run_inline`, `ran_inline`). A flood of them goes to the pool,
so the loop keeps answering other requests.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy

from service.errors import ApiError
from wire.run import cancel_scope

CANCELLED_AT_SHUTDOWN = threading.Event()  # a pool's shutdown cancelled running computations
INLINE_SHARE = 0.5  # of the event loop's time, at most, for short computations run on it


def _init_thread():
    # numpy's error state is per thread (a context variable): set it in every compute thread.
    numpy.seterr(all="ignore")


class _Job:
    """One computation: runs `fn(*args)` on a compute thread and hands its outcome to the event
    loop's `answer` future, unless the request gave up first (then `on_abandon(result)` runs on
    the thread). Plain future and lock, no wrapping of concurrent futures: the wait costs one
    future and one timer on the loop."""

    __slots__ = (
        "fn",
        "args",
        "on_abandon",
        "release",
        "loop",
        "answer",
        "cancel",
        "lock",
        "abandoned",
        "finished",
        "result",
    )

    def __init__(self, fn, args, on_abandon, release, loop):
        self.fn, self.args, self.on_abandon, self.release, self.loop = fn, args, on_abandon, release, loop
        self.answer = loop.create_future()
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = self.finished = False
        self.result = None

    def run(self):
        """On the compute thread."""
        if self.cancel.is_set():  # given up while queued behind the thread pool
            self.release()
            return
        try:
            with cancel_scope(self.cancel):
                result = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            self.release()
            self._hand_over(None, exc)
            return
        with self.lock:
            self.finished, self.result = True, result
            abandoned = self.abandoned
        self.release()
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
    if answer.done():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)


class _Expired(Exception):
    """compute_timeout_s passed before the computation's answer came."""


class ClientGone(Exception):
    """The client disconnected while its computation ran: nobody is left to answer."""


def _expire(answer, error=_Expired):
    if not answer.done():
        answer.set_exception(error())


class ComputePool:
    def __init__(
        self, max_concurrency: int, timeout_s: float, queue_timeout_s: float = 0.0, max_queued: int | None = None
    ):
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.queue_timeout_s = queue_timeout_s
        self.max_queued = 4 * max_concurrency if max_queued is None else max_queued
        self._pool = None  # made on first use, so an app whose lifespan ran twice still computes
        self._lock = threading.Lock()
        self._in_flight = 0
        self._jobs = set()
        self._waiters = collections.deque()  # futures of requests waiting for a slot, on the loop
        self._loop = None
        self._inline_after = 0.0  # time.monotonic() from which a short computation may run on the loop again
        self.on_loop = 0  # short computations run on the event loop instead (`ran_inline`)
        self.rejected = 0  # refused because all slots were taken past queue_timeout_s
        self.timed_out = 0  # answered 503 after compute_timeout_s
        self.abandoned = 0  # cancelled because the client disconnected

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def may_run_inline(self) -> bool:
        """Whether a short computation may run on the event loop now (see the module doc)."""
        return self._in_flight == 0 and not self._waiters and time.monotonic() >= self._inline_after

    def ran_inline(self, seconds: float) -> None:
        """Charge a computation that ran `seconds` on the loop: the next one may run there after the
        loop has done other things for as long as INLINE_SHARE allows."""
        self._inline_after = max(self._inline_after, time.monotonic()) + seconds * (1 / INLINE_SHARE - 1)
        self.on_loop += 1

    def _try_acquire(self) -> bool:
        with self._lock:
            if self._in_flight >= self.max_concurrency:
                return False
            self._in_flight += 1
            return True

    def _release(self):
        with self._lock:
            self._in_flight -= 1
        loop = self._loop
        if self._waiters and loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake_one)
            except RuntimeError:  # the loop is closed
                pass

    def _wake_one(self):
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _acquire(self) -> None:
        """Take a slot, waiting at most queue_timeout_s for one; else raise the busy error."""
        if self._try_acquire():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.queue_timeout_s
        while len(self._waiters) < self.max_queued and loop.time() < deadline:
            waiter = loop.create_future()
            self._waiters.append(waiter)
            if self._in_flight < self.max_concurrency:  # freed before we queued: no wake-up will come
                waiter.set_result(None)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                break
            finally:
                waiter.cancel()
                if waiter in self._waiters:  # at most max_queued: a short scan
                    self._waiters.remove(waiter)
            if self._try_acquire():
                return
        with self._lock:
            self.rejected += 1
        if self._in_flight < self.max_concurrency:  # a slot freed as we gave up: let the next one have it
            self._wake_one()
        raise self.busy_error()

    def busy_error(self) -> ApiError:
        return ApiError(
            503,
            f"the server is busy: {self.max_concurrency} computation(s) in flight and none finished "
            f"within queue_timeout_s={self.queue_timeout_s:g} s; retry shortly",
            headers={"Retry-After": "1"},
        )

    async def run(self, fn, *args, on_abandon=None, gone: asyncio.Future | None = None):
        """fn(*args) on a compute thread. `on_abandon(result)` runs on that thread when the
        computation finishes after its request gave up on it (timeout, client gone, shutdown).
        `gone` completes when the client disconnects: the computation is then cancelled and
        `ClientGone` raised."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        await self._acquire()
        job = _Job(fn, args, on_abandon, self._release, loop)
        with self._lock:
            self._jobs.add(job)
        job.release = lambda: self._finish(job)
        try:
            self._threads().submit(job.run)
        except BaseException:
            self._finish(job)
            raise
        timer = loop.call_later(self.timeout_s, _expire, job.answer)
        if gone is not None:
            gone.add_done_callback(lambda watch: watch.cancelled() or _expire(job.answer, ClientGone))
        try:
            return await job.answer
        except _Expired:
            job.give_up()
            with self._lock:
                self.timed_out += 1
            raise ApiError(
                503,
                f"the computation took longer than compute_timeout_s={self.timeout_s:g} s and was cancelled",
                headers={"Retry-After": "1"},
            ) from None
        except (ClientGone, asyncio.CancelledError) as exc:
            job.give_up()
            if isinstance(exc, ClientGone):
                with self._lock:
                    self.abandoned += 1
            raise
        finally:
            timer.cancel()

    def _finish(self, job):
        with self._lock:
            self._jobs.discard(job)
        self._release()

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
