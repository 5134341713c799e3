"""A ``durability="async"`` store a worker keeps open across event loops made, run and
closed per job (``run_until_complete`` then ``close``, without ``asyncio.run``'s
cancellation of the loop's tasks) still flushes by interval on the next loop, and
closes cleanly.

Was: the write-behind's guard and flush timer stayed those of the first loop, closed:
no later append armed a timer (one "was armed"), so acknowledged appends waited for
``flush_size`` of them, however long the worker ran (the documented RPO is
``flush_interval``); and ``close()`` from another loop raised ``RuntimeError: Event loop
is closed`` (the dead loop's guard was told the buffer was empty).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from statekeeper import StateStore, SyncStateStore


def _flush_timers(loop: asyncio.AbstractEventLoop, behind: object) -> list[object]:
    scheduled = getattr(loop, "_scheduled", [])  # (CPython's heap of TimerHandles)
    return [
        h
        for h in scheduled
        if not h.cancelled() and getattr(h._callback, "__self__", None) is behind
    ]


def test_a_loop_per_job_still_flushes_by_interval_and_closes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = StateStore(url, durability="async", flush_interval=3600.0, witness=False)
    behind = store._writes.behind
    armed: list[int] = []

    async def job(n: int) -> None:
        await store.save("a", {"n": n})  # acknowledged, buffered
        armed.append(len(_flush_timers(asyncio.get_running_loop(), behind)))

    for n in range(3):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(job(n))
        finally:
            loop.close()  # (no asyncio.run: the buffer's tasks are not cancelled)
    assert armed == [1, 1, 1]  # was [1, 0, 0]: no flush by interval after the first loop
    asyncio.run(store.close())  # was: RuntimeError: Event loop is closed
    with SyncStateStore(url, witness=False) as other:
        assert other.head("a") == 3
        assert other.load("a").data == {"n": 2}


def test_a_flush_its_loop_never_ran_is_made_on_the_next_loop(tmp_path: Path) -> None:
    """The interval's timer fired in a job's last loop iteration: its flush task was
    made and the loop closed before it ran. The next flush (or ``close()``) awaited that
    task, never to run: ``RuntimeError: ... attached to a different loop`` and every
    acknowledged append buffered lost (the store dropped with them unwritten)."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = StateStore(url, durability="async", flush_interval=3600.0, witness=False)
    behind = store._writes.behind
    assert behind is not None

    async def job(n: int, fire: bool) -> None:
        await store.save(f"a{n}", {"n": n})  # acknowledged, buffered
        if fire:  # the timer's callback, run as the loop's last step
            (timer,) = _flush_timers(asyncio.get_running_loop(), behind)
            timer._run()  # type: ignore[attr-defined]

    for n in range(3):
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(job(n, fire=n == 1))
        finally:
            loop.close()  # (the flush task the timer made never ran)
    asyncio.run(store.close())  # was: RuntimeError ('attached to a different loop')
    with SyncStateStore(url, witness=False) as other:
        assert [other.head(f"a{n}") for n in range(3)] == [1, 1, 1]
