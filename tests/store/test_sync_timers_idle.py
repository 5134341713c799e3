"""A timer the store sets during a sync call fires on time though no call follows
(issue 11's second read). Since calls run the loop on the calling thread, nobody runs
it between calls but the portal's background thread, and that thread, idle, sleeps up
to a second (``_IDLE``) before it looks at the loop again: a write-behind flush armed
by a save (``flush_interval=0.05``) landed ~0.7 s late, an ``async`` store's promise
("none older than ``flush_interval``") broken, and any timer a call arms (a lease's
heartbeat sleep, ``settle_after``) late the same way. The old loop thread ran its
timers on time. Here the idle sleep is made endless (``_IDLE`` patched): the timer
only fires if the call that armed it wakes the background thread."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult
from statekeeper.store import shared_loop

#: a bound on waiting for what must happen: only a failure waits this long
_BOUND = 20.0


class Flushes(MemoryBackend):
    """A memory backend telling each write-behind flush (one ``append_batch``)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.flushed = threading.Condition()

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        results = await super().append_batch(requests)
        with self.flushed:
            self.flushes += 1
            self.flushed.notify_all()
        return results

    def wait_flushes(self, n: int) -> bool:
        with self.flushed:
            return self.flushed.wait_for(lambda: self.flushes >= n, _BOUND)


def _idle_sleeps_seen(store: SyncStateStore) -> threading.Event:
    """Set once the background thread sleeps its idle sleep (a wait for ever)."""
    portal: Any = store._portal
    kick = portal._kick
    wait = kick.wait
    idle = threading.Event()

    def watched(timeout: float | None = None) -> bool:
        if timeout is not None and timeout >= shared_loop._IDLE:
            idle.set()
        return bool(wait(timeout))

    kick.wait = watched
    return idle


def test_a_write_behind_flush_armed_by_a_save_fires_while_no_call_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    backend = Flushes()
    with SyncStateStore(backend, durability="async", flush_interval=0.05) as store:
        idle = _idle_sleeps_seen(store)
        store.save("a", {"n": 1})  # (starts the background thread: its timer is seen)
        assert backend.wait_flushes(1)
        assert idle.wait(_BOUND)  # the background thread sleeps, nothing left to run
        store.save("a", {"n": 2})  # arms the flush timer again, and returns
        assert backend.wait_flushes(2), "the flush armed by the second save never ran"
        assert store.load("a").data == {"n": 2}


def test_a_flush_armed_by_a_save_from_another_thread_fires_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    backend = Flushes()
    with SyncStateStore(backend, durability="async", flush_interval=0.05) as store:
        idle = _idle_sleeps_seen(store)
        store.save("a", {"n": 1})
        assert backend.wait_flushes(1)
        assert idle.wait(_BOUND)
        other = threading.Thread(target=store.save, args=("b", {"n": 1}))
        other.start()
        other.join()
        assert backend.wait_flushes(2), "the flush armed by the other thread's save never ran"
