"""A sync store closed, interrupted, forked or dropped while calls are in flight in
other threads: every call ends (with its own result, or ``StoreClosed``), a write in
flight lands whole or not at all, an acknowledged one is durable, ``close`` returns,
and the store's loop thread ends. Nothing here sleeps for a duration: the tests wait
for conditions, and a hang shows as a bounded join that fails."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from statekeeper import SyncStateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.concurrency import SyncLeaseManager, SyncSteps
from statekeeper.concurrency.sync import update
from statekeeper.errors import StoreClosed
from statekeeper.records import AppendRequest, AppendResult, LeaseInfo, Snapshot
from statekeeper.store.portal import Handoff, Portal

T = TypeVar("T")

#: a bound for joins and waits that only a hang reaches
HANG = 60.0


def wait_for(condition: Callable[[], T], what: str) -> T:
    """``condition()``'s first truthy value (polled: a condition, not a duration)."""
    deadline = time.monotonic() + HANG
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
    return value


class Gate:
    """Holds the first backend call it guards until :meth:`open`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.cancelled = threading.Event()
        self.armed = True
        self._lock = threading.Lock()
        self._open = False
        self._waker: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def open(self) -> None:
        with self._lock:
            self._open = True
            if self._waker is not None:
                loop, event = self._waker
                with contextlib.suppress(RuntimeError):  # (that loop is closed)
                    loop.call_soon_threadsafe(event.set)

    async def hold(self) -> None:
        if not self.armed:
            return
        self.armed = False
        opened = asyncio.Event()
        with self._lock:
            if self._open:
                opened.set()
            else:
                self._waker = (asyncio.get_running_loop(), opened)
        self.entered.set()
        try:
            await opened.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class HeldSQLite(SQLiteBackend):
    """A SQLite backend whose first write (or lease renewal) waits at a gate."""

    def __init__(self, path: Path, gate: Gate) -> None:
        super().__init__(path)
        self.gate = gate

    async def append(self, request: AppendRequest) -> AppendResult:
        await self.gate.hold()
        return await super().append(request)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        await self.gate.hold()
        return await super().renew_lease(agent_id, holder, token, ttl)


class HeldMemory(MemoryBackend):
    """A memory backend whose first read of an agent's state waits at a gate."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    async def read_latest(self, agent_id: str) -> Any:
        await self.gate.hold()
        return await super().read_latest(agent_id)


class WatchedFeed(MemoryBackend):
    """A memory backend that tells when a subscription waits for new events."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self.waiting.set()
        await super().wait_feed(after, max_wait)


class Outcome:
    """What a call made in another thread returned or raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:
            self.error = exc

    def join(self, what: str) -> None:
        self.thread.join(HANG)
        assert not self.thread.is_alive(), f"{what} hangs"


def close_in_another_thread(store: SyncStateStore) -> Outcome:
    """Start ``store.close()`` in a thread and wait until it has begun (the store
    refuses new calls)."""
    closing = Outcome(store.close)
    wait_for(lambda: not store._portal.running, "the close to begin")
    return closing


def assert_ended(store: SyncStateStore) -> None:
    assert store._portal._loop.is_closed(), "the store's loop outlived close"
    thread = store._portal._thread  # (started only by work in the background)
    if thread.ident is not None:
        thread.join(HANG)
        assert not thread.is_alive(), "the store's loop thread outlived close"


def test_a_save_in_flight_when_another_thread_closes_lands_and_is_acknowledged(
    tmp_path: Path,
) -> None:
    gate = Gate()
    store = SyncStateStore(HeldSQLite(tmp_path / "a.db", gate))
    saving = Outcome(lambda: store.save("a-1", {"n": 1}))
    assert gate.entered.wait(HANG)
    closing = close_in_another_thread(store)
    with pytest.raises(StoreClosed):  # a call begun after the close began is refused
        store.get("a-1")
    gate.open()
    saving.join("the save in flight")
    closing.join("close")
    assert saving.error is None and isinstance(saving.value, AppendResult)
    assert closing.error is None
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:  # acknowledged: durable
        assert again.load("a-1").data == {"n": 1}


def test_a_load_in_flight_when_another_thread_closes_returns_its_snapshot() -> None:
    gate = Gate()
    backend = HeldMemory(gate)
    gate.armed = False
    writer = SyncStateStore(backend)  # (its own cache: the reader's load reads the backend)
    writer.save("a-1", {"n": 1})
    gate.armed = True
    store = SyncStateStore(backend)
    loading = Outcome(lambda: store.load("a-1"))
    assert gate.entered.wait(HANG)
    closing = close_in_another_thread(store)
    gate.open()
    loading.join("the load in flight")
    closing.join("close")
    assert loading.error is None and isinstance(loading.value, Snapshot)
    assert loading.value.data == {"n": 1}
    assert_ended(store)
    writer.close()


