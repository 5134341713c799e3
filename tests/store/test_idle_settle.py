"""Idle settles (store/idle_settle.py): ``StateStore(settle_after=...)`` settles an
agent this store saved once it has had no save that long, in the background.

Was: ``settle`` ran only when called (``settle_after`` did not exist). No test sleeps:
``settle_after=0`` and ``idle_settled()``, which waits until nothing is due or running."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import InvalidArgument, LeaseLost
from statekeeper.store.idle_settle import IdleSettler

from .test_settle import _chat, _doc, _snapshots, _url


class _Lease:
    def __init__(self, holder: str, token: int) -> None:
        self.fence = (holder, token)


async def test_an_idle_agent_is_settled_and_loads_from_one_row(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=0) as store:
        await _chat(store, "a", 0, 130)
        await store.idle_settled()
        assert _snapshots(path)[-1] == 130
        stats = store.stats().idle_settles
        assert stats is not None and stats.failed == 0 and stats.pending == 0
        assert stats.settled >= 1
    async with StateStore(_url(path), cache_size=0, settle_after=None) as fresh:
        head, _, snapshot, events = await fresh.backend.read_state("a")
        assert (head, snapshot is not None and snapshot.seq, events) == (130, 130, [])
        assert (await fresh.load("a")).data == _doc(130)
        assert (await fresh.verify()).problems == []


async def test_no_trigger_without_settle_after(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 130)
        await store.idle_settled()  # (returns at once)
        assert store.stats().idle_settles is None
    assert 130 not in _snapshots(path)


async def test_an_agent_saved_under_a_lease_is_never_settled_by_a_holder_that_lost_it(
    tmp_path: Path,
) -> None:
    """Two holders on one file: holder 1 saves under its lease and loses it to holder
    2. A settle is a write the fence does not check (``save_snapshot``): holder 1's store
    never settles an agent its last save fenced — was (with the fenced save queued like
    any other) settled at 130 by the holder that lost the lease."""
    path = tmp_path / "s.db"
    async with (
        StateStore(_url(path), snapshot_every=100, settle_after=0) as one,
        StateStore(_url(path), snapshot_every=100, settle_after=None) as two,
    ):
        first = await one.backend.acquire_lease("a", "h1", 60)
        lease1 = _Lease("h1", first.token)
        for n in range(1, 131):
            await one.save("a", _doc(n), lease=lease1)
        assert await one.backend.release_lease("a", "h1", first.token)
        second = await two.backend.acquire_lease("a", "h2", 60)
        await one.idle_settled()
        assert 130 not in _snapshots(path)
        with pytest.raises(LeaseLost):
            await one.save("a", _doc(131), lease=lease1)
        await two.save("a", _doc(131), lease=_Lease("h2", second.token))
        await one.idle_settled()
        assert _snapshots(path)[-1] < 130
        stats = one.stats().idle_settles
        assert stats is not None and (stats.settled, stats.failed, stats.pending) == (0, 0, 0)
        # an unfenced save of the same store queues it again
        await one.save("b", _doc(1))
        await one.idle_settled()
        assert one.stats().idle_settles.settled == 1  # type: ignore[union-attr]


async def test_close_cancels_pending_and_running_settles_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = StateStore(_url(path), snapshot_every=100, settle_after=3600)
    await _chat(store, "a", 0, 130)
    assert store.stats().idle_settles.pending == 1  # type: ignore[union-attr]
    await store.close()  # nothing settled at close, no error
    assert 130 not in _snapshots(path)

    store = StateStore(_url(path), snapshot_every=100, settle_after=0)
    entered, never = asyncio.Event(), asyncio.Event()
    real = store.backend.replace_snapshot

    async def stuck(*args: Any) -> bool:
        entered.set()
        await never.wait()
        return await real(*args)

    store.backend.replace_snapshot = stuck  # type: ignore[method-assign,assignment]
    await _chat(store, "a", 130, 131)
    await entered.wait()  # a settle is running
    await store.close()
    assert 131 not in _snapshots(path)
    async with StateStore(_url(path), cache_size=0) as fresh:
        assert (await fresh.load("a")).data == _doc(131)
        assert (await fresh.verify()).problems == []


async def test_a_failure_is_logged_counted_and_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=0) as store:
        calls = 0

        async def broken(agent_id: str) -> int | None:
            nonlocal calls
            calls += 1
            raise RuntimeError("disk on fire: secret-state")

        store._settle_cached = broken  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, "statekeeper.store.idle_settle"):
            await _chat(store, "a", 0, 3)
            await store.idle_settled()
            await store.save("b", _doc(1))  # an unrelated call raises nothing
        await store.idle_settled()
        stats = store.stats().idle_settles
        assert stats is not None and stats.failed == calls >= 1 and stats.pending == 0
        logged = [r.getMessage() for r in caplog.records]
        assert any("'a'" in m and "RuntimeError" in m for m in logged)
        assert not any("secret-state" in m for m in logged)
        assert calls <= 4  # (once per save at most: never a loop)


async def test_an_agent_whose_write_lock_is_held_yields(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=0) as store:
        await _chat(store, "a", 0, 130)
        locks = store._writes._locks
        assert locks.try_acquire("a")  # a write of "a" in flight
        await store.idle_settled()
        locks.release("a")
        assert 130 not in _snapshots(path)  # not settled behind the write...
        await store.save("a", _doc(131))  # ...whose save queues it again
        await store.idle_settled()
        assert _snapshots(path)[-1] == 131


async def test_a_deleted_agent_is_not_settled(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100, settle_after=3600) as store:
        await _chat(store, "a", 0, 3)
        await store.delete("a")
        assert store.stats().idle_settles.pending == 0  # type: ignore[union-attr]


async def test_a_governed_store_takes_the_option_and_settles_nothing(tmp_path: Path) -> None:
    from statekeeper.codec.keys import generate_key
    from statekeeper.governance import Audit, parse_policy
    from statekeeper.security import Keyring

    path = tmp_path / "s.db"
    async with StateStore(
        _url(path),
        snapshot_every=100,
        settle_after=0,
        principal="ops",
        policy=parse_policy('[principals.ops]\nadmin = ["**"]\n'),
        audit=Audit(),
        keyring=Keyring({"k1": generate_key()}),
    ) as store:
        await _chat(store, "a", 0, 130)
        await store.idle_settled()
        assert 130 not in _snapshots(path)
        stats = store.stats().idle_settles
        assert stats is not None and stats.failed == 0


async def test_a_namespaced_store_settles_its_stored_id(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(
        _url(path), snapshot_every=100, settle_after=0, namespace="acme"
    ) as store:
        await _chat(store, "a", 0, 130)
        await store.idle_settled()
        assert store.stats().idle_settles.settled >= 1  # type: ignore[union-attr]
    assert _snapshots(path, "acme/a")[-1] == 130


def test_the_sync_twin_settles_idle_agents(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SyncStateStore(_url(path), snapshot_every=100, settle_after=0) as store:
        for n in range(1, 131):
            store.save("a", _doc(n))
        store.idle_settled()
        assert _snapshots(path)[-1] == 130


@pytest.mark.parametrize("bad", [-1, "10", True, float("inf"), float("nan")])
def test_a_bad_settle_after_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="settle_after"):
        StateStore("memory://", settle_after=bad)


async def test_the_queue_is_bounded() -> None:
    settled: list[str] = []

    async def settle(agent_id: str) -> int | None:
        settled.append(agent_id)
        return 1

    idle = IdleSettler(3600, settle, lambda _: False, limit=2)
    for agent in ("a", "b", "c", "b"):
        idle.saved(agent)
    stats = idle.stats()
    assert (stats.dropped, stats.pending) == (1, 2)
    await idle.close()
    assert settled == [] and idle.stats().pending == 0


async def test_an_idle_settle_never_refreshes_the_cache_behind_a_planned_write(
    tmp_path: Path,
) -> None:
    """Another store deletes the agent and makes it again up to the same seq; then this
    store's idle settle runs. Was: the settle read the agent, which validated the cache
    and replaced the cached record with the remade stream's — so a write planned on
    the old stream, whose compare-and-set on the cached head tag would have refused it,
    landed on the new one (the LangGraph saver's compaction lost a remade thread's
    checkpoint so, with idle settles on: 3 of 8 runs of test_langgraph_prune_remade.py).
    Now the settle uses the cached record only, and stores nothing: the head moved."""
    path = tmp_path / "s.db"
    async with (
        StateStore(_url(path), settle_after=3600) as store,
        StateStore(_url(path), settle_after=None) as other,
    ):
        await _chat(store, "a", 0, 3)
        cached = store._reads.trusted("a")
        assert cached is not None
        assert await other.delete("a")
        for n in range(1, 4):
            await other.save("a", {"new": n})
        assert await store._idle_settle("a") is None  # (the call the trigger makes)
        assert store._reads.trusted("a") is cached  # the cache not replaced behind it
        assert (await other.load("a")).data == {"new": 3}


async def test_a_governed_store_settles_nothing_once_its_write_is_revoked(
    tmp_path: Path,
) -> None:
    """A governed store whose snapshots carry no audit entries of their own (no audit
    log here) settles, as ``settle`` does there — but an explicit ``settle`` needs the
    principal's ``write``, and the idle settle, which writes in the same principal's
    name, did not ask: once the policy took ``write`` away after the agent's last save
    (``set_policy``), the idle settle still stored a row and removed another. Now it
    stores nothing (skipped), as the explicit call would refuse."""
    from statekeeper.errors import AccessDenied
    from statekeeper.governance import Policy

    path = tmp_path / "s.db"
    admin = Policy(principals={"ops": {"admin": ["**"]}})
    reader = Policy(principals={"ops": {"read": ["**"]}})
    async with StateStore(
        _url(path), snapshot_every=100, settle_after=3600, principal="ops", policy=admin
    ) as store:
        await _chat(store, "a", 0, 130)
        await store.set_policy(reader)  # type: ignore[attr-defined]  # (no write now)
        before = _snapshots(path)
        with pytest.raises(AccessDenied):
            await store.settle("a")
        assert await store._idle_settle("a") is None  # (the call the trigger makes)
        assert _snapshots(path) == before


async def test_buffered_writes_are_left_to_their_own_flush(tmp_path: Path) -> None:
    """``durability="async"``: a buffered save is durable at the buffer's flush, not
    earlier — an idle settle flushed the agent's buffer first (its writes stored long
    before ``flush_interval``). Now the agent is queued once its writes are stored, and
    settled then."""
    url = f"sqlite:///{tmp_path / 'wb.db'}"
    async with StateStore(
        url, durability="async", flush_interval=3600, flush_size=1000, settle_after=0
    ) as store:
        await store.save("a1", {"n": 1})
        await store.save("a1", {"n": 2})
        await store.idle_settled()
        async with StateStore(url, settle_after=None) as other:
            assert await other.get("a1") is None, "a buffered write was flushed by a settle"
            stats = store.stats().idle_settles
            assert stats is not None and stats.settled == 0
            await store.flush()
            await store.idle_settled()
            assert (await other.load("a1")).data == {"n": 2}
            stats = store.stats().idle_settles
            assert stats is not None and stats.settled + stats.skipped >= 1
            assert stats.failed == 0


async def test_an_idle_settle_never_takes_a_failed_flush_from_the_caller(
    tmp_path: Path,
) -> None:
    """``durability="async"``: a buffered save of "a" lost its race to another store's
    write, so the flush drops it — ``flush()`` and ``close()`` must raise
    WriteBufferError (the acknowledged save was never stored). Was: the idle settle of
    "a" flushed first, took the failure as its own (logged as a failed settle, counted)
    and the caller's ``flush()`` and ``close()`` then reported success."""
    from statekeeper.errors import WriteBufferError

    path = tmp_path / "s.db"
    async with StateStore(_url(path)) as theirs:
        mine = StateStore(_url(path), durability="async", flush_interval=3600, settle_after=0)
        try:
            await theirs.save("a", _doc(1))
            await mine.save("a", _doc(2))  # buffered on seq 1...
            await theirs.save("a", _doc(3))  # ...which another store takes first
            await mine.idle_settled()
            with pytest.raises(WriteBufferError, match=r"for: a$"):
                await mine.flush()
            await mine.save("b", _doc(1))  # (reported once: the store goes on)
        finally:
            await mine.close()
        assert (await theirs.load("a")).data == _doc(3)
        assert (await theirs.load("b")).data == _doc(1)


