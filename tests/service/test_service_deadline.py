"""service.body.Deadline: asyncio.timeout's protocol (the body read's deadline), on the loops the
service runs on."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from service.body import Deadline

LOOPS = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture(params=list(LOOPS))
def run(request):
    return LOOPS[request.param]


def test_an_await_past_the_deadline_raises_timeout_error(run):
    async def main():
        with pytest.raises(TimeoutError), Deadline(0.05):
            await asyncio.sleep(5)
        assert asyncio.current_task().cancelling() == 0  # the timer's cancel was taken back

    run(main())


def test_work_within_the_deadline_is_never_cancelled_later(run):
    async def main():
        with Deadline(0.05):
            await asyncio.sleep(0)
        await asyncio.sleep(0.15)  # past the deadline: the timer was cancelled on the way out
        return "done"

    assert run(main()) == "done"


@pytest.mark.parametrize("also_expired", [False, True])
def test_a_cancel_from_elsewhere_stays_a_cancel(run, also_expired):
    """The shutdown drain cancels a request's task: that is not a timeout, even when the deadline
    passes in the same loop step."""

    async def main():
        held = []

        async def reader():
            with Deadline(60) as deadline:
                held.append(deadline)
                await asyncio.sleep(5)

        task = asyncio.ensure_future(reader())
        await asyncio.sleep(0.01)
        if also_expired:
            held[0]._expire()  # the timer fires...
        task.cancel()  # ...and the drain cancels, before the task runs again
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
