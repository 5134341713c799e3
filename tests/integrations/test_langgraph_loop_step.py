"""A sync call on :class:`SharedLoop` that needs nothing but its own steps is done
without a pass of the loop (``run_until_complete``'s passes each poll for I/O, an
``epoll``): a SQLite ``put`` of a cached thread commits inline and returns. A call
that waits (an executor, a timer, another thread) still finishes, as a task of the
loop in every respect."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.loop import SharedLoop

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="caller")


@pytest.fixture
def shared() -> Iterator[SharedLoop]:
    loop = SharedLoop("test-loop-step")
    yield loop
    loop.stop()


def _count_passes(loop: Any) -> list[int]:
    """Count the passes of ``loop`` (``_run_once``: its timers, a poll of its selector,
    its ready callbacks), as ``run_forever`` makes them."""
    passes = [0]
    one = loop._run_once

    def counted() -> None:
        passes[0] += 1
        one()

    loop._run_once = counted
    return passes


async def _sync_work(n: int) -> int:
    return sum(range(n))


def test_a_call_needing_nothing_from_the_loop_makes_no_pass(shared: SharedLoop) -> None:
    passes = _count_passes(shared._loop)
    assert [shared.call(_sync_work(k)) for k in range(5)] == [0, 0, 1, 3, 6]
    assert passes[0] == 0


async def _task_facts() -> tuple[bool, bool, str, int]:
    async with asyncio.timeout(5):  # needs a current task
        await asyncio.sleep(0)
    _VAR.set("inside")
    running = asyncio.get_running_loop().is_running()
    return asyncio.current_task() is not None, running, _VAR.get(), threading.get_ident()


def test_a_call_is_a_task_with_a_context_of_its_own(shared: SharedLoop) -> None:
    is_task, running, seen, ran_on = shared.call(_task_facts())
    assert is_task and running and seen == "inside" and ran_on == threading.get_ident()
    assert _VAR.get() == "caller"  # the call's context did not leak into the caller's


async def _waits_for_others() -> str:
    loop = asyncio.get_running_loop()
    from_executor = await loop.run_in_executor(None, lambda: "executor")
    timer: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.01, timer.set_result, "timer")
    other: asyncio.Future[str] = loop.create_future()
    threading.Thread(target=lambda: loop.call_soon_threadsafe(other.set_result, "thread")).start()
    return f"{from_executor} {await timer} {await other}"


def test_a_call_that_waits_finishes(shared: SharedLoop) -> None:
    assert shared.call(_waits_for_others()) == "executor timer thread"


async def _fails() -> None:
    await asyncio.sleep(0)
    raise KeyError("boom")


def test_a_call_raises_its_error_and_the_loop_stays_usable(shared: SharedLoop) -> None:
    with pytest.raises(KeyError, match="boom"):
        shared.call(_fails())
    assert shared.call(_sync_work(3)) == 3


async def _cancelled() -> str:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_soon(task.cancel)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        return "cancelled"
    return "not cancelled"


def test_a_cancellation_reaches_the_call(shared: SharedLoop) -> None:
    assert shared.call(_cancelled()) == "cancelled"


async def _agen_values() -> list[int]:
    async def agen() -> Any:
        for i in range(3):
            yield i
            await asyncio.sleep(0)

    return [i async for i in agen()]


def test_async_generators_run_in_a_call(shared: SharedLoop) -> None:
    assert shared.call(_agen_values()) == [0, 1, 2]


def test_a_put_of_a_cached_thread_commits_without_a_pass_of_the_loop(tmp_path: Path) -> None:
    """The sync ``put`` LangGraph waits for: once the thread is open, each of its
    ``put``s (a SQLite commit made inline) returns with no pass of the saver's loop
    (on ``run_until_complete`` each made two or three, each with an ``epoll``)."""
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", fork_protection=False)
    try:
        portal: Any = saver._portal
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
        passes = _count_passes(portal._loop)
        for step in range(5):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"n": step}
            checkpoint["channel_versions"] = {"n": step + 1}
            config = saver.put(
                config, checkpoint, {"source": "loop", "step": step}, {"n": step + 1}
            )
        assert passes[0] == 0
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"] == {"n": 4}
    finally:
        saver.close()


def test_concurrent_calls_all_finish(shared: SharedLoop) -> None:
    results: list[int] = []
    lock = threading.Lock()

    async def work(i: int) -> int:
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0)
        return i

    def worker(i: int) -> None:
        for _ in range(20):
            got = shared.call(work(i))
            with lock:
                results.append(got)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(i for i in range(4) for _ in range(20))


def test_a_put_works_when_new_loops_are_uvloops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where an application made uvloop asyncio's loop (``uvloop.install()``), the
    saver's loop is uvloop's, which has no ready queue to step: a sync call then runs
    the loop as ``run_until_complete`` does, and the checkpoint is stored."""
    uvloop = pytest.importorskip("uvloop")  # (the dev and bench extras install it)
    monkeypatch.setattr(asyncio, "new_event_loop", uvloop.new_event_loop)
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/uv.db")
    try:
        portal: Any = saver._portal
        assert not hasattr(portal._loop, "_ready")
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})
        got = saver.get_tuple(stored)
        assert got is not None and got.checkpoint["id"] == checkpoint["id"]
    finally:
        saver.close()
