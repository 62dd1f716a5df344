"""Running computations off the event loop, with backpressure and a timeout.

At most `max_concurrency` computations run at once, each on a thread of a pool of that size.
One more is refused at once (503, `Retry-After: 1`): no queue builds up. A computation that
passes `compute_timeout_s` is answered 503 and cancelled: the engine checks the cancel event
between graph steps, so the thread stops at the next node (one op already running finishes).
A computation counts as in flight until its thread has really finished, timed out or not,
so backpressure never admits more work than there are threads.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy

from service.errors import ApiError
from wire.run import cancel_scope


def _init_thread():
    # numpy's error state is per thread (a context variable): set it in every compute thread.
    numpy.seterr(all="ignore")


class _Job:
    """One computation: runs `fn(*args)` on a compute thread and hands its outcome to the event
    loop's `answer` future, unless the request gave up first (then `on_abandon(result)` runs on
    the thread). Plain future and lock, no wrapping of concurrent futures: the wait costs one
    future and one timer on the loop."""

    __slots__ = ("fn", "args", "on_abandon", "release", "loop", "answer", "cancel", "lock", "abandoned", "finished",
                 "result")

    def __init__(self, fn, args, on_abandon, release, loop):
        self.fn, self.args, self.on_abandon, self.release, self.loop = fn, args, on_abandon, release, loop
        self.answer = loop.create_future()
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = self.finished = False
        self.result = None

    def run(self):
        """On the compute thread."""
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


def _expire(answer):
    if not answer.done():
        answer.set_exception(_Expired())


class ComputePool:
    def __init__(self, max_concurrency: int, timeout_s: float):
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self._pool = None  # made on first use, so an app whose lifespan ran twice still computes
        self._lock = threading.Lock()
        self._in_flight = 0
        self.rejected = 0   # refused because all slots were taken
        self.timed_out = 0  # answered 503 after compute_timeout_s

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def full(self) -> bool:
        return self._in_flight >= self.max_concurrency

    def admit(self) -> None:
        """Raise the busy error now when every slot is taken (a cheap check before reading a body)."""
        if self._in_flight >= self.max_concurrency:
            with self._lock:
                self.rejected += 1
            raise self.busy_error()

    def _acquire(self) -> bool:
        with self._lock:
            if self._in_flight >= self.max_concurrency:
                self.rejected += 1
                return False
            self._in_flight += 1
            return True

    def _release(self):
        with self._lock:
            self._in_flight -= 1

    def busy_error(self) -> ApiError:
        return ApiError(503, f"the server is busy: {self.max_concurrency} computation(s) in flight; retry shortly",
                        headers={"Retry-After": "1"})

    async def run(self, fn, *args, on_abandon=None):
        """fn(*args) on a compute thread. `on_abandon(result)` runs on that thread when the
        computation finishes after its request gave up on it (timeout or client gone)."""
        if not self._acquire():
            raise self.busy_error()
        loop = asyncio.get_running_loop()
        job = _Job(fn, args, on_abandon, self._release, loop)
        try:
            self._threads().submit(job.run)
        except BaseException:
            self._release()
            raise
        timer = loop.call_later(self.timeout_s, _expire, job.answer)
        try:
            return await job.answer
        except _Expired:
            job.give_up()
            with self._lock:
                self.timed_out += 1
            raise ApiError(503, f"the computation took longer than compute_timeout_s={self.timeout_s:g} s and was "
                           "cancelled", headers={"Retry-After": "1"}) from None
        except asyncio.CancelledError:
            job.give_up()
            raise
        finally:
            timer.cancel()

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="gradserve-compute",
                                                initializer=_init_thread)
            return self._pool

    def shutdown(self):
        """Let go of the threads (running computations finish in the background)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=False)
