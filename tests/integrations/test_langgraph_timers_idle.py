"""A timer the saver's store sets during a sync call fires on time though no call
follows (the sync store's fix, ``tests/store/test_sync_timers_idle.py``, for the
LangGraph saver's loop). A sync ``put`` runs the saver's loop on the calling thread;
between calls only the loop's background thread runs it, and that thread, idle,
sleeps up to a second (``_IDLE``) before it looks at the loop again. It woke only for
the timers of ``SharedLoop.later`` (a claim's renewal): a write-behind flush armed by a
put (``durability="async"``, ``flush_interval=0.05``) or an idle settle
(``settle_after``) ran up to ``_IDLE`` late. Here the idle sleep is made endless
(``_IDLE`` patched): such a timer only fires if the call that armed it wakes the
background thread, or the thread planned its sleep for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.records import AppendRequest, AppendResult
from statekeeper.store import shared_loop

from .conftest import checkpoint, config, new_thread

#: a bound on waiting for what must happen: only a failure waits this long
_BOUND = 20.0


class _Flushes:
    """Counts the write-behind flushes (one ``append_batch`` each) of a saver's store."""

    def __init__(self, saver: StatekeeperSaver) -> None:
        self.flushes = 0
        self.flushed = threading.Condition()
        backend: Any = saver.store.backend
        batch = backend.append_batch

        async def counted(requests: Sequence[AppendRequest]) -> list[AppendResult | BaseException]:
            results: list[AppendResult | BaseException] = await batch(requests)
            with self.flushed:
                self.flushes += 1
                self.flushed.notify_all()
            return results

        backend.append_batch = counted

    def wait(self, n: int) -> bool:
        with self.flushed:
            return self.flushed.wait_for(lambda: self.flushes >= n, _BOUND)


def _idle_sleeps_seen(saver: StatekeeperSaver) -> threading.Event:
    """Set once the loop's background thread sleeps its idle sleep (a wait for ever)."""
    kick: Any = saver._portal._kick  # type: ignore[union-attr]
    wait = kick.wait
    idle = threading.Event()

    def watched(timeout: float | None = None) -> bool:
        if timeout is not None and timeout >= shared_loop._IDLE:
            idle.set()
        return bool(wait(timeout))

    kick.wait = watched
    return idle


def _put(saver: StatekeeperSaver, thread: str, i: int, parent: str | None) -> str:
    cp = checkpoint({"v": f"value {i}"}, {"v": str(i + 1)})
    meta: Any = {"source": "loop", "step": i}
    saver.put(config(thread, checkpoint_id=parent), cp, meta, {"v": str(i + 1)})
    return str(cp["id"])


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_write_behind_flush_armed_by_a_put_fires_while_no_call_follows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, backend: str
) -> None:
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path}/lg.db"
    with StatekeeperSaver.from_url(url, durability="async", flush_interval=0.05) as saver:
        flushes = _Flushes(saver)
        idle = _idle_sleeps_seen(saver)
        thread = new_thread()
        parent = _put(saver, thread, 0, None)  # (starts the background thread)
        assert flushes.wait(1)
        assert idle.wait(_BOUND)  # the background thread sleeps, nothing left to run
        _put(saver, thread, 1, parent)  # arms the flush timer again, and returns
        assert flushes.wait(2), "the flush armed by the second put never ran"
        got = saver.get_tuple(config(thread))
        assert got is not None and got.metadata["step"] == 1


def test_a_flush_armed_by_a_put_from_another_thread_fires_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    with StatekeeperSaver.from_url("memory://", durability="async", flush_interval=0.05) as saver:
        flushes = _Flushes(saver)
        idle = _idle_sleeps_seen(saver)
        _put(saver, new_thread(), 0, None)
        assert flushes.wait(1)
        assert idle.wait(_BOUND)
        other = threading.Thread(target=_put, args=(saver, new_thread(), 0, None))
        other.start()
        other.join()
        assert flushes.wait(2), "the flush armed by the other thread's put never ran"


def test_an_idle_settle_armed_by_a_put_fires_while_no_call_follows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    url = f"sqlite:///{tmp_path}/lg.db"
    with StatekeeperSaver.from_url(url, settle_after=0.05) as saver:
        idle = _idle_sleeps_seen(saver)
        settled = threading.Event()
        settle: Any = saver.store._idle
        assert settle is not None
        fire = settle._fire

        def fired() -> None:
            fire()
            settled.set()

        settle._fire = fired
        thread = new_thread()
        parent = _put(saver, thread, 0, None)  # (starts the background thread)
        assert settled.wait(_BOUND)
        settled.clear()
        assert idle.wait(_BOUND)
        _put(saver, thread, 1, parent)  # arms the settle timer again, and returns
        assert settled.wait(_BOUND), "the settle armed by the put never ran"


def _until(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until it holds (True) or the bound passes (False)."""
    deadline = time.monotonic() + _BOUND
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_stop_ends_a_background_thread_that_waited_for_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stop`` wakes the background thread with its kick, the event the thread also
    waits on for its turn at the loop: a pass waiting for a caller took the kick, and
    the thread then slept its idle sleep before it saw the loop stopped (``stop``
    waited up to ``_IDLE``; with the timers planned for, a saver's close hung)."""
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    loop = shared_loop.SharedLoop("statekeeper-test-stop")
    entered, release = threading.Event(), threading.Event()

    async def hold() -> None:
        entered.set()
        await asyncio.to_thread(release.wait, _BOUND)

    caller = threading.Thread(target=loop.call, args=(hold(),))
    caller.start()
    assert entered.wait(_BOUND)  # the caller runs the loop
    loop._start()
    loop._kick.set()  # a pass: the background thread waits for the caller's turn
    assert _until(lambda: bool(loop._waiters))
    stopper = threading.Thread(target=loop.stop)
    stopper.start()
    assert _until(lambda: loop._closed)
    release.set()
    caller.join(_BOUND)
    stopper.join(_BOUND)
    assert not stopper.is_alive(), "stop() still waits for the background thread"
