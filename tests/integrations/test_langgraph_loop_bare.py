"""A bare sync call on :class:`SharedLoop` (``call(coro, bare=True)``): the coroutine is
sent into on the calling thread with no task until it first waits, then goes on as a
task from there; the saver's sync ``put``/``put_writes``/``get_tuple`` on a SQLite or
memory store run so (no task, handle nor round made for a lone write), on any other
backend as a task. And a sync call from the main thread sets its SIGINT handler
without ``signal.signal``'s enum wrapper."""

from __future__ import annotations

import asyncio
import contextvars
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.loop import SharedLoop

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("_VAR", default="caller")


@pytest.fixture
def shared() -> Iterator[SharedLoop]:
    loop = SharedLoop("test-loop-bare")
    yield loop
    loop.stop()


def _count_tasks(loop: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]
    create = loop.create_task

    def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return create(*args, **kwargs)

    monkeypatch.setattr(loop, "create_task", counted)
    return made


async def _done_at_once() -> tuple[bool, str, int]:
    _VAR.set("inside")
    running = asyncio.get_running_loop().is_running()
    return running, _VAR.get(), threading.get_ident()


def test_a_bare_call_done_at_once_makes_no_task(
    shared: SharedLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _count_tasks(shared._loop, monkeypatch)
    running, seen, ran_on = shared.call(_done_at_once(), bare=True)
    assert running and seen == "inside" and ran_on == threading.get_ident()
    assert _VAR.get() == "caller"  # its context is a copy: nothing leaks to the caller
    assert made[0] == 0
    shared.call(_done_at_once())  # (not bare: a task, as before)
    assert made[0] == 1


async def _waits_then_is_a_task() -> tuple[bool, bool, str, str]:
    before = asyncio.current_task() is None
    _VAR.set("inside")
    loop = asyncio.get_running_loop()
    from_executor = await loop.run_in_executor(None, lambda: "executor")
    async with asyncio.timeout(5):  # needs a current task: it has one now
        await asyncio.sleep(0)
    return before, asyncio.current_task() is not None, _VAR.get(), from_executor


def test_a_bare_call_that_waits_goes_on_as_a_task(shared: SharedLoop) -> None:
    before, after, seen, got = shared.call(_waits_then_is_a_task(), bare=True)
    assert before and after  # no task before its first wait, a task from there
    assert seen == "inside" and got == "executor"  # the same context throughout
    assert _VAR.get() == "caller"


async def _raises_after_waiting() -> None:
    failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(failed.set_exception, KeyError("boom"))
    try:
        await failed
    except KeyError as exc:
        raise ValueError("caught " + str(exc)) from exc


def test_a_bare_call_gets_the_error_of_what_it_waits_for(shared: SharedLoop) -> None:
    with pytest.raises(ValueError, match="caught 'boom'"):
        shared.call(_raises_after_waiting(), bare=True)
    assert shared.call(_done_at_once(), bare=True)[1] == "inside"  # the loop still works


async def _cancelled_while_waiting() -> str:
    task = asyncio.current_task()
    assert task is None  # bare: not yet
    asyncio.get_running_loop().call_soon(lambda: _cancel_current(asyncio.all_tasks()))
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        return "cancelled"
    return "not cancelled"


def _cancel_current(tasks: set[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()


def test_a_cancellation_of_the_task_reaches_the_bare_coroutine(shared: SharedLoop) -> None:
    assert shared.call(_cancelled_while_waiting(), bare=True) == "cancelled"


async def _raises_at_once() -> None:
    raise KeyError("at once")


def test_a_bare_call_raises_its_error_and_the_loop_stays_usable(shared: SharedLoop) -> None:
    with pytest.raises(KeyError, match="at once"):
        shared.call(_raises_at_once(), bare=True)
    assert shared.call(_done_at_once(), bare=True)[1] == "inside"


def _put_steps(saver: StatekeeperSaver, steps: int) -> Any:
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    config = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": step}
        checkpoint["channel_versions"] = {"n": step + 1}
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"n": step + 1})
        saver.put_writes(config, [("n", step + 1)], f"task-{step}")
    return config


def test_the_saver_writes_and_reads_of_a_sqlite_thread_make_no_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", fork_protection=False)
    try:
        portal: Any = saver._portal
        _put_steps(saver, 1)  # (the thread opened and cached)
        made = _count_tasks(portal._loop, monkeypatch)
        config = _put_steps(saver, 5)
        got = saver.get_tuple(config)
        assert made[0] == 0
        assert got is not None and got.checkpoint["channel_values"] == {"n": 4}
        assert [w[2] for w in got.pending_writes or ()] == [5]
    finally:
        saver.close()


class _TimedBackend(MemoryBackend):
    """A backend whose writes set a timeout before they first wait (as the network
    backends' do): that needs a current task."""

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        async with asyncio.timeout(5):
            return await super().append(*args, **kwargs)


def test_a_saver_on_another_backend_runs_its_calls_as_tasks() -> None:
    saver = StatekeeperSaver(StateStore(_TimedBackend()), fork_protection=False)
    try:
        assert not saver._sends_bare
        config = _put_steps(saver, 3)
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"] == {"n": 2}
    finally:
        saver._portal.call(saver.store.close())
        saver.close()


def test_a_main_thread_call_sets_sigint_without_the_enum_wrapper(
    shared: SharedLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``signal.signal`` maps the handler it returns to its ``Handlers`` enum, which
    for a function raises and catches a ``ValueError`` (twice a call): a main-thread
    saver call (a run's first read, its release) paid ~62 k instructions for it."""
    assert threading.current_thread() is threading.main_thread()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")
    calls = [0]
    wrapper = signal.signal

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return wrapper(*args)

    monkeypatch.setattr(signal, "signal", counted)
    seen: list[object] = []

    async def handler_inside() -> None:
        seen.append(signal.getsignal(signal.SIGINT))

    shared.call(handler_inside())
    assert calls[0] == 0
    assert seen[0] is not signal.default_int_handler  # the call's own handler was set
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # and undone
