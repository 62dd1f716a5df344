"""ComputePool's bounded wait for a slot: requests wait up to queue_timeout_s, in turn, then 503."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.compute import ComputePool
from service.errors import ApiError


def _run_all(pool: ComputePool, count: int, seconds: float):
    async def main():
        return await asyncio.gather(*[pool.run(time.sleep, seconds) for _ in range(count)], return_exceptions=True)

    return asyncio.run(main())


def test_requests_wait_for_a_slot_in_turn():
    pool = ComputePool(1, 30.0, queue_timeout_s=10.0)
    t0 = time.monotonic()
    assert _run_all(pool, 4, 0.1) == [None] * 4
    assert 0.35 < time.monotonic() - t0 < 5
    assert pool.in_flight == 0 and pool.queued == 0 and pool.rejected == 0


def test_past_queue_timeout_the_waiting_ones_get_503():
    pool = ComputePool(1, 30.0, queue_timeout_s=0.15)
    results = _run_all(pool, 4, 0.3)
    refused = [r for r in results if isinstance(r, ApiError)]
    assert results[0] is None and len(refused) == 3 and pool.rejected == 3
    assert all(r.status == 503 and r.headers["Retry-After"] == "1" and "queue_timeout_s" in r.message for r in refused)
    assert pool.in_flight == 0 and pool.queued == 0


@pytest.mark.parametrize("max_queued", [0, 2])
def test_no_more_than_max_queued_wait(max_queued):
    pool = ComputePool(1, 30.0, queue_timeout_s=10.0, max_queued=max_queued)
    results = _run_all(pool, 5, 0.2)
    assert sum(r is None for r in results) == 1 + max_queued
    assert pool.rejected == 4 - max_queued
