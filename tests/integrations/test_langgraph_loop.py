"""The saver's event loop (:class:`SharedLoop`): sync calls run on the calling thread,
concurrent callers take turns running it, and background and async work still runs."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.backends.sqlite import _BUSY
from statekeeper.errors import StoreClosed
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph.loop import SharedLoop


@pytest.fixture
def shared() -> Iterator[SharedLoop]:
    loop = SharedLoop("test-shared-loop")
    yield loop
    loop.stop()


async def _ident() -> int:
    await asyncio.sleep(0)
    return threading.get_ident()


def test_a_sync_call_runs_on_the_calling_thread(shared: SharedLoop) -> None:
    seen: list[tuple[int, int]] = []

    def worker() -> None:
        seen.append((threading.get_ident(), shared.call(_ident())))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
        t.join()
    assert len(seen) == 3
    assert all(caller == ran for caller, ran in seen)


def test_a_sqlite_write_commits_on_the_thread_that_called_put(tmp_path: Path) -> None:
    """No hop to a loop thread: the SQLite transaction of a ``put`` runs on the caller's
    thread (the engine's inline write), as ``SqliteSaver``'s does."""
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/lg.db", fork_protection=False)
    try:
        backend: Any = saver.store.backend
        committed_on: list[int] = []
        write = backend._append_batch_sync
        lone = backend._commit_lone

        def recorded(requests: Any) -> Any:
            committed_on.append(threading.get_ident())
            return write(requests)

        def recorded_lone(*args: Any) -> Any:  # a lone append committed inline
            found = lone(*args)
            if found is not _BUSY:
                committed_on.append(threading.get_ident())
            return found

        backend._append_batch_sync = recorded
        backend._commit_lone = recorded_lone
        config: Any = {"configurable": {"thread_id": "t-" + uuid.uuid4().hex, "checkpoint_ns": ""}}
        callers: list[int] = []

        def worker() -> None:
            callers.append(threading.get_ident())
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert callers and committed_on
        assert set(committed_on) == {callers[0]}
        assert saver.get_tuple(config) is not None
    finally:
        saver.close()


def test_concurrent_callers_take_turns_and_all_finish(shared: SharedLoop) -> None:
    """16 threads whose coroutines can only finish together (an asyncio barrier on the
    loop): whoever runs the loop runs the others' coroutines too, and a caller whose
    coroutine is not done when the runner leaves takes the loop over."""
    parties = 16
    state: dict[str, Any] = {}

    async def arrive() -> int:
        if "done" not in state:
            state["done"] = asyncio.get_running_loop().create_future()
            state["n"] = 0
        state["n"] += 1
        if state["n"] == parties:
            state["done"].set_result(None)
        await state["done"]
        return threading.get_ident()

    results: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(shared.call(arrive()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(parties)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == parties


def test_background_work_runs_while_nobody_calls(shared: SharedLoop) -> None:
    """A task left on the loop (a timer, e.g. claim renewal) runs with no caller."""
    fired = threading.Event()

    async def schedule() -> None:
        async def later() -> None:
            await asyncio.sleep(0.05)
            fired.set()

        asyncio.get_running_loop().create_task(later())

    shared.call(schedule())
    assert fired.wait(timeout=60)


def test_async_callers_and_sync_calls_from_a_running_loop(shared: SharedLoop) -> None:
    async def value() -> str:
        await asyncio.sleep(0)
        return "ok"

    async def main() -> tuple[str, str]:
        awaited = await shared.run(value())
        blocking = shared.call(value())  # this thread runs another loop: handed over
        return awaited, blocking

    assert asyncio.run(main()) == ("ok", "ok")


def test_a_blocking_call_from_inside_the_loop_is_refused(shared: SharedLoop) -> None:
    async def inner() -> None:
        return None

    async def nested() -> None:
        coro = inner()
        with pytest.raises(RuntimeError, match="deadlock"):
            shared.call(coro)

    shared.call(nested())


def test_calls_after_stop_are_refused() -> None:
    loop = SharedLoop("test-shared-loop")
    assert loop.call(_ident()) == threading.get_ident()
    loop.stop()
    loop.stop()  # idempotent
    assert not loop.running
    coro = _ident()
    with pytest.raises(StoreClosed):
        loop.call(coro)


def test_stop_does_not_wait_out_the_grace_for_more_async_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After async work, the background thread keeps running the loop for a grace
    period in case more comes; stopping (a saver's close) ends that wait at once (it
    waited the grace out: 50 ms per close). An hour's grace makes the difference plain."""
    monkeypatch.setattr("statekeeper.integrations.langgraph.loop._GRACE", 3600.0)
    loop = SharedLoop("test-shared-loop")

    async def value() -> str:
        await asyncio.sleep(0)
        return "ok"

    async def main() -> str:
        return await loop.run(value())

    assert asyncio.run(main()) == "ok"
    # condition: the background thread holds the loop with the work all done (its grace
    # wait); the deadline only bounds a failure
    deadline = time.monotonic() + 60
    while not (loop._driver == loop._thread.ident and not loop._pending()):
        assert time.monotonic() < deadline, "the background thread never took the loop"
        time.sleep(0.005)
    stopping = threading.Thread(target=loop.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=60)  # a deadline for a hang, not a wait
    assert not stopping.is_alive(), "stop() waited for the grace period to end"
    assert not loop.running


# -- a sync call that does not wait runs without a task (SharedLoop._run_here) --------


@pytest.fixture
def direct() -> Iterator[SharedLoop]:
    loop = SharedLoop("test-direct-loop", direct=True)
    yield loop
    loop.stop()


async def _where() -> tuple[asyncio.Task[Any] | None, asyncio.AbstractEventLoop]:
    return asyncio.current_task(), asyncio.get_running_loop()


def test_a_sync_call_that_never_waits_runs_without_a_task(
    direct: SharedLoop, shared: SharedLoop
) -> None:
    """Stepped on the calling thread with the saver's loop as the running loop, and no
    task made for it (it was ``run_until_complete``: a task and loop passes per call).
    Not when ``direct`` is off (the default: a client may need a task at once)."""
    task, loop = direct.call(_where())
    assert task is None
    assert loop is direct._loop
    with pytest.raises(RuntimeError):  # and none left running on this thread
        asyncio.get_running_loop()
    task, loop = shared.call(_where())
    assert task is not None
    assert loop is shared._loop


def test_a_sync_call_that_waits_goes_on_in_a_task(direct: SharedLoop) -> None:
    """Once the coroutine waits for a future (resolved later by a timer, or from another
    thread), the rest runs in a task of the loop, which sees that future's result."""

    async def waits() -> tuple[Any, Any, Any, asyncio.Task[Any] | None]:
        loop = asyncio.get_running_loop()
        before = asyncio.current_task()
        timer: asyncio.Future[str] = loop.create_future()
        loop.call_later(0.001, timer.set_result, "timer")
        first = await timer
        other: asyncio.Future[str] = loop.create_future()
        resolve = (other.set_result, "thread")
        threading.Thread(target=loop.call_soon_threadsafe, args=resolve).start()
        second = await other
        return before, first, second, asyncio.current_task()

    before, first, second, after = direct.call(waits())
    assert before is None
    assert (first, second) == ("timer", "thread")
    assert after is not None


def test_sleep_0_in_a_sync_call_lets_what_is_ready_run_first(direct: SharedLoop) -> None:
    """``await asyncio.sleep(0)`` goes on at once only when nothing else is ready; a
    callback queued before it runs before the coroutine goes on, as on a running loop."""

    async def yields() -> list[str]:
        seen: list[str] = []
        asyncio.get_running_loop().call_soon(seen.append, "callback")
        await asyncio.sleep(0)
        seen.append("after sleep")
        return seen

    async def alone() -> str:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return "done"

    assert direct.call(yields()) == ["callback", "after sleep"]
    assert direct.call(alone()) == "done"


def test_a_sync_call_keeps_its_context_changes_to_itself(direct: SharedLoop) -> None:
    """As in a task, ``ContextVar`` changes made by the coroutine stay in a copy of the
    caller's context, whether it waited or not."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("saversync_var", default="caller")

    async def sets(wait: bool) -> str:
        seen = var.get()
        var.set("coroutine")
        if wait:
            await asyncio.sleep(0.001)
            assert var.get() == "coroutine"
        return seen

    assert direct.call(sets(False)) == "caller"
    assert direct.call(sets(True)) == "caller"
    assert var.get() == "caller"


def test_errors_of_a_sync_call_are_raised_from_both_phases(direct: SharedLoop) -> None:
    async def fails(wait: bool) -> None:
        if wait:
            await asyncio.sleep(0.001)
        raise ValueError("wait" if wait else "direct")

    with pytest.raises(ValueError, match="direct"):
        direct.call(fails(False))
    with pytest.raises(ValueError, match="wait"):
        direct.call(fails(True))
    assert direct.call(_ident()) == threading.get_ident()  # the loop is free again


def test_a_sync_put_on_sqlite_runs_without_a_task(tmp_path: Path) -> None:
    """The saver's sync write on SQLite does not wait for anything (the transaction
    runs inline when the writer is idle): the store's append of a write on an existing
    thread is stepped on the caller's thread, no task made for it."""
    saver = StatekeeperSaver.from_url(
        f"sqlite:///{tmp_path}/lg.db", fork_protection=False, writes_wait=0
    )
    try:
        tasks: list[asyncio.Task[Any] | None] = []
        append = saver.store.append

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            tasks.append(asyncio.current_task())
            return await append(*args, **kwargs)

        assert isinstance(saver._portal, SharedLoop) and saver._portal.direct
        saver.store.append = recorded  # type: ignore[method-assign]
        config: Any = {"configurable": {"thread_id": "t-" + uuid.uuid4().hex, "checkpoint_ns": ""}}
        config = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        tasks.clear()  # (the thread's creation may wait: a new file's first write)
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})
        saver.put_writes(config, [("a", 1)], "task-1")
        assert tasks == [None, None]
        found = saver.get_tuple(config)
        assert found is not None and found.pending_writes == [("task-1", "a", 1)]
    finally:
        saver.close()
