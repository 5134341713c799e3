"""The retention scenario of a sharded feed, run on the shared Redis (``shards=4``) and
on a real local Redis Cluster: bounds per shard as cursors, trimming every shard through
what a consumer has passed, trimming one shard alone, the typed errors."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.errors import (
    CapabilityUnsupported,
    FeedCursorMismatch,
    FeedPositionCompacted,
    InvalidArgument,
)
from statekeeper.feed import FeedCursor
from statekeeper.records import FeedEvent

AGENTS = 16


def _pairs(events: list[FeedEvent]) -> list[tuple[str, int]]:
    return [(e.agent_id, e.seq) for e in events]


async def check_sharded_retention(store: StateStore, shards: int) -> None:
    agents = [f"ret/agent-{i}" for i in range(AGENTS)]
    for a in agents:
        await store.save(a, {"n": 1})
    bounds = await store.feed_cursor_bounds()
    assert bounds.floor == FeedCursor.start(shards)
    assert bounds.head.shards == shards and bounds.head.total >= AGENTS
    with pytest.raises(CapabilityUnsupported, match="feed_cursor_bounds"):
        await store.feed_bounds()  # one (floor, head) cannot describe N feeds

    # a consumer takes half, then the store is trimmed through its cursor
    sub = store.subscribe(0, batch_size=4)
    first = [await anext(sub) for _ in range(AGENTS // 2)]
    consumed = sub.cursor
    for a in agents:
        await store.save(a, {"n": 2})
    assert await store.trim_feed(consumed) == AGENTS // 2  # exactly what it had passed
    after = await store.feed_cursor_bounds()
    assert after.floor == consumed
    assert all(h >= b for h, b in zip(after.head.positions, bounds.head.positions, strict=True))
    assert after.retained == after.head.total - consumed.total

    # from the start: the typed error, naming a trimmed shard and its floor
    with pytest.raises(FeedPositionCompacted, match="rebuild") as info:
        [e async for e in store.subscribe(0, stop_at_head=True)]
    shard = info.value.shard
    assert shard is not None and info.value.floor == consumed.positions[shard] > 0
    # the consumer resumes from its cursor (its string form): the rest, exactly once
    rest = [e async for e in store.subscribe(str(consumed), stop_at_head=True)]
    pairs = _pairs(first) + _pairs(rest)
    assert len(pairs) == len(set(pairs)), "an event was delivered twice"
    assert sorted(pairs) == sorted((a, s) for a in agents for s in (1, 2))
    # the subscription that was running goes on too: nothing it still needs was trimmed
    assert len([await anext(sub) for _ in range(len(rest))]) == len(rest)

    # one shard alone, through its head: the others keep their floors
    k = max(range(shards), key=lambda s: after.head.positions[s] - consumed.positions[s])
    only = FeedCursor.start(shards).advanced(k, after.head.positions[k])
    assert await store.trim_feed(only) > 0
    assert (await store.feed_cursor_bounds()).floor == consumed.advanced(k, after.head.positions[k])

    # bad input: refused, nothing trimmed
    floor = (await store.feed_cursor_bounds()).floor
    beyond = after.head.advanced(0, after.head.positions[0] + 5)
    with pytest.raises(InvalidArgument, match="beyond the feed's head") as bad:
        await store.trim_feed(beyond)
    assert bad.value.argument == "through"
    with pytest.raises(InvalidArgument, match=f"{shards} shards"):
        await store.trim_feed(5)
    with pytest.raises(FeedCursorMismatch):
        await store.trim_feed(FeedCursor.start(shards + 1))
    with pytest.raises(InvalidArgument, match="not a feed cursor"):
        await store.trim_feed("fc1:x")
    assert (await store.feed_cursor_bounds()).floor == floor
