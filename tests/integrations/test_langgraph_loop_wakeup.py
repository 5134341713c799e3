"""The wake-up byte another thread leaves in the loop's self-pipe (``call_soon_threadsafe``:
LangGraph's threads handing a call to the thread running :class:`SharedLoop`) is not
"I/O ready" for the SQLite lean append: :meth:`SharedLoop._step` runs ready callbacks
without polling the loop, so nothing read that byte, and every poll of
``sqlite_loop.nothing_waits`` found the self-pipe readable — each write after it declined
the lean append for a pass of the loop nobody made. The poll now reads the loop's own
wake-ups as the loop's pass does (signals it carries reach their handlers) and
reports what is ready after that; a callback scheduled from another thread still runs.
Likewise a cancelled timer, which stays in the loop's heap until a pass: it counted as
due for every poll after its time; the poll now drops it as the pass does."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.sqlite.loop import nothing_waits
from statekeeper.integrations.langgraph.loop import SharedLoop
from statekeeper.records import AppendResult

from ..lean_declines import LEAN, recording


@pytest.fixture
def shared() -> Iterator[SharedLoop]:
    loop = SharedLoop("test-loop-wakeup")
    yield loop
    loop.stop()


def _from_another_thread(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
    """``loop.call_soon_threadsafe(callback)`` made on another thread (its wake-up byte
    written) and done when this returns."""
    caller = threading.Thread(target=loop.call_soon_threadsafe, args=(callback,))
    caller.start()
    caller.join()


async def _append_after_a_wakeup(store: StateStore, ran: list[int]) -> Any:
    loop = asyncio.get_running_loop()
    _from_another_thread(loop, lambda: ran.append(1))
    await asyncio.sleep(0)  # a round of what is ready (the callback): no poll of the loop
    assert ran == [1] and not loop._ready  # type: ignore[attr-defined]
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    backend._pass_due = 0.0  # a pass due: the lean append polls the loop first
    assert not loop._scheduled  # type: ignore[attr-defined]  # no timer: I/O is all it polls
    lean = store._writes.lean
    assert lean is not None
    ops = [{"op": "replace", "path": "/n", "value": 1}]
    done = lean("a", "lg.cp", ops, 1, "k1", {"n": 1})
    return done if done is None or isinstance(done, AppendResult) else await done


def test_a_wakeup_from_another_thread_does_not_make_the_lean_append_decline(
    shared: SharedLoop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes: list[str] = []
    monkeypatch.setattr(SQLiteBackend, "commit_keyed", recording(outcomes))
    store = shared.call(_opened(f"sqlite:///{tmp_path}/w.db"))
    try:
        shared.call(store.create("a", {"n": 0}))
        ran: list[int] = []
        done = shared.call(_append_after_a_wakeup(store, ran), bare=True)
        assert done is not None and done.last_seq == 2
        assert outcomes == [LEAN]  # not declined for the self-pipe's byte ("I/O ready")
        assert shared.call(store.load("a")).data == {"n": 1}
    finally:
        shared.call(store.close())


async def _opened(url: str) -> StateStore:
    return StateStore(url, snapshot_every=1000, witness=False)  # (no witness: no timer)


async def test_a_wakeup_read_by_the_poll_leaves_its_callback_to_run() -> None:
    """The poll reads the byte, sees the callback it announced still ready and says
    the loop has work; the callback runs at the loop's next round."""
    loop = asyncio.get_running_loop()
    ran: list[int] = []
    _from_another_thread(loop, lambda: ran.append(1))
    assert not nothing_waits(loop)  # (the callback is ready)
    await asyncio.sleep(0)
    assert ran == [1]
    assert nothing_waits(loop)  # its byte was read: nothing waits now
    # one more from another thread while this loop waits in its poll: it wakes it
    woken = loop.create_future()
    caller = threading.Thread(target=loop.call_soon_threadsafe, args=(woken.set_result, "woken"))
    caller.start()
    assert await asyncio.wait_for(woken, 30) == "woken"
    caller.join()


async def test_a_signal_in_the_self_pipe_reaches_its_handler() -> None:
    """A signal handler set with ``add_signal_handler`` is announced through the same
    self-pipe (its signal number): a poll that reads the pipe runs it as the loop's
    pass would (scheduled, then run at the next round)."""
    loop = asyncio.get_running_loop()
    got: list[str] = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
    try:
        signal.raise_signal(signal.SIGUSR1)
        assert not nothing_waits(loop)
        await asyncio.sleep(0)  # (a round: the handler the poll scheduled runs)
        assert got == ["usr1"]
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)


async def _append_after_a_cancelled_timer(store: StateStore, ran: list[int]) -> Any:
    loop = asyncio.get_running_loop()
    loop.call_at(loop.time() - 1.0, ran.append, 1).cancel()  # due, cancelled, in the heap
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    backend._pass_due = 0.0  # a pass due: the lean append polls the loop first
    lean = store._writes.lean
    assert lean is not None
    ops = [{"op": "replace", "path": "/n", "value": 1}]
    done = lean("a", "lg.cp", ops, 1, "k1", {"n": 1})
    ran.append(len(loop._scheduled))  # type: ignore[attr-defined]  # (0: dropped, as a pass does)
    return done if done is None or isinstance(done, AppendResult) else await done


def test_a_cancelled_timer_does_not_make_the_lean_append_decline(
    shared: SharedLoop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled timer stays in the loop's heap until a pass, which ``_step`` never
    makes: it counted as due and declined every lean append after its time."""
    outcomes: list[str] = []
    monkeypatch.setattr(SQLiteBackend, "commit_keyed", recording(outcomes))
    store = shared.call(_opened(f"sqlite:///{tmp_path}/c.db"))
    try:
        shared.call(store.create("a", {"n": 0}))
        ran: list[int] = []
        done = shared.call(_append_after_a_cancelled_timer(store, ran), bare=True)
        assert done is not None and done.last_seq == 2
        assert outcomes == [LEAN]  # not declined for a timer due
        assert ran == [0]  # the cancelled timer dropped, never run
    finally:
        shared.call(store.close())


async def test_a_timer_due_still_makes_the_loop_wait() -> None:
    """A live timer due behind a cancelled one: the poll says the loop waits."""
    loop = asyncio.get_running_loop()
    ran: list[int] = []
    loop.call_at(loop.time() - 2.0, ran.append, 1).cancel()
    loop.call_at(loop.time() - 1.0, ran.append, 2)
    assert not nothing_waits(loop)
    assert len(loop._scheduled) == 1  # type: ignore[attr-defined]  # (the cancelled one dropped)
    await asyncio.sleep(0)  # (a pass: the due timer joins the ready queue behind this task)
    await asyncio.sleep(0)
    assert ran == [2]
    assert nothing_waits(loop)
