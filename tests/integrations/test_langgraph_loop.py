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
    monkeypatch.setattr("statekeeper.store.shared_loop._GRACE", 3600.0)
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


async def _waited_with_a_timeout() -> None:
    """Wait for a future with ``asyncio.wait(..., timeout=)`` (the saver's held writes):
    done in time, its timeout's timer is cancelled and stays in the loop's heap."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await asyncio.wait([done], timeout=3600)


def test_a_cancelled_timer_alone_does_not_start_the_background_thread(
    shared: SharedLoop,
) -> None:
    """A timer cancelled before it was due is no work for the background thread: the
    calls, stepped without a pass of the loop, leave it in the loop's heap, and the
    thread was started for it (and ran the loop every ``_POLL`` s … for nothing)."""
    for _ in range(3):
        shared.call(_waited_with_a_timeout())
    loop: Any = shared._loop
    assert not shared._started
    assert not shared._thread.is_alive()
    assert not loop._scheduled  # the cancelled timers dropped, as a pass drops them
    assert loop._timer_cancelled_count == 0

    async def a_live_timer() -> None:
        asyncio.get_running_loop().call_later(3600, lambda: None)

    shared.call(a_live_timer())  # a live timer still starts it
    assert shared._started and shared._thread.is_alive()


def test_a_cancelled_later_timer_does_not_wake_the_background_thread(
    shared: SharedLoop,
) -> None:
    """A timer of :meth:`SharedLoop.later` cancelled before it is due: the background
    thread's next wait is its idle one. Was: its due time stayed in the thread's heap,
    and the thread woke for it and ran a pass of the loop for nothing."""
    from statekeeper.store.shared_loop import _IDLE

    handle = shared.later(_IDLE * 0.9, lambda: None)
    handle.cancel()
    assert shared._wait() == _IDLE
