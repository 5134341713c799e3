"""The shared loop's task factory takes what any task factory is handed.

``LoopTasks`` (h/loopstop) keeps a ``SharedLoop``'s tasks through the loop's task
factory. Its factory took ``(loop, coro, context=None)`` only: the signature of 3.11
and 3.12. Python 3.13.3, and 3.14 on, have ``loop.create_task`` hand a task factory
every keyword it was given — ``name`` among them, and ``eager_start`` in 3.14 — and no
longer name the task after it: ``create_task(coro, name=...)`` on the saver's loop
raised ``TypeError`` there (the store's write-behind guard and the witness's waiting
task are made with a name), and a task without its name counted as work (the
background thread polled for as long as a guard lived). The factory now passes every
keyword on to the task, as the default factory does.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from statekeeper.store.loop_steps import LoopTasks
from statekeeper.store.shared_loop import SharedLoop


async def _noop() -> None:
    return None


def test_the_factory_takes_the_keywords_a_newer_create_task_hands_it() -> None:
    shared = SharedLoop("statekeeper-test-factory")
    try:
        factory: Any = shared._loop.get_task_factory()
        assert factory is not None
        coro = _noop()
        # what Python 3.14's BaseEventLoop.create_task(coro, name=..., context=...) does
        task = factory(shared._loop, coro, name="statekeeper-guard", context=None)
        assert task.get_name() == "statekeeper-guard"
        assert task in list(shared._tasks._made)
        assert shared.call(_wait(task)) is None
    finally:
        shared.stop()


async def _wait(task: asyncio.Task[None]) -> None:
    return await task


def test_finished_tasks_leave_the_registry() -> None:
    """100 000 calls that each make a task: the registry keeps none of them."""
    shared = SharedLoop("statekeeper-test-factory-leak")
    try:

        async def many() -> int:
            for _ in range(100_000):
                await asyncio.create_task(_noop())
            return len(shared._tasks._made)

        left = shared.call(many())
        gc.collect()
        assert left <= 2  # (the call's own task, at most)
        assert len(shared._tasks._made) <= 1
        assert not shared._tasks.working(shared._loop)
    finally:
        shared.stop()


def test_a_factory_set_over_it_is_honoured() -> None:
    """A factory the application sets on the loop replaces it; looking for work still
    sees that factory's tasks (``working`` falls back to every task of the loop)."""
    loop = asyncio.new_event_loop()
    try:
        tasks = LoopTasks(loop)
        made: list[asyncio.Task[Any]] = []

        def mine(lp: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            task: asyncio.Task[Any] = asyncio.Task(coro, loop=lp, **kwargs)
            made.append(task)
            return task

        loop.set_task_factory(mine)
        event = asyncio.Event()

        async def waiting() -> None:
            await event.wait()

        task = loop.create_task(waiting())
        loop.run_until_complete(asyncio.sleep(0))
        assert task in made
        assert tasks.working(loop)
        event.set()
        loop.run_until_complete(task)
        assert not tasks.working(loop)
    finally:
        loop.close()
