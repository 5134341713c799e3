"""The background thread's sleep plan does not walk every task of the process.

``SharedLoop._wait`` (before each sleep of the background thread: every ``_POLL``
seconds while the loop holds a task) and ``_wanted`` (after a sync call, until that
thread is started) asked whether a task on the loop needs it run. They asked
``asyncio.all_tasks(loop)``, which walks every task of the process — every loop's —
to pick this loop's: an async application with 10 000 tasks on its own loop cost each
plan ~1.7 ms of the GIL (50 000: ~12 ms, more than half of each ``_POLL``). The loop's
own tasks are now kept by its task factory, and only those are looked at. Measured in
this thread's CPU time (not wall time: the machine is shared), the best of a few
rounds, against the same loop with no task elsewhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from statekeeper.store.shared_loop import SharedLoop

_MANY = 20_000


def _cpu(fn: Callable[[], object], rounds: int = 20) -> float:
    """The least CPU time of this thread over ``rounds`` calls of ``fn``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


async def _noop() -> None:
    return None


def test_planning_a_sleep_costs_no_more_with_many_tasks_on_another_loop() -> None:
    shared = SharedLoop("statekeeper-test-many-tasks")
    other = asyncio.new_event_loop()
    try:
        shared.call(_noop())
        few_cost = min(_cpu(shared._wait) for _ in range(2))
        released = asyncio.Event()

        async def waiting() -> None:
            await released.wait()

        async def spawn() -> list[asyncio.Task[None]]:
            return [asyncio.ensure_future(waiting()) for _ in range(_MANY)]

        tasks = other.run_until_complete(spawn())
        other.run_until_complete(asyncio.sleep(0))  # (each task now waits)
        many_cost = min(_cpu(shared._wait) for _ in range(2))
        # a walk of every task costs ~1000 times as much; a look at the loop's own, ~1
        assert many_cost < 20 * few_cost + 50e-6, (few_cost, many_cost)

        async def finish() -> None:
            released.set()
            await asyncio.gather(*tasks)

        other.run_until_complete(finish())
    finally:
        other.close()
        shared.stop()


def test_a_task_on_the_loop_still_has_it_polled() -> None:
    """A task left on the loop (not one that only waits) keeps the background thread
    looking every ``_POLL`` seconds; once it is done, the idle wait again."""
    from statekeeper.store.shared_loop import _IDLE, _POLL

    shared = SharedLoop("statekeeper-test-task-polled")
    try:
        release = shared.call(_make_future(shared))

        async def left() -> None:
            await release

        async def start() -> asyncio.Task[None]:
            return asyncio.get_running_loop().create_task(left())

        task = shared.call(start())
        assert shared._wait() == _POLL
        shared.call(_resolve(release))
        deadline = time.monotonic() + 60
        while not task.done():  # (the background thread runs it to its end)
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert shared._wait() == _IDLE
    finally:
        shared.stop()


async def _make_future(shared: SharedLoop) -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


async def _resolve(future: asyncio.Future[None]) -> None:
    future.set_result(None)