def test_a_step_running_its_function_when_another_thread_closes_is_recorded(
    tmp_path: Path,
) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}")
    steps = SyncSteps(store, "order-1")
    inside, release = threading.Event(), threading.Event()

    def charge() -> dict[str, int]:  # runs in the stepping thread
        inside.set()
        assert release.wait(HANG)
        return {"charged": 30}

    stepping = Outcome(lambda: steps.run("charge", charge))
    assert inside.wait(HANG)
    closing = close_in_another_thread(store)
    release.set()
    stepping.join("the step in flight")
    closing.join("close")
    assert stepping.error is None and stepping.value == {"charged": 30}
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:
        assert SyncSteps(again, "order-1").results() == {"charge": {"charged": 30}}


def test_an_update_running_its_change_when_another_thread_closes_is_written(
    tmp_path: Path,
) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}")
    inside, release = threading.Event(), threading.Event()

    def bump(data: dict[str, Any]) -> None:
        inside.set()
        assert release.wait(HANG)
        data["n"] = data.get("n", 0) + 1

    updating = Outcome(lambda: update(store, "counter", bump))
    assert inside.wait(HANG)
    closing = close_in_another_thread(store)
    release.set()
    updating.join("the update in flight")
    closing.join("close")
    assert updating.error is None and updating.value.data == {"n": 1}
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:
        assert again.load("counter").data == {"n": 1}


def test_a_lease_renewal_in_flight_when_another_thread_closes_ends_and_is_released(
    tmp_path: Path,
) -> None:
    gate = Gate()
    gate.armed = False
    store = SyncStateStore(HeldSQLite(tmp_path / "a.db", gate))
    lease = SyncLeaseManager(store, ttl=30).acquire("a-1")
    gate.armed = True
    renewing = Outcome(lease.renew)
    assert gate.entered.wait(HANG)
    closing = close_in_another_thread(store)
    gate.open()
    renewing.join("the renewal in flight")
    closing.join("close")
    assert renewing.error is None and closing.error is None
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:  # close released it
        current = SyncLeaseManager(again).current("a-1")
        assert current is None or current.holder is None


def test_a_live_subscription_waiting_when_another_thread_closes_ends_with_store_closed() -> None:
    backend = WatchedFeed()
    store = SyncStateStore(backend)
    store.save("a-1", {"n": 1})
    feed = store.subscribe()
    assert next(feed).agent_id == "a-1"
    waiting = Outcome(lambda: next(feed))  # nothing more comes: it waits for ever
    assert backend.waiting.wait(HANG)
    closing = Outcome(store.close)
    waiting.join("the subscription's wait")
    closing.join("close")
    assert isinstance(waiting.error, StoreClosed)
    assert closing.error is None
    assert_ended(store)


def test_closing_from_inside_a_steps_function_records_nothing_and_raises_store_closed(
    tmp_path: Path,
) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}")
    steps = SyncSteps(store, "order-1")

    def charge() -> int:
        store.close()  # (the function's own thread closes the store)
        return 30

    outcome = Outcome(lambda: steps.run("charge", charge))
    outcome.join("the step that closed its store")
    assert isinstance(outcome.error, StoreClosed)
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:
        assert SyncSteps(again, "order-1").results() == {}


