"""Durability modes: ``sync`` commits each write, ``group`` shares commits between
concurrent writes, ``async`` buffers writes and flushes them by size and by interval."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import ConflictError, StateStore, StateTransition
from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.errors import BackendError, WriteBufferError
from statekeeper.records import AppendResult

from .conftest import CountingBackend, wait_until

# -- sync ---------------------------------------------------------------------------------


async def test_sync_write_is_in_the_backend_when_the_call_returns(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    store = open_store(db_url, durability="sync")
    peer = SQLiteBackend(db_url.removeprefix("sqlite:///"))
    try:
        for i in range(1, 6):
            result = await store.save("a1", {"n": i})
            assert await peer.head("a1") == result.last_seq == i
        assert store.stats().commits == store.stats().appends == 5
    finally:
        await peer.close()


# -- group --------------------------------------------------------------------------------


async def test_group_commit_shares_commits_and_each_write_is_durable_on_return(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    store = open_store(db_url, durability="group")
    peer = SQLiteBackend(db_url.removeprefix("sqlite:///"))  # an independent reader
    agents = [f"agent-{i:02d}" for i in range(40)]
    durable_on_return: list[bool] = []

    async def one(agent_id: str, n: int) -> AppendResult:
        result = await store.save(agent_id, {"n": n})
        durable_on_return.append(await peer.head(agent_id) >= result.last_seq)
        return result

    try:
        for n in range(3):
            results = await asyncio.gather(*(one(a, n) for a in agents))
            assert all(r.last_seq == n + 1 for r in results)
        stats = store.stats()
        assert stats.appends == 120
        assert stats.commits < stats.appends / 4  # one fsync served many writes
        assert durable_on_return == [True] * 120
    finally:
        await peer.close()
    other = open_store(db_url)
    for agent_id in agents:
        assert (await other.load(agent_id)).data == {"n": 2}


async def test_a_group_save_with_nobody_to_share_its_commit_is_committed_as_sync_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``group`` with one agent saving: nothing else is ready nor in flight, so the save
    is the lone commit a ``sync`` save makes, made the same way (``commit_next``: no
    coroutine of the group committer nor of ``append_next``, and no pass of the loop);
    each save is in the file when it returns. Saves made at once still share commits."""
    committed_alone = 0
    original = SQLiteBackend.commit_next

    def counting(self: SQLiteBackend, row: Any) -> bool:
        nonlocal committed_alone
        done = original(self, row)
        committed_alone += done
        return done

    monkeypatch.setattr(SQLiteBackend, "commit_next", counting)
    path = tmp_path / "lone.db"
    peer = SQLiteBackend(path)
    try:
        async with StateStore(f"sqlite:///{path}", durability="group") as store:
            backend = store._writes.backend
            assert isinstance(backend, SQLiteBackend)
            await store.save("a", {"messages": []})  # created: the general path
            for n in range(1, 11):
                backend._pass_due = asyncio.get_running_loop().time() + 3600.0  # no pass due
                result = await store.save("a", {"messages": [f"m{i}" for i in range(n)]})
                assert await peer.head("a") == result.last_seq == n + 1
            assert committed_alone == 10
            assert store.stats().commits == store.stats().appends == 11
            for a in "bcdefgh":
                await store.save(a, {"messages": []})
            before = store.stats()
            await asyncio.gather(*(store.save(a, {"messages": ["x"]}) for a in "bcdefgh"))
            after = store.stats()
            assert after.appends - before.appends == 7
            assert after.commits - before.commits < 7  # shared
            assert committed_alone == 10
        async with StateStore(f"sqlite:///{path}") as again:
            assert (await again.load("a")).data == {"messages": [f"m{i}" for i in range(10)]}
            assert (await again.load("h")).data == {"messages": ["x"]}
    finally:
        await peer.close()


async def test_group_commit_conflicts_fail_alone(open_store: Callable[..., StateStore]) -> None:
    store = open_store("memory://", durability="group")
    for name in "abc":
        await store.save(name, {"n": 0})
    results = await asyncio.gather(
        store.save("a", {"n": 1}, expected_seq=1),
        store.save("b", {"n": 1}, expected_seq=7),
        store.save("c", {"n": 1}),
        return_exceptions=True,
    )
    assert results[0] == AppendResult("a", 2, 2)
    assert isinstance(results[1], ConflictError) and results[1].current_seq == 1
    assert results[2] == AppendResult("c", 2, 2)
    assert [(await store.load(n)).data["n"] for n in "abc"] == [1, 0, 1]