async def test_close_from_another_loop_waits_for_the_settle_running_there() -> None:
    """The settles run on a loop in another thread; the store is closed from this one.
    Was: close only asked that loop to cancel the settle (``call_soon_threadsafe``) and
    returned while the settle was still ending there (committing), the engine then
    closed under it. Now close hands the cancel to that loop and waits for the end."""
    import threading

    started, cancelling = threading.Event(), threading.Event()
    ended: list[bool] = []
    there = asyncio.new_event_loop()
    runner = threading.Thread(target=there.run_forever, daemon=True)
    runner.start()
    gate: asyncio.Future[None] = asyncio.run_coroutine_threadsafe(_a_future(), there).result()

    async def settle(agent_id: str) -> int | None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:  # cancelled: still committing until the gate opens
            cancelling.set()
            await gate
            ended.append(True)
        return None

    settler = IdleSettler(0, settle, lambda agent_id: False)

    async def save_there() -> None:
        settler.saved("a")

    try:
        asyncio.run_coroutine_threadsafe(save_there(), there).result()
        assert await asyncio.to_thread(started.wait, 60)
        closing = asyncio.ensure_future(settler.close())
        assert await asyncio.to_thread(cancelling.wait, 60)
        await asyncio.sleep(0)  # (close had returned by now before: nothing to wait for)
        assert not closing.done(), "close returned while the settle was still ending"
        there.call_soon_threadsafe(gate.set_result, None)
        await closing
        assert ended == [True]
    finally:
        there.call_soon_threadsafe(there.stop)
        await asyncio.to_thread(runner.join)
        there.close()


