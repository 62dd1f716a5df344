"""`service.body.read_body` takes a message that is there already without arming a timer, and awaits one that
is not as asyncio's Task would (within the idle and whole-body bounds), on asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from service.body import BodyBudget, BodyHold, read_body
from service.errors import ApiError
from wire.limits import Limits

HEADERS = {"content-length": "6", "content-type": "application/octet-stream"}
LOOPS = [asyncio.run, uvloop.run]


def _read(receive, idle_s: float = 10.0, timeout_s: float = 10.0):
    return read_body(receive, HEADERS, Limits(), None, BodyHold(BodyBudget(2**20, idle_s=idle_s)), timeout_s)


def _later(messages, delay: float):
    """An ASGI receive whose messages each come `delay` seconds after it is asked (an Event, as uvicorn's)."""
    pending = list(messages)

    async def receive():
        event = asyncio.Event()
        asyncio.get_running_loop().call_later(delay, event.set)
        await event.wait()
        return pending.pop(0)

    return receive


@pytest.mark.parametrize("run", LOOPS)
def test_a_body_already_received_is_read_without_a_wait(run):
    async def receive():
        return {"type": "http.request", "body": b"abcdef", "more_body": False}

    async def main():
        loop = asyncio.get_running_loop()
        timers = len(getattr(loop, "_scheduled", ()))
        body = await _read(receive)
        return body, len(getattr(loop, "_scheduled", ())) - timers

    body, new_timers = run(main())
    assert body == b"abcdef" and new_timers == 0


@pytest.mark.parametrize("run", LOOPS)
def test_a_body_that_comes_later_in_pieces_is_awaited_whole(run):
    receive = _later(
        [
            {"type": "http.request", "body": b"abc", "more_body": True},
            {"type": "http.request", "body": b"def", "more_body": False},
        ],
        0.02,
    )
    assert bytes(run(_read(receive))) == b"abcdef"


@pytest.mark.parametrize("run", LOOPS)
def test_a_stalled_body_is_refused_with_408_after_the_idle_bound(run):
    receive = _later([{"type": "http.request", "body": b"abc", "more_body": True}], 0.01)

    async def stalls_after_first():
        message = await receive() if not calls else await asyncio.sleep(3600)
        calls.append(1)
        return message

    calls: list = []
    with pytest.raises(ApiError) as caught:
        run(_read(stalls_after_first, idle_s=0.1))
    assert caught.value.status == 408 and "body_idle_timeout_s=0.1" in caught.value.message


@pytest.mark.parametrize("run", LOOPS)
def test_a_cancelled_read_is_cancelled_not_timed_out(run):
    async def main():
        task = asyncio.ensure_future(_read(_later([{"type": "http.request", "body": b"abcdef"}], 3600)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert run(main())
