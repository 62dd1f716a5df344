"""No reference cycle per request (issue 24 item 4): a request's objects, its body and answer among them,
are freed by reference counting when it ends, not at the cyclic collector's next pass (a 64 MiB request's
input and output stayed until then, +128 MiB of RSS each). With the collector off, requests through the
real app leave nothing for `gc.collect()` to find; the app freezes what start-up made (`gc.freeze`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time

import pytest

from benchmarks import payloads
from service.app import GEN0_THRESHOLD, create_app
from service.compute import ComputePool
from service.errors import ApiError
from service.settings import Settings
from wire.codegen import GENERATOR


@contextlib.contextmanager
def collector_off():
    """gc disabled; yields a list that receives what `gc.collect()` found at the end. Code generation
    left running by an earlier test finishes first: its garbage is not the requests'."""
    GENERATOR.idle()
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    found = []
    try:
        yield found
    finally:
        found.append(gc.collect())
        if was:
            gc.enable()


async def _post(app, path: str, body: bytes, headers: dict) -> int:
    """One request through the ASGI app, as a server would make it: its status."""
    sent, disconnect = [], asyncio.Event()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    raw = [(k.lower().encode(), v.encode()) for k, v in {**headers, "content-length": str(len(body))}.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await app(scope, receive, send)
    disconnect.set()
    return sent[0]["status"]


def _bodies():
    tiny, seed = payloads.tiny_request(), payloads.seed_request()
    bad = {"graph": {"version": 1, "nodes": [{"id": "x", "op": "nope"}], "outputs": ["x"]}, "inputs": []}
    return {
        "tiny (on the loop)": (payloads.encode(*tiny, False), 200),
        "seed net binary (short)": (payloads.encode(*seed, True), 200),
        "seed net JSON (on the pool)": (payloads.encode(*seed, False), 200),
        "an invalid graph on the pool": ((json.dumps({**bad, "id": "p" * 9000}).encode(), {}), 422),
        "a malformed body": ((b'{"graph": ', {}), 400),
    }


@pytest.mark.parametrize("case", list(_bodies()))
def test_requests_through_the_app_leave_no_cyclic_garbage(case):
    (body, headers), status = _bodies()[case]
    headers = {"content-type": "application/json", **headers}

    threshold = gc.get_threshold()

    async def main():
        app = create_app(Settings(log_level="warning"))
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 0  # start-up's objects are out of the collector's way
            assert gc.get_threshold()[0] == GEN0_THRESHOLD  # and its passes out of the requests' way
            for _ in range(4):  # warm: plans, recorded and checked programs, thread pool
                assert await _post(app, "/backward", body, headers) == status
            with collector_off() as found:
                for _ in range(20):
                    assert await _post(app, "/backward", body, headers) == status
        return found[0]

    assert asyncio.run(main()) == 0
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == threshold  # unfrozen, put back at shutdown


def test_refused_and_timed_out_computations_leave_no_cyclic_garbage():
    pool = ComputePool(1, 0.05, queue_timeout_s=0.02)

    async def main():
        return await asyncio.gather(*[pool.run(time.sleep, 0.1) for _ in range(4)], return_exceptions=True)

    asyncio.run(main())  # warm: the thread pool
    # an app an earlier test left running elsewhere may have frozen the heap (`gc.freeze` at start-up) and unfreeze
    # it at its shutdown while this runs (its garbage, ~1M objects in a full-suite run, then collectable here):
    # the heap is unfrozen and collected before the window instead
    gc.unfreeze()
    with collector_off() as found:
        results = asyncio.run(main())
        # the timed-out computation's thread ends and frees its slot, however loaded the machine is (a fixed
        # 0.2 s read 6 objects in a full-suite run beside other work)
        deadline = time.monotonic() + 30
        while pool.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    assert all(isinstance(r, ApiError) for r in results)
    assert "compute_timeout_s" in results[0].message and all("queue_timeout_s" in r.message for r in results[1:])
    assert found[0] == 0