def test_ctrl_c_during_a_call_cancels_it_on_the_loop_and_the_store_goes_on(
    tmp_path: Path,
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    gate = Gate()
    store = SyncStateStore(HeldSQLite(tmp_path / "a.db", gate))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:

        def interrupt() -> None:
            assert gate.entered.wait(HANG)
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

        sender = Outcome(interrupt)
        with pytest.raises(KeyboardInterrupt):
            store.save("a-1", {"n": 1})
        sender.join("the interrupt")
        assert gate.cancelled.is_set(), "the interrupted save still runs on the loop"
    finally:
        signal.signal(signal.SIGINT, previous)
        gate.open()
    assert store.get("a-1") is None  # not written at all
    assert store.save("a-2", {"n": 2}).last_seq == 1  # and the store goes on
    closing = Outcome(store.close)
    closing.join("close after an interrupt")
    assert closing.error is None
    assert_ended(store)


def test_a_sync_store_in_a_forked_child_refuses_calls_with_a_clear_error(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork here")
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}")
    store.save("a-1", {"n": 1})
    report = tmp_path / "child.txt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork of a threaded process)
        pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        code = 1
        try:
            try:
                store.load("a-1")
            except StoreClosed as exc:
                report.write_text(str(exc))
            store.close()  # returns, and leaves the parent's connections alone
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + HANG
    while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hangs")
        time.sleep(0.005)
    assert os.waitstatus_to_exitcode(ended[1]) == 0
    message = report.read_text()
    assert "fork" in message and str(os.getpid()) in message
    assert store.load("a-1").data == {"n": 1}  # the parent's store is untouched
    store.close()


def test_a_store_dropped_while_a_face_works_in_another_thread_lets_it_finish_then_ends(
    tmp_path: Path,
) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}", durability="async")
    thread = store._portal._thread
    steps = SyncSteps(store, "order-1")
    inside, release = threading.Event(), threading.Event()

    def charge() -> int:
        inside.set()
        assert release.wait(HANG)
        return 30

    stepping = Outcome(functools.partial(steps.run, "charge", charge))
    assert inside.wait(HANG)
    del store, steps  # the stepping thread's frames hold the step's face only
    gc.collect()
    release.set()
    stepping.join("the step of a dropped store")
    assert stepping.error is None and stepping.value == 30
    del stepping
    gc.collect()  # nothing holds the store's loop any more: it closes and its thread ends
    thread.join(HANG)
    assert not thread.is_alive(), "a dropped store's loop thread lives on"
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:  # flushed on the way
        assert SyncSteps(again, "order-1").results() == {"charge": 30}


def test_a_heartbeat_renewing_when_another_thread_closes_stops_and_the_lease_is_released(
    tmp_path: Path,
) -> None:
    gate = Gate()
    gate.armed = False
    store = SyncStateStore(HeldSQLite(tmp_path / "a.db", gate))
    lease = SyncLeaseManager(store, ttl=30).acquire("a-1")
    gate.armed = True
    lease.start_heartbeat(0.01)  # its next renewal waits at the gate, on the loop
    assert gate.entered.wait(HANG)
    closing = close_in_another_thread(store)
    gate.open()
    closing.join("close")
    assert closing.error is None
    assert lease.released
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:
        current = SyncLeaseManager(again).current("a-1")
        assert current is None or current.holder is None


def test_a_portal_stopped_under_a_call_ends_it_with_store_closed() -> None:
    portal = Portal()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    waiting = Outcome(lambda: portal.call(forever()))
    assert started.wait(HANG)
    portal.stop()
    waiting.join("the call under a stopped portal")
    assert isinstance(waiting.error, StoreClosed)
    assert not portal._thread.is_alive()
    with pytest.raises(StoreClosed):
        portal.call(forever())


def test_a_portal_stopped_while_a_served_function_runs_raises_store_closed_after_it() -> None:
    portal = Portal()
    inside, release = threading.Event(), threading.Event()

    def work() -> int:
        inside.set()
        assert release.wait(HANG)
        return 1

    async def served(handoff: Handoff) -> int:
        return await handoff.run(work) + 1

    serving = Outcome(lambda: portal.serve(served))
    assert inside.wait(HANG)
    portal.stop()
    release.set()
    serving.join("the served call under a stopped portal")
    assert isinstance(serving.error, StoreClosed)
    assert not portal._thread.is_alive()


def test_closing_under_eight_saving_threads_keeps_exactly_what_was_acknowledged(
    tmp_path: Path,
) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}")
    acknowledged = [0] * 8
    refusals: list[BaseException] = []

    def saver(i: int) -> None:
        n = 0
        while True:
            n += 1
            try:
                store.save(f"a-{i}", {"n": n})
            except StoreClosed as exc:
                refusals.append(exc)
                return
            acknowledged[i] = n

    savers = [Outcome(functools.partial(saver, i)) for i in range(8)]
    wait_for(lambda: min(acknowledged) >= 3, "every thread to save thrice")
    closing = Outcome(store.close)
    for one in savers:
        one.join("a saving thread")
    closing.join("close")
    assert closing.error is None and all(one.error is None for one in savers)
    assert len(refusals) == 8
    assert_ended(store)
    with SyncStateStore(f"sqlite:///{tmp_path / 'a.db'}") as again:
        # an acknowledged save is there; a refused one is not: nothing more, nothing less
        assert [again.load(f"a-{i}").data["n"] for i in range(8)] == acknowledged
