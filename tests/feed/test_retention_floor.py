"""Retention moves the change feed's floor over the events it removes (keep_last
compaction, a TTL purge): a subscriber behind them is told (FeedPositionCompacted),
``feed_bounds()`` says so, a subscriber past them goes on, and ``retention apply``
names the projections still behind. On every engine with a feed, and on a sharded
Redis store."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.errors import FeedPositionCompacted
from statekeeper.feed import FeedCursor, ProjectionRunner
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis


async def _events(store: StateStore, agent_id: str, n: int) -> None:
    await store.save(agent_id, {"i": 0})
    for _ in range(n - 1):
        await store.append(agent_id, "tool_call", {"tool": "charge", "duration": 0.1})


async def _seqs(store: StateStore, start: int | FeedCursor | str) -> list[tuple[str, int]]:
    return [
        (c.agent_id, c.seq) async for c in store.subscribe(from_position=start, stop_at_head=True)
    ]


async def test_a_subscriber_behind_a_compaction_is_told_and_the_bounds_say_so(
    feed_url: str,
) -> None:
    async with StateStore(feed_url) as store:
        await _events(store, "shop/a", 10)
        await store.save("other/b", {"i": 1})  # position 11: not retention's
        sub = store.subscribe()
        seen = [await anext(sub) for _ in range(8)]  # positions 1..8: the ones removed
        assert await store.feed_bounds() == (0, 11)
        dry = await apply_retention(store, RetentionPolicy.parse("shop keep_last=2"), dry_run=True)
        assert dry.feed_through == FeedCursor((8,)) and dry.actions[0].feed_position == 8
        assert await store.feed_bounds() == (0, 11)  # a dry run changes nothing
        report = await apply_retention(store, RetentionPolicy.parse("shop keep_last=2"))
        assert report.feed_through == FeedCursor((8,))
        assert await store.feed_bounds() == (8, 11)
        with pytest.raises(FeedPositionCompacted) as caught:
            await _seqs(store, 0)  # behind: it would have missed seqs 1..8
        assert caught.value.floor == 8
        # the one that had read them goes on, and resuming from the floor works
        assert [c.seq for c in seen] == list(range(1, 9))
        assert await _seqs(store, sub.position) == [("shop/a", 9), ("shop/a", 10), ("other/b", 1)]
        assert await _seqs(store, 8) == [("shop/a", 9), ("shop/a", 10), ("other/b", 1)]


async def test_a_ttl_purge_raises_the_floor_through_the_agents_last_event(feed_url: str) -> None:
    async with StateStore(feed_url) as store:
        await _events(store, "old/a", 3)
        await _events(store, "live/b", 2)
        report = await apply_retention(
            store, RetentionPolicy.parse("old ttl=60s"), now=time.time() + 3600
        )
        assert [(a.kind, a.outcome) for a in report.actions] == [("purge", "done")]
        assert report.feed_through == FeedCursor((3,))
        assert (await store.feed_bounds())[0] == 3
        with pytest.raises(FeedPositionCompacted):
            await _seqs(store, 2)
        # (the purge's tombstone after them: the agent ended at seq 3)
        assert await _seqs(store, 3) == [("live/b", 1), ("live/b", 2), ("old/a", 3)]


async def test_a_run_that_removes_nothing_more_leaves_the_floor_where_it_is(
    feed_url: str,
) -> None:
    async with StateStore(feed_url) as store:
        await _events(store, "shop/a", 6)
        await apply_retention(store, RetentionPolicy.parse("shop keep_last=2"))
        floor, head = await store.feed_bounds()
        assert (floor, head) == (4, 6)
        again = await apply_retention(store, RetentionPolicy.parse("shop keep_last=2"))
        assert again.feed_through is None  # nothing more removed: the floor stays
        assert await store.feed_bounds() == (4, 6)


@pytest.fixture
async def sharded(tmp_path: Path) -> AsyncIterator[StateStore]:
    require_redis()
    prefix = namespace(tmp_path) + ":"
    delete_prefix(prefix)
    try:
        async with StateStore(f"{REDIS_URL}?prefix={prefix}&shards=4") as opened:
            yield opened
    finally:
        delete_prefix(prefix)


async def test_on_a_sharded_store_only_the_agents_shard_is_trimmed(sharded: StateStore) -> None:
    await _events(sharded, "shop/a", 5)
    await sharded.save("other/b", {"i": 1})
    shard = sharded.backend.layout.shard_of("shop/a")  # type: ignore[attr-defined]
    report = await apply_retention(sharded, RetentionPolicy.parse("shop keep_last=1"))
    expected = FeedCursor.start(4).advanced(shard, 4)
    assert report.feed_through == expected
    bounds = await sharded.feed_cursor_bounds()
    assert bounds.floor == expected
    with pytest.raises(FeedPositionCompacted) as caught:
        await _seqs(sharded, FeedCursor.start(4))
    assert caught.value.shard == shard
    assert sorted(await _seqs(sharded, expected)) == [("other/b", 1), ("shop/a", 5)]


def test_retention_apply_names_the_projections_still_behind(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    url = f"sqlite:///{db}"

    async def setup() -> None:
        async with StateStore(url) as store:
            await store.save("shop/a", {"i": 0})
            async with ProjectionRunner(store, tmp_path / "shop.projections.db") as runner:
                await runner.catch_up()  # at position 1
                for _ in range(9):
                    await store.append("shop/a", "tool_call", {"tool": "t", "duration": 0.1})
                await runner.catch_up(["agent_states"])  # this one is up to date

    asyncio.run(setup())
    cli = CliRunner()
    args = ["--db", url, "retention", "apply", "--rule", "shop keep_last=2"]
    dry = cli.invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "floor would rise to 8" in dry.output
    assert "projection 'tool_calls' is behind it (at 1)" in dry.output
    assert "'agent_states' is behind" not in dry.output
    done = cli.invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert out["feed_through"] == 8
    assert {p["name"]: p["position"] for p in out["projections_behind"]} == {
        "agent_activity": 1, "tool_calls": 1, "transitions": 1,
    }  # fmt: skip

    async def resume() -> None:
        async with (
            StateStore(url) as store,
            ProjectionRunner(store, tmp_path / "shop.projections.db") as runner,
        ):
            with pytest.raises(FeedPositionCompacted):
                await runner.catch_up(["tool_calls"])
            assert await runner.catch_up(["agent_states"]) == {"agent_states": 0}

    asyncio.run(resume())


class _Lookups:
    """Counts the feed-position lookups retention makes on a backend (a spy over the
    real engine's methods): one batch, or one per agent."""

    def __init__(self, store: StateStore) -> None:
        backend = store.backend
        self.batches: list[list[tuple[str, int]]] = []
        self.single = 0
        self._inside = False
        one, many = backend.feed_position, backend.feed_positions

        async def feed_position(agent_id: str, seq: int) -> int | None:
            self.single += not self._inside
            return await one(agent_id, seq)

        async def feed_positions(
            wanted: Sequence[tuple[str, int]],
        ) -> dict[tuple[str, int], int]:
            self.batches.append(sorted(wanted))
            self._inside = True
            try:
                return await many(wanted)
            finally:
                self._inside = False

        backend.feed_position = feed_position  # type: ignore[method-assign]
        backend.feed_positions = feed_positions  # type: ignore[method-assign]


async def test_a_purge_of_many_old_agents_looks_their_positions_up_in_one_pass(
    feed_url: str,
) -> None:
    async with StateStore(feed_url) as store:
        for i in range(30):
            await _events(store, f"old/a{i:02}", 2)
            await store.save("live/b", {"i": i})  # (not retention's: between them)
        sub = store.subscribe()
        await anext(sub)  # a subscriber behind: it read position 1 only
        lookups = _Lookups(store)
        report = await apply_retention(
            store, RetentionPolicy.parse("old ttl=60s"), now=time.time() + 3600
        )
        assert report.purged == 30
        # one batch for all thirty, no lookup of its own per agent
        assert lookups.batches == [[(f"old/a{i:02}", 2) for i in range(30)]]
        assert lookups.single == 0
        # the floor went through the last purged agent's last event (position 89)
        assert report.feed_through == FeedCursor((89,))
        assert (await store.feed_bounds())[0] == 89
        with pytest.raises(FeedPositionCompacted):
            await _seqs(store, sub.position)
        tombstones = [(f"old/a{i:02}", 2) for i in range(30)]
        assert await _seqs(store, 89) == [("live/b", 30), *tombstones]


async def test_on_sqlite_the_lookups_of_a_page_of_purges_read_the_feed_once(
    tmp_path: Path,
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'feed.db'}") as store:
        for i in range(40):
            await _events(store, f"old/a{i:02}", 3)
        await _events(store, "live/b", 5)
        reader: sqlite3.Connection = store.backend._reader()  # type: ignore[attr-defined]
        statements: list[str] = []
        reader.set_trace_callback(statements.append)
        report = await apply_retention(
            store, RetentionPolicy.parse("old ttl=60s"), now=time.time() + 3600
        )
        reader.set_trace_callback(None)
        assert report.purged == 40 and report.feed_through == FeedCursor((120,))
        # the feed read by agent once for the page (one window: 125 rows), not forty times
        by_agent = [s for s in statements if "FROM sk_feed" in s and "agent_id" in s]
        assert len(by_agent) == 1
        with pytest.raises(FeedPositionCompacted):
            await _seqs(store, 119)


async def test_on_a_sharded_store_one_batch_raises_each_shards_floor(sharded: StateStore) -> None:
    layout = sharded.backend.layout  # type: ignore[attr-defined]
    last: dict[int, int] = {}  # shard -> position of its last purged event
    for i in range(12):
        agent_id = f"old/a{i:02}"
        await _events(sharded, agent_id, 2)
        shard = layout.shard_of(agent_id)
        last[shard] = (await sharded.feed_cursor_bounds()).head.positions[shard]
        await sharded.save("live/b", {"i": i})
    lookups = _Lookups(sharded)
    report = await apply_retention(
        sharded, RetentionPolicy.parse("old ttl=60s"), now=time.time() + 3600
    )
    assert report.purged == 12 and len(lookups.batches) == 1 and lookups.single == 0
    expected = FeedCursor(tuple(last.get(k, 0) for k in range(4)))
    assert report.feed_through == expected
    assert (await sharded.feed_cursor_bounds()).floor == expected
    with pytest.raises(FeedPositionCompacted):
        await _seqs(sharded, FeedCursor.start(4))


async def test_a_compaction_of_many_agents_looks_their_targets_up_in_one_pass(
    feed_url: str,
) -> None:
    """keep_last compactions used to look the position of their target up one agent at a
    time (on SQLite and Redis each a scan of the feed back to the event)."""
    async with StateStore(feed_url) as store:
        for i in range(20):
            await _events(store, f"old/a{i:02}", 5)
            await store.save("live/b", {"i": i})
        sub = store.subscribe()
        await anext(sub)
        lookups = _Lookups(store)
        report = await apply_retention(store, RetentionPolicy.parse("old keep_last=2"))
        compacted = [a for a in report.actions if a.kind == "compact" and a.outcome == "done"]
        assert len(compacted) == 20 and all(a.base_seq == 3 for a in compacted)
        assert lookups.batches == [[(f"old/a{i:02}", 3) for i in range(20)]]
        assert lookups.single == 0
        # the floor went through the last agent's event 3 (its 6 rows start at 115)
        assert report.feed_through == FeedCursor((117,))
        assert (await store.feed_bounds())[0] == 117
        with pytest.raises(FeedPositionCompacted):
            await _seqs(store, sub.position)
        # nothing left to compact: the next run's targets are no events any more
        again = await apply_retention(store, RetentionPolicy.parse("old keep_last=2"))
        assert not [a for a in again.actions if a.kind == "compact"]
        assert (await store.feed_bounds())[0] == 117


async def test_on_sqlite_the_lookups_of_a_page_of_compactions_read_the_feed_once(
    tmp_path: Path,
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'feed.db'}") as store:
        for i in range(40):
            await _events(store, f"old/a{i:02}", 4)
        reader: sqlite3.Connection = store.backend._reader()  # type: ignore[attr-defined]
        statements: list[str] = []
        reader.set_trace_callback(statements.append)
        report = await apply_retention(store, RetentionPolicy.parse("old keep_last=1"))
        reader.set_trace_callback(None)
        assert report.feed_through == FeedCursor((159,))
        by_agent = [s for s in statements if "FROM sk_feed" in s and "agent_id" in s]
        assert len(by_agent) == 1
