"""The PostgreSQL backend's ``socket_timeout`` watchdog (backends/postgres/watchdog.py)
without a server: a checkout that outlives it is cancelled and told so, a cancellation
by anyone else stays a cancellation, and nothing is left scheduled once checkouts end.
tests/backends/test_postgres_frozen.py is the same against a frozen server."""

from __future__ import annotations

import asyncio

import pytest

from statekeeper.backends.postgres.watchdog import Watchdog


async def _checkout(watch: Watchdog, forever: asyncio.Event) -> str:
    token = watch.start()
    try:
        await forever.wait()  # a server that never answers
        return "answered"
    except asyncio.CancelledError:
        if watch.fired(token):
            return "timed out"
        raise
    finally:
        watch.stop(token)


async def test_a_checkout_that_outlives_the_timeout_is_ended_and_told() -> None:
    watch = Watchdog(0.05)
    task = asyncio.create_task(_checkout(watch, asyncio.Event()))
    assert await asyncio.wait_for(task, 60) == "timed out"
    assert task.cancelling() == 0  # the watchdog's cancellation was undone
    watch.close()


async def test_a_cancellation_by_the_caller_stays_a_cancellation() -> None:
    watch = Watchdog(3600)
    started = asyncio.Event()

    async def run() -> str:
        started.set()
        return await _checkout(watch, asyncio.Event())

    task = asyncio.create_task(run())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    watch.close()


async def test_checkouts_that_answer_leave_nothing_behind() -> None:
    watch = Watchdog(0.05)
    answered = asyncio.Event()
    answered.set()
    for _ in range(3):
        assert await _checkout(watch, answered) == "answered"
    for _ in range(6000):  # the timer looks once more, finds nothing out, and stops
        if watch._timer is None:
            break
        await asyncio.sleep(0.01)
    assert watch._timer is None
    assert not watch._out and not watch._fired
