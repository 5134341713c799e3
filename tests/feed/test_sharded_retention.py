"""Retention of a sharded feed (Redis ``shards=4`` on the shared server, the layout a
Redis Cluster uses): ``feed_cursor_bounds``, ``trim_feed(FeedCursor)`` per shard and
store-wide, trimming what every projection has applied, the typed errors; and the same
calls on a one-feed store. The real-cluster run is in ``test_cluster_feed.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import FeedPositionCompacted, InvalidArgument
from statekeeper.feed import FeedCursor, ProjectionRunner

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis
from ._retention import check_sharded_retention

SHARDS = 4


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    require_redis()
    prefix = namespace(tmp_path) + ":"
    delete_prefix(prefix)
    try:
        async with StateStore(f"{REDIS_URL}?prefix={prefix}&shards={SHARDS}") as opened:
            assert isinstance(opened.backend, RedisBackend) and opened.backend.feed_shards == 4
            yield opened
    finally:
        delete_prefix(prefix)


async def test_a_sharded_feed_is_bounded_and_trimmed_per_shard(store: StateStore) -> None:
    await check_sharded_retention(store, SHARDS)


async def test_trimming_what_every_projection_applied_keeps_them_running(
    store: StateStore, tmp_path: Path
) -> None:
    for i in range(12):
        await store.save(f"p/agent-{i}", {"i": i})
    async with ProjectionRunner(store, tmp_path / "rm.db", batch_size=5) as runner:
        await runner.catch_up(["agent_states"])  # the others stay at the start
        assert await runner.consumed() == FeedCursor.start(SHARDS)  # nothing all applied
        assert await store.trim_feed(await runner.consumed()) == 0
        await runner.catch_up()
        consumed = await runner.consumed()
        assert consumed == (await store.feed_cursor_bounds()).head
        assert await runner.consumed(["agent_states"]) == consumed
        assert await store.trim_feed(consumed) == 12
        for i in range(12):
            await store.save(f"p/agent-{i}", {"i": i + 1})
        applied = await runner.catch_up()  # from their stored cursors, above every floor
        assert set(applied.values()) <= {0, 12} and applied["agent_states"] == 12
        rows = await runner.query("SELECT count(*) FROM agent_states")
        assert rows == [(12,)]
        with pytest.raises(FeedPositionCompacted):
            await runner.rebuild("transitions")  # the feed's start is gone: says so
        before = await runner.query("SELECT * FROM agent_states ORDER BY agent_id")
        await runner.rebuild("agent_states")  # from the agents' states, every shard
        assert runner.seeded == 12
        assert await runner.query("SELECT * FROM agent_states ORDER BY agent_id") == before
        status = {s.name: s for s in await runner.status()}
        assert status["agent_states"].state == "live" and status["agent_states"].behind == 0


async def test_a_one_feed_store_takes_cursors_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    async with StateStore(url) as store:
        for i in range(3):
            await store.save(f"g/a-{i}", {"i": i})
        bounds = await store.feed_cursor_bounds()
        assert (bounds.floor, bounds.head) == (FeedCursor((0,)), FeedCursor((3,)))
        assert await store.trim_feed(str(FeedCursor((2,)))) == 2  # any store takes a cursor
        assert await store.feed_bounds() == (2, 3)
        with pytest.raises(InvalidArgument, match="beyond the feed's head 3"):
            await store.trim_feed(FeedCursor((9,)))
        assert await store.feed_bounds() == (2, 3)
