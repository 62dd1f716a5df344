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

from engine.graph import cancel_scope
from service.errors import ApiError


def _init_thread():
    # numpy's error state is per thread (a context variable): set it in every compute thread.
    numpy.seterr(all="ignore")


def _retrieve(future):
    if not future.cancelled():
        future.exception()


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
        cancel = threading.Event()
        state = {"abandoned": False, "done": False, "result": None}
        handoff = threading.Lock()

        def job():
            try:
                with cancel_scope(cancel):
                    result = fn(*args)
                with handoff:
                    state["done"], state["result"] = True, result
                    abandoned = state["abandoned"]
                if abandoned and on_abandon is not None:
                    on_abandon(result)
                return result
            finally:
                self._release()

        def give_up():
            cancel.set()
            with handoff:
                state["abandoned"] = True
                finished, result = state["done"], state["result"]
            if finished and on_abandon is not None:
                on_abandon(result)

        try:
            future = self._threads().submit(job)
        except BaseException:
            self._release()
            raise
        try:
            waiter = asyncio.wrap_future(future)
            waiter.add_done_callback(_retrieve)  # an abandoned job's error is not "never retrieved"
            return await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except asyncio.TimeoutError:
            give_up()
            with self._lock:
                self.timed_out += 1
            raise ApiError(503, f"the computation took longer than compute_timeout_s={self.timeout_s:g} s and was "
                           "cancelled", headers={"Retry-After": "1"}) from None
        except asyncio.CancelledError:
            give_up()
            raise

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
