"""``store.subscribe`` and projections on a sharded store (Redis ``shards=4`` on the
shared server: the layout a Redis Cluster uses): every shard followed, a cursor per
shard, exactly once across a cancel and a resume, typed errors for foreign cursors."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.backends.redis import feed as redis_feed
from statekeeper.errors import (
    CapabilityUnsupported,
    FeedCursorMismatch,
    FeedPositionCompacted,
    InvalidArgument,
)
from statekeeper.feed import FeedCursor, ProjectionRunner
from statekeeper.records import FeedEvent

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis

SHARDS = 4
AGENTS = 24
LIVE_DEADLINE = 120.0  # a generous bound on a loaded machine, never a pause


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    require_redis()
    prefix = namespace(tmp_path) + ":"
    delete_prefix(prefix)
    backend = RedisBackend(REDIS_URL, prefix=prefix, shards=SHARDS)
    try:
        async with StateStore(backend) as opened:
            yield opened
    finally:
        delete_prefix(prefix)


async def _write(store: StateStore, writer: int, rounds: int) -> None:
    for i in range(rounds):
        for a in range(writer, AGENTS, 3):
            await store.save(f"ns/agent-{a}", {"i": i, "w": writer})


async def _every_event(store: StateStore) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    async for info in store.iter_agents():
        out += [(info.agent_id, seq) for seq in range(1, info.head_seq + 1)]
    return sorted(out)


def _in_agent_order(seen: list[FeedEvent]) -> None:
    last: dict[str, int] = {}
    for e in seen:
        assert e.seq == last.get(e.agent_id, 0) + 1, f"{e.agent_id} out of order"
        last[e.agent_id] = e.seq


async def test_a_subscriber_follows_every_shard_and_resumes_exactly_once(
    store: StateStore,
) -> None:
    seen: list[FeedEvent] = []
    cursor: FeedCursor | None = None
    enough = asyncio.Event()

    async def follow(start: FeedCursor | str | int) -> None:
        nonlocal cursor
        sub = store.subscribe(start, batch_size=8)
        async for change in sub:
            seen.append(change)
            cursor = sub.cursor  # handled: the resume point moves past it
            if len(seen) >= 60:
                enough.set()

    follower = asyncio.create_task(follow(0))
    writers = [asyncio.create_task(_write(store, w, 10)) for w in range(3)]
    await asyncio.wait_for(enough.wait(), LIVE_DEADLINE)  # a condition, not a pause
    follower.cancel()  # mid-stream, while the writers write
    with pytest.raises(asyncio.CancelledError):
        await follower
    assert cursor is not None and cursor.shards == SHARDS
    stored = str(cursor)  # what a user keeps
    await asyncio.gather(*writers)
    resumed = store.subscribe(FeedCursor.parse(stored), stop_at_head=True)
    seen += [e async for e in resumed]
    pairs = [(e.agent_id, e.seq) for e in seen]
    assert len(pairs) == len(set(pairs)), "an event was delivered twice"
    assert sorted(pairs) == await _every_event(store)  # none missing
    assert len(pairs) == AGENTS * 10
    _in_agent_order(seen)
    # every shard carried events, each event names its shard and a per-shard position
    assert {e.shard for e in seen} == set(range(SHARDS))
    for shard in range(SHARDS):
        positions = [e.position for e in seen if e.shard == shard]
        assert positions == sorted(set(positions))
    assert resumed.cursor.positions == tuple(
        max(e.position for e in seen if e.shard == k) for k in range(SHARDS)
    )


async def test_a_live_subscriber_is_woken_by_a_write_to_any_shard(store: StateStore) -> None:
    await store.save("ns/first", {"x": 1})
    sub = store.subscribe(0)
    assert (await anext(sub)).agent_id == "ns/first"
    waiting = asyncio.create_task(anext(sub))
    await store.save("ns/second", {"x": 2})  # most likely another shard
    change = await asyncio.wait_for(waiting, LIVE_DEADLINE)
    assert (change.agent_id, change.seq) == ("ns/second", 1)


async def test_foreign_or_malformed_cursors_are_refused_naming_the_mismatch(
    store: StateStore,
) -> None:
    await store.save("ns/a", {"x": 1})
    with pytest.raises(FeedCursorMismatch, match=r"3 shard position.*4 shard") as info:
        store.subscribe(FeedCursor((0, 0, 0)))
    assert (info.value.cursor_shards, info.value.store_shards) == (3, 4)
    with pytest.raises(FeedCursorMismatch):
        store.subscribe("fc1:1.2")
    with pytest.raises(InvalidArgument, match="not a feed cursor"):
        store.subscribe("fc1:1.-2.3.4")
    with pytest.raises(InvalidArgument, match="4 shards"):
        store.subscribe(7)  # an int position means nothing across 4 feeds
    with pytest.raises(InvalidArgument, match=">= 0"):
        FeedCursor((0, -1, 0, 0))
    sub = store.subscribe(0, stop_at_head=True)
    assert [e.agent_id async for e in sub] == ["ns/a"]
    with pytest.raises(CapabilityUnsupported, match="cursor"):
        _ = sub.position  # one int cannot resume 4 feeds


async def test_a_cursor_below_a_trimmed_shard_is_compacted(store: StateStore) -> None:
    for a in range(12):
        await store.save(f"ns/agent-{a}", {"x": 1})
    backend = store.backend
    assert isinstance(backend, RedisBackend)
    shard = backend.layout.shard_of("ns/agent-0")
    keys = backend.layout.shard_keys[shard]
    _, head = await backend.shard_feed_bounds(shard)
    await redis_feed.trim_feed(backend, keys, head)
    with pytest.raises(FeedPositionCompacted, match=f"of shard {shard}") as info:
        [e async for e in store.subscribe(0, stop_at_head=True)]
    assert (info.value.shard, info.value.floor) == (shard, head)
    # from past the trimmed range, the other shards' events are all there
    start = FeedCursor.start(SHARDS).advanced(shard, head)
    rest = [e async for e in store.subscribe(start, stop_at_head=True)]
    assert {e.agent_id for e in rest} == {
        f"ns/agent-{a}" for a in range(12) if backend.layout.shard_of(f"ns/agent-{a}") != shard
    }


async def test_a_rebuilt_projection_equals_the_live_one(store: StateStore, tmp_path: Path) -> None:
    tables = ("agent_states", "agent_activity", "tool_calls", "transitions")

    def dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
        with sqlite3.connect(path) as db:
            return {
                t: sorted(tuple(v for v in row) for row in db.execute(f'SELECT * FROM "{t}"'))
                for t in tables
            }

    live_path = tmp_path / "live.db"
    async with ProjectionRunner(store, live_path, batch_size=5) as live:
        for w in range(3):  # caught up between writes: applied in many batches
            await _write(store, w, 4)
            await store.append(f"ns/agent-{w}", "tool_call", {"tool": "t", "duration": 0.1})
            await live.catch_up()
        status = {s.name: s for s in await live.status()}
        for name in live.projections:
            await live.rebuild(name)
        rebuilt = dump(live_path)
    live_copy = tmp_path / "again.db"
    async with ProjectionRunner(store, live_copy, batch_size=7) as again:
        await again.catch_up()
        again_status = await again.status()
    assert dump(live_copy) == rebuilt
    assert sum(len(rows) for rows in rebuilt.values()) > 0
    for s in again_status:  # the composite cursor is what was stored with the model
        assert s.cursor is not None and FeedCursor.parse(s.cursor).shards == SHARDS
        assert s.behind == 0 and s.position == status[s.name].position


async def test_an_old_read_model_database_gains_the_cursor_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the table as it was before sharded feeds
        db.execute(
            "CREATE TABLE sk_projections (name TEXT PRIMARY KEY, position INTEGER NOT NULL"
            " DEFAULT 0, applied INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL DEFAULT"
            " 'live', rebuild_target INTEGER, error TEXT, error_position INTEGER,"
            " updated_at REAL)"
        )
    async with StateStore(f"sqlite:///{tmp_path / 'store.db'}") as plain:
        await plain.save("ns/a", {"x": 1})
        async with ProjectionRunner(plain, path) as runner:
            await runner.catch_up()
            rows = await runner.query("SELECT name, position, cursor FROM sk_projections")
    assert rows and all(position >= 1 and cursor is None for _, position, cursor in rows)