async def test_group_concurrent_saves_of_one_agent_are_serialized(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    store = open_store(db_url, durability="group")
    await store.save("a1", {"log": []})

    async def add(i: int) -> None:
        await store.append("a1", "log", {"i": i}, ops=[{"op": "add", "path": "/log/-", "value": i}])

    await asyncio.gather(*(add(i) for i in range(20)))
    snap = await open_store(db_url).load("a1")
    assert snap.seq == 21
    assert sorted(snap.data["log"]) == list(range(20))


# -- async (write-behind) -------------------------------------------------------------------


async def test_async_flushes_by_size(open_store: Callable[..., StateStore]) -> None:
    backend = MemoryBackend()
    store = open_store(backend, durability="async", flush_size=5, flush_interval=3600)
    for i in range(4):
        await store.save(f"a{i}", {"n": i})
    assert store.stats().buffered == 4
    assert await backend.count_agents() == 0  # buffered, not yet written
    assert (await store.load("a0")).data == {"n": 0}  # but readable through the store
    await store.save("a4", {"n": 4})  # the fifth write fills the buffer

    async def all_written() -> bool:
        return await backend.count_agents() == 5

    await wait_until(all_written, what="a flush triggered by size")
    assert store.stats().buffered == 0


async def test_async_flushes_by_interval(open_store: Callable[..., StateStore]) -> None:
    backend = MemoryBackend()
    store = open_store(backend, durability="async", flush_size=1000, flush_interval=0.02)
    for i in range(3):
        await store.save("a1", {"n": i})
    assert await backend.head("a1") == 0

    async def written() -> bool:
        return await backend.head("a1") == 3

    await wait_until(written, what="a flush triggered by the interval")
    fresh = open_store(backend)
    assert (await fresh.load("a1")).data == {"n": 2}


async def test_async_bounds_unflushed_writes_to_flush_size(
    open_store: Callable[..., StateStore],
) -> None:
    # A tight loop never yields to the event loop between saves; the documented bound
    # (a crash loses at most ``flush_size`` acknowledged writes) must still hold.
    backend = MemoryBackend()
    flush_size = 10
    store = open_store(backend, durability="async", flush_size=flush_size, flush_interval=3600)
    for i in range(1, 101):
        await store.save("a1", {"n": i})
        assert i - await backend.head("a1") <= flush_size, f"after write {i}"
    await store.flush()
    assert await backend.head("a1") == 100


async def test_async_flush_writes_everything_and_close_flushes(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    store = open_store(db_url, durability="async", flush_size=1000, flush_interval=3600)
    for i in range(10):
        await store.save(f"a{i % 3}", {"n": i})
    await store.flush()
    assert store.stats().buffered == 0
    other = open_store(db_url)
    assert (await other.load("a0")).data == {"n": 9}
    await store.save("a1", {"n": "last"})
    await store.close()
    assert (await other.load("a1")).data == {"n": "last"}


async def test_async_flush_reports_a_buffered_conflict_and_drops_the_cache(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    mine = open_store(db_url, durability="async", flush_size=1000, flush_interval=3600)
    theirs = open_store(db_url)
    await theirs.save("a1", {"by": "theirs", "n": 1})
    await theirs.save("b1", {"n": 1})
    await mine.save("a1", {"by": "mine", "n": 2})  # buffered on top of seq 1
    await mine.save("a1", {"by": "mine", "n": 3})
    await mine.save("b1", {"n": 2})  # an unrelated agent in the same buffer
    await theirs.save("a1", {"by": "theirs", "n": 2})  # durable first: seq 2
    with pytest.raises(WriteBufferError) as info:
        await mine.flush()
    failure = info.value.failures["a1"]
    assert isinstance(failure, ConflictError) and failure.current_seq == 2
    assert set(info.value.failures) == {"a1"}
    # the lost writes are not served from a stale cache: mine sees what is stored
    assert (await mine.load("a1")).data == {"by": "theirs", "n": 2}
    assert (await theirs.load("b1")).data == {"n": 2}
    await mine.flush()  # reported once, then cleared
    assert (await mine.save("a1", {"by": "mine", "n": 4})).last_seq == 3
    await mine.flush()
    assert (await theirs.load("a1")).data == {"by": "mine", "n": 4}


async def test_async_history_and_time_travel_see_buffered_writes(
    open_store: Callable[..., StateStore],
) -> None:
    store = open_store("memory://", durability="async", flush_size=1000, flush_interval=3600)
    for i in range(4):
        await store.save("a1", {"n": i})
    assert await store.head("a1") == 4
    assert [e.seq async for e in store.history("a1")] == [1, 2, 3, 4]
    assert (await store.load("a1", at_seq=2)).data == {"n": 1}


async def test_async_idempotent_retry_inside_the_buffer(
    open_store: Callable[..., StateStore],
) -> None:
    backend = MemoryBackend()
    store = open_store(backend, durability="async", flush_size=1000, flush_interval=3600)
    await store.create("a1", {"steps": []})
    op = [{"op": "add", "path": "/steps/-", "value": "pay"}]
    first = await store.append("a1", "step", ops=op, idempotency_key="pay-1")
    retry = await store.append("a1", "step", ops=op, idempotency_key="pay-1")
    assert retry.duplicate and (retry.first_seq, retry.last_seq) == (
        first.first_seq,
        first.last_seq,
    )
    await store.append("a1", "step", ops=[{"op": "add", "path": "/steps/-", "value": "ship"}])
    await store.flush()  # nothing was lost to the retry
    assert (await StateStore(backend).load("a1")).data == {"steps": ["pay", "ship"]}


async def test_async_idempotent_retry_of_a_flushed_write(
    open_store: Callable[..., StateStore],
) -> None:
    backend = CountingBackend(MemoryBackend())
    store = open_store(backend, durability="async", flush_size=1000, flush_interval=3600)
    await store.create("a1", {"n": 0})
    await store.save("a1", {"n": 1}, idempotency_key="k")
    await store.flush()
    retry = await store.save("a1", {"n": 1}, idempotency_key="k")
    assert retry == AppendResult("a1", 2, 2, duplicate=True)
    await store.save("a1", {"n": 2})
    await store.flush()
    snap = await StateStore(backend.inner).load("a1")
    assert (snap.seq, snap.data) == (3, {"n": 2})


async def test_async_unpins_flushed_agents(open_store: Callable[..., StateStore]) -> None:
    # Memory stays bounded by the cache size once buffered writes are flushed.
    backend = MemoryBackend()
    store = open_store(
        backend, durability="async", cache_size=4, flush_size=1000, flush_interval=0.01
    )
    for i in range(50):
        await store.save(f"agent-{i}", {"n": i})

    async def flushed() -> bool:
        return await backend.count_agents() == 50

    await wait_until(flushed, what="the interval flush")
    assert store.stats().cache.size <= 4
    assert len(store._unflushed) == 0  # nothing pinned once durable


async def test_async_flush_keeps_order_across_keyed_and_keyless_writes(
    open_store: Callable[..., StateStore],
) -> None:
    backend = MemoryBackend()
    store = open_store(
        backend, durability="async", flush_size=1000, flush_interval=3600, snapshot_every=3
    )
    await store.create("a1", {"log": []})
    for i in range(10):
        await store.append(
            "a1",
            "log",
            {"i": i},
            ops=[{"op": "add", "path": "/log/-", "value": i}],
            idempotency_key=f"k{i}" if i % 4 == 0 else None,
        )
        await store.save(f"other-{i % 3}", {"i": i})
    assert store.stats().buffered == 21
    await store.flush()
    fresh = open_store(backend)
    snap = await fresh.load("a1")
    assert (snap.seq, snap.data) == (11, {"log": list(range(10))})
    assert await backend.lookup_key("a1", "k4") == AppendResult("a1", 6, 6, duplicate=True)
    assert [e.info["i"] async for e in fresh.history("a1", after_seq=1)] == list(range(10))
    report = await fresh.verify()
    assert report.ok and report.events == 21
    assert report.snapshots >= 1  # snapshots written inside merged appends are valid


async def test_async_failed_write_drops_only_its_own_agent(
    open_store: Callable[..., StateStore],
) -> None:
    backend = MemoryBackend()
    mine = open_store(backend, durability="async", flush_size=1000, flush_interval=3600)
    theirs = open_store(backend)
    await theirs.save("a1", {"n": 0})
    await mine.save("a1", {"n": 1, "mine": True})
    await mine.append("a1", "note", {"x": 1}, idempotency_key="note-1")
    await mine.save("b1", {"n": 1})
    await theirs.save("a1", {"n": 1})  # takes seq 2 first
    with pytest.raises(WriteBufferError):
        await mine.flush()
    assert await backend.head("a1") == 2
    assert await backend.lookup_key("a1", "note-1") is None  # dropped, not misplaced
    assert (await theirs.load("a1")).data == {"n": 1}
    assert (await theirs.load("b1")).data == {"n": 1}


async def test_an_agent_whose_buffered_write_failed_does_not_write_on_top_of_another(
    open_store: Callable[..., StateStore],
) -> None:
    backend = MemoryBackend()
    mine = open_store(backend, durability="async", flush_size=1000, flush_interval=3600)
    theirs = open_store(backend)
    await theirs.save("a1", {"n": 0})
    agent = await mine.agent("a1")
    agent.data["n"] = 1  # buffered as seq 2...
    await agent.save()
    await theirs.save("a1", {"n": "theirs"})  # ...which another writer takes first
    with pytest.raises(WriteBufferError):
        await mine.flush()
    # the agent still believes seq 2 holds its n=1; a patch built on that belief
    # must not be stored at seq 3 on top of the other writer's state
    agent.data["m"] = 5
    with pytest.raises(WriteBufferError, match="refresh"):
        await agent.save()
    with pytest.raises(WriteBufferError, match="refresh"):
        await agent.transition(StateTransition.START_PROCESSING)
    await mine.flush()
    assert await backend.head("a1") == 2
    assert (await theirs.load("a1")).data == {"n": "theirs"}
    await agent.refresh()  # the stored truth: it may write again
    agent.data["m"] = 5
    await agent.save()
    await mine.flush()
    assert (await theirs.load("a1")).data == {"n": "theirs", "m": 5}


class GatedBackend(CountingBackend):
    """Holds every ``append_batch`` until the test opens the gate, so writes can be
    buffered while a flush is in flight."""

    def __init__(self) -> None:
        super().__init__(MemoryBackend())
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def append_batch(self, requests: Any) -> list[AppendResult | BaseException]:
        self.entered.set()
        await self.gate.wait()
        return await super().append_batch(requests)


async def test_async_writes_buffered_during_a_failing_flush_are_dropped_too(
    open_store: Callable[..., StateStore],
) -> None:
    backend = GatedBackend()
    mine = open_store(backend, durability="async", flush_size=1000, flush_interval=3600)
    theirs = open_store(backend.inner)
    await theirs.save("a1", {"n": 0, "theirs": True})
    await mine.save("a1", {"n": 1})  # buffered as seq 2, on top of seq 1
    await theirs.save("a1", {"n": "theirs", "theirs": True})  # takes seq 2 first
    flushing = asyncio.create_task(mine.flush())
    await backend.entered.wait()  # the doomed batch is in flight...
    await mine.save("a1", {"n": 2})  # ...and this one, built on it, expects seq 2
    backend.gate.set()
    with pytest.raises(WriteBufferError):
        await flushing
    await mine.flush()
    # nothing built on the failed write may land on the other writer's state
    assert await backend.inner.head("a1") == 2
    assert (await theirs.load("a1")).data == {"n": "theirs", "theirs": True}
    assert (await mine.load("a1")).data == {"n": "theirs", "theirs": True}


async def test_group_commit_failure_reaches_every_caller_and_writes_nothing(
    tmp_path: Path, open_store: Callable[..., StateStore]
) -> None:
    path = tmp_path / "locked.db"
    store = open_store(f"sqlite:///{path}?busy_timeout=0.05", durability="group")
    for name in "abc":
        await store.save(name, {"n": 0})
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        results = await asyncio.gather(
            *(store.save(name, {"n": 1}) for name in "abc"), return_exceptions=True
        )
        other.execute("ROLLBACK")
    assert all(isinstance(r, BackendError) for r in results), results
    assert [(await store.load(name)).data for name in "abc"] == [{"n": 0}] * 3
    results = await asyncio.gather(*(store.save(name, {"n": 2}) for name in "abc"))
    assert [r.last_seq for r in results] == [2, 2, 2]  # type: ignore[union-attr]


async def test_group_commit_of_a_cancelled_caller_still_stands(
    open_store: Callable[..., StateStore],
) -> None:
    backend = GatedBackend()
    store = open_store(backend, durability="group")
    saving = asyncio.create_task(store.save("a1", {"n": 1}))
    await backend.entered.wait()  # the commit is on its way
    saving.cancel()
    backend.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await saving
    await store.flush()  # waits for the commit the caller left behind
    assert await backend.inner.head("a1") == 1
    assert (await store.load("a1")).data == {"n": 1}
    assert (await store.save("a1", {"n": 2})).last_seq == 2


async def _queued(store: StateStore) -> bool:
    """An append waits in the group committer's queue (not yet in a batch)."""
    group = store._writes.group
    return group is not None and bool(group._pending)


async def test_group_append_of_a_caller_cancelled_before_its_commit_is_not_stored(
    open_store: Callable[..., StateStore],
) -> None:
    backend = GatedBackend()
    store = open_store(backend, durability="group")
    first = asyncio.create_task(store.save("a1", {"n": 1}))
    await backend.entered.wait()  # a1's commit holds the one batch in flight...
    second = asyncio.create_task(store.save("b1", {"n": 1}))
    await wait_until(lambda: _queued(store), what="the append queued behind the batch")
    second.cancel()  # ...b1's caller gives up while its append still waits to be sent
    with pytest.raises(asyncio.CancelledError):
        await second
    backend.gate.set()
    await first
    await store.flush()
    # the caller was told "cancelled": its append must not be stored behind its back
    assert await backend.inner.head("b1") == 0  # (no event)
    assert await store.get("b1") is None


def _done(task: asyncio.Task[Any]) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return task.done()

    return done


class InterruptedBackend(GatedBackend):
    """Its first ``append_batch`` ends cancelled (the commit interrupted) once the gate
    opens, without storing anything; the later ones store as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    async def append_batch(self, requests: Any) -> list[AppendResult | BaseException]:
        if not self.interrupted:
            self.interrupted = True
            self.entered.set()
            await self.gate.wait()
            raise asyncio.CancelledError
        return await self.inner.append_batch(requests)


async def test_interrupted_group_commit_strands_no_other_append(
    open_store: Callable[..., StateStore],
) -> None:
    backend = InterruptedBackend()
    store = open_store(backend, durability="group")
    first = asyncio.create_task(store.save("a1", {"n": 1}))
    await backend.entered.wait()  # a1's commit is in flight...
    second = asyncio.create_task(store.save("b1", {"n": 1}))
    await wait_until(lambda: _queued(store), what="the append queued behind the batch")
    backend.gate.set()  # ...and is interrupted, with b1's append waiting behind it
    # a1's caller was not cancelled: it learns the commit's outcome is unknown
    with pytest.raises(BackendError) as info:
        await first
    assert info.value.maybe_applied
    # (was: left queued with nobody to send it, its caller waiting for good)
    await wait_until(_done(second), what="b1's save to end")
    assert (await second).last_seq == 1
    assert await backend.inner.head("b1") == 1
    assert (await store.save("a1", {"n": 2})).last_seq == 1  # a1's first save never landed


async def test_a_flush_waiting_for_an_interrupted_group_commit_is_not_cancelled(
    open_store: Callable[..., StateStore],
) -> None:
    backend = InterruptedBackend()
    store = open_store(backend, durability="group")
    saving = asyncio.create_task(store.save("a1", {"n": 1}))
    await backend.entered.wait()
    flushing = asyncio.create_task(store.flush())
    await asyncio.sleep(0)  # (one pass of the loop: the flush waits for the batch in flight)
    backend.gate.set()
    with pytest.raises(BackendError):
        await saving
    await flushing  # (was: CancelledError, as if the flush itself had been cancelled)
    assert not flushing.cancelled()


async def test_async_backend_failure_is_reported_and_the_store_recovers(
    tmp_path: Path, open_store: Callable[..., StateStore]
) -> None:
    path = tmp_path / "locked.db"
    url = f"sqlite:///{path}?busy_timeout=0.05"
    store = open_store(url, durability="async", flush_size=1000, flush_interval=3600)
    await store.save("a1", {"n": 0})
    await store.flush()
    await store.save("a1", {"n": 1})
    await store.save("b1", {"n": 1})
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(WriteBufferError) as info:
            await store.flush()
        other.execute("ROLLBACK")
    assert set(info.value.failures) == {"a1", "b1"}
    assert all(isinstance(e, BackendError) for e in info.value.failures.values())
    # the lost writes are not served from memory, and new ones go through
    assert (await store.load("a1")).data == {"n": 0}
    assert await store.get("b1") is None
    await store.save("a1", {"n": 2})
    await store.flush()
    async with StateStore(url) as fresh:
        assert (await fresh.load("a1")).data == {"n": 2}
