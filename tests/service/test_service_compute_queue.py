"""ComputePool's wait for a slot: in turn (FIFO), bounded by bytes (max_queued_bytes) and time (queue_timeout_s)."""

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
    assert all(r.status == 503 and r.headers["Retry-After"] == "1" for r in refused)
    assert all("waited 0.15 s (queue_timeout_s) for a compute slot" in r.message for r in refused)
    assert pool.in_flight == 0 and pool.queued == 0


def _run_sized(pool: ComputePool, sizes, seconds: float):
    """Jobs of `seconds` each, one a body of each of `sizes` bytes, started in turn."""

    async def main():
        return await asyncio.gather(
            *[pool.run(time.sleep, seconds, nbytes=size) for size in sizes], return_exceptions=True
        )

    return asyncio.run(main())


def test_the_queue_is_bounded_by_bytes_not_by_a_count():
    pool = ComputePool(1, 30.0, queue_timeout_s=10.0, max_queued_bytes=1000)
    # the first runs; 20 small ones wait (far more than the old 4 x max_concurrency); the 500-byte one would
    # take the queue past 1000 bytes and is refused at once; the last small one still fits
    results = _run_sized(pool, [10**6] + [30] * 20 + [500, 30], 0.01)
    refused = [r for r in results if isinstance(r, ApiError)]
    assert [i for i, r in enumerate(results) if isinstance(r, ApiError)] == [21]
    (error,) = refused
    assert error.status == 503 and "max_queued_bytes" in error.message and "600 bytes" in error.message
    assert int(error.headers["Retry-After"]) >= 1
    assert pool.rejected == 1 and pool.queued == 0 and pool.queued_bytes == 0 and pool.in_flight == 0


def test_waiters_get_slots_first_come_first_served():
    pool = ComputePool(1, 30.0, queue_timeout_s=10.0)
    started = []

    def job(i):
        started.append(i)
        time.sleep(0.01)

    async def main():
        tasks = []
        for i in range(12):
            tasks.append(asyncio.ensure_future(pool.run(job, i)))
            await asyncio.sleep(0.002 if i == 5 else 0)  # the later ones arrive as slots are being passed on
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert started == list(range(12))
    assert pool.in_flight == 0 and pool.queued == 0


def test_a_wait_that_cannot_fit_queue_timeout_is_refused_at_once_saying_so():
    pool = ComputePool(1, 30.0, queue_timeout_s=1.0)
    pool._mean_s = pool._last_s = 0.4  # computations lately took 0.4 s each

    async def main():
        slow = [asyncio.ensure_future(pool.run(time.sleep, 0.05)) for _ in range(4)]
        await asyncio.sleep(0)  # one runs, three wait: about 3 x 0.4 s for a fourth
        refused = await asyncio.gather(pool.run(time.sleep, 0.05), return_exceptions=True)
        return refused, await asyncio.gather(*slow, return_exceptions=True)

    (error,), waited = asyncio.run(main())
    assert waited == [None] * 4  # the ones that fit were served
    assert isinstance(error, ApiError) and error.status == 503
    assert "queue_timeout_s=1 s" in error.message and "3 request(s) wait" in error.message
    assert int(error.headers["Retry-After"]) >= 1


def test_a_client_gone_while_waiting_leaves_the_queue():
    from service.compute import ClientGone

    pool = ComputePool(1, 30.0, queue_timeout_s=10.0)

    async def main():
        loop = asyncio.get_running_loop()
        gone = loop.create_future()
        first = asyncio.ensure_future(pool.run(time.sleep, 0.2))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(pool.run(time.sleep, 0.01, gone=gone, nbytes=100))
        await asyncio.sleep(0.05)
        assert pool.queued == 1 and pool.queued_bytes == 100
        gone.set_result(None)
        with pytest.raises(ClientGone):
            await waiting
        assert pool.queued == 0 and pool.queued_bytes == 0
        await first

    asyncio.run(main())
    assert pool.abandoned == 1 and pool.in_flight == 0


def test_queue_timeout_zero_lets_nothing_wait():
    pool = ComputePool(1, 30.0, queue_timeout_s=0.0)
    results = _run_all(pool, 3, 0.05)
    assert results[0] is None
    assert all(isinstance(r, ApiError) and "queue_timeout_s=0" in r.message for r in results[1:])


def test_max_queued_bytes_is_a_setting_from_env_toml_and_flags_reaching_the_pool(tmp_path, monkeypatch):
    from pydantic import ValidationError

    from service.app import create_app
    from service.settings import Settings, load_settings
    from wire.limits import Limits

    for name in ("MAX_QUEUED_BYTES", "QUEUE_TIMEOUT_S"):
        monkeypatch.delenv(f"GRADSERVE_{name}", raising=False)
    assert Settings().max_queued_bytes == Limits().max_queued_bytes == 128 * 2**20  # declared once, in wire.limits
    config = tmp_path / "gradserve.toml"
    config.write_text("max_queued_bytes = 1000\nqueue_timeout_s = 2.5\n")
    assert load_settings({}, str(config)).max_queued_bytes == 1000
    monkeypatch.setenv("GRADSERVE_MAX_QUEUED_BYTES", "2000")
    settings = load_settings({}, str(config))
    assert (settings.max_queued_bytes, settings.queue_timeout_s) == (2000, 2.5)
    assert settings.limits().max_queued_bytes == 2000
    pool = create_app(settings).state.pool
    assert (pool.max_queued_bytes, pool.queue_timeout_s) == (2000, 2.5)
    monkeypatch.setenv("GRADSERVE_MAX_QUEUED_BYTES", "-1")
    with pytest.raises(ValidationError):
        Settings()
