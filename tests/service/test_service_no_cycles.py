"""No reference cycle per request (issue 24 item 4): a request's objects, its body and answer among them,
are freed by reference counting when it ends, not at the cyclic collector's next pass (a 64 MiB request's
input and output stayed until then, +128 MiB of RSS each). With the collector off, requests through the
real app leave nothing for `gc.collect()` to find; the app freezes what start-up made (`gc.freeze`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import payloads
from service.app import GEN0_THRESHOLD, create_app
from service.compute import ComputePool
from service.errors import ApiError
from service.settings import Settings
from wire.codegen import GENERATOR

ROOT = Path(__file__).resolve().parents[2]


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
        gc.set_debug(gc.DEBUG_SAVEALL)  # what was found is kept in gc.garbage, to be named by `_named`
        try:
            found.append(gc.collect())
            found.append(_named(gc.garbage))
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        if was:
            gc.enable()


def _named(garbage: list) -> list[str]:
    """What the collector found, readably: type names, and where a frame or code object comes from."""
    names = []
    for obj in garbage[:40]:
        code = getattr(obj, "f_code", None) or (obj if type(obj).__name__ == "code" else None)
        where = f" {code.co_filename}:{code.co_name}" if code is not None else ""
        names.append(type(obj).__name__ + where + ("" if where else f" {repr(obj)[:80]}"))
    return names


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
        return found

    found = asyncio.run(main())
    assert found[0] == 0, found[1]
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == threshold  # unfrozen, put back at shutdown


def _refusal_window() -> list:
    """A timed-out computation and three refused waits through a warm pool, with the collector off: what
    `gc.collect()` then finds (a count, then the objects named)."""
    pool = ComputePool(1, 0.05, queue_timeout_s=0.02)

    async def main():
        return await asyncio.gather(*[pool.run(time.sleep, 0.1) for _ in range(4)], return_exceptions=True)

    asyncio.run(main())  # warm: the thread pool
    with collector_off() as found:
        results = asyncio.run(main())
        # the timed-out computation's thread ends and frees its slot, however loaded the machine is
        deadline = time.monotonic() + 30
        while pool.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    assert all(isinstance(r, ApiError) for r in results)
    assert "compute_timeout_s" in results[0].message and all("queue_timeout_s" in r.message for r in results[1:])
    return found


def test_refused_and_timed_out_computations_leave_no_cyclic_garbage():
    # in a fresh interpreter: in a full-suite run, threads and apps earlier tests leave behind (and the heap one of
    # them froze and unfreezes at its shutdown) make garbage of their own while the window is open
    done = subprocess.run(
        [sys.executable, __file__, "--refusal-window"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found[0] == 0, found[1]


if __name__ == "__main__" and sys.argv[1:] == ["--refusal-window"]:
    print(json.dumps(_refusal_window()))