async def _a_future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


async def test_close_from_another_loop_ends_when_that_loop_stops_before_the_cancel() -> None:
    """The settle's loop (another thread's) was running when close handed it the cancel,
    and stopped before it ran it (an application's ``run_until_complete`` ended). Was:
    close waited for a reply that loop never gives while stopped, for ever. Now close
    returns once that loop no longer runs; the cancel stays queued there and is
    delivered when the loop runs again."""
    import threading

    started, blocked, release = threading.Event(), threading.Event(), threading.Event()
    there = asyncio.new_event_loop()
    runner = threading.Thread(target=there.run_forever, daemon=True)
    runner.start()
    cancelled: list[bool] = []
    gone = asyncio.Event()  # (used on the settle's loop only)

    async def settle(agent_id: str) -> int | None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            gone.set()
            raise
        return None

    settler = IdleSettler(0, settle, lambda agent_id: False)

    async def save_there() -> None:
        settler.saved("a")

    def busy_then_stop() -> None:  # the loop's last callback: it stops after it
        blocked.set()
        release.wait()
        there.stop()

    try:
        asyncio.run_coroutine_threadsafe(save_there(), there).result()
        assert await asyncio.to_thread(started.wait, 60)
        there.call_soon_threadsafe(busy_then_stop)
        assert await asyncio.to_thread(blocked.wait, 60)
        closing = asyncio.ensure_future(settler.close())
        await asyncio.sleep(0)  # (close has handed the cancel to the running loop)
        assert there.is_running() and not closing.done()
        release.set()
        await asyncio.to_thread(runner.join)  # stopped, the cancel still queued there
        assert not there.is_running() and not cancelled
        await asyncio.wait_for(closing, 60)  # (was: never returned)
        # running again: the cancel arrives
        await asyncio.to_thread(there.run_until_complete, gone.wait())
        assert cancelled == [True]
    finally:
        release.set()
        if there.is_running():
            there.call_soon_threadsafe(there.stop)
        await asyncio.to_thread(runner.join)
        there.close()


async def test_a_close_cancelled_while_the_settle_ends_is_cancelled() -> None:
    """The store's close is cancelled (a shutdown timeout) while it waits for the
    cancelled settle to end (it commits a moment longer). Was: close suppressed every
    CancelledError of that wait, its own cancellation too: it returned as if never
    cancelled. Now the cancellation reaches close's caller."""
    started, ending, may_end = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def settle(agent_id: str) -> int | None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # still committing until may_end
            ending.set()
            await may_end.wait()
            raise
        return None

    settler = IdleSettler(0, settle, lambda agent_id: False)
    settler.saved("a")
    await started.wait()
    closing = asyncio.ensure_future(settler.close())
    await ending.wait()
    closing.cancel()
    may_end.set()
    with pytest.raises(asyncio.CancelledError):
        await closing  # (was: returned)
