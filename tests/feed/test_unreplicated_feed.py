"""Feed entries the replicas have not confirmed (Redis opened with ``wait_replicas=N``)
are held back, not a gap: a ``stop_at_head`` catch-up raises
:class:`~statekeeper.errors.FeedNotReplicated` instead of ending short (it ended at
once, empty, while the head was 2), and a live subscription waits for them without
spinning. On the shared standalone Redis, which has no replica: its ``WAIT`` always
times out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackendError, FeedNotReplicated, StoreClosed
from statekeeper.records import FeedRecord

from ..backends._services import fresh_url

Opener = Callable[..., StateStore]

#: reads of the feed a live subscription may make while it waits twice (one per
#: wake-up; one that re-read without waiting would make thousands)
READS = 10


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("redis", tmp_path) as url:
        yield url


async def _unconfirmed(url: str, open_store: Opener, agents: int = 2) -> StateStore:
    """A store reading ``url``'s events with ``wait_replicas=1`` (none exists)."""
    writer = open_store(url)
    for n in range(agents):
        await writer.save(f"agent-{n}", {"n": 0})
    reader = open_store(f"{url}&wait_replicas=1&wait_timeout=0.1")
    info = await reader.backend._client.info("replication")  # type: ignore[attr-defined]
    if int(info.get("connected_slaves", 0)):
        pytest.skip("the shared Redis has a replica: its WAIT can succeed")
    return reader


@pytest.mark.parametrize("shards", [1, 2])
async def test_a_catch_up_raises_rather_than_end_short(
    redis_url: str, open_store: Opener, shards: int
) -> None:
    url = redis_url if shards == 1 else f"{redis_url}&shards={shards}"
    reader = await _unconfirmed(url, open_store, agents=6)  # some in each shard
    heads = (await reader.feed_cursor_bounds()).head.positions
    assert all(heads), heads
    sub = reader.subscribe(stop_at_head=True)
    with pytest.raises(FeedNotReplicated) as raised:
        async for _ in sub:
            raise AssertionError("an unconfirmed event was delivered")
    error = raised.value
    assert isinstance(error, BackendError) and not error.maybe_applied
    assert (error.position, error.replicas, error.acknowledged) == (0, 1, 0)
    assert error.shard == (None if shards == 1 else 0)
    assert "0 of 1 replicas" in str(error)
    assert sub.cursor.positions == (0,) * shards  # nothing passed over: resume from here
    with pytest.raises(FeedNotReplicated):
        await sub.next_batch()  # again, not []: [] is the end of a catch-up


async def test_a_live_subscription_waits_for_unconfirmed_entries(
    redis_url: str, open_store: Opener
) -> None:
    reader = await _unconfirmed(redis_url, open_store)
    backend = reader.backend
    read, wait = backend.read_feed_page, backend.wait_feed  # (a subscription's read)
    reads = 0
    waits = 0
    waited = asyncio.Event()

    async def counted_read(after: int = 0, limit: int = 500) -> tuple[list[FeedRecord], str | None]:
        nonlocal reads
        reads += 1
        return await read(after, limit)

    async def counted_wait(after: int, max_wait: float) -> None:
        nonlocal waits
        waits += 1
        if waits >= 2:
            waited.set()
        await wait(after, max_wait)

    backend.read_feed_page = counted_read  # type: ignore[method-assign]
    backend.wait_feed = counted_wait  # type: ignore[method-assign]
    sub = reader.subscribe()
    nxt = asyncio.ensure_future(anext(sub))
    flag = asyncio.ensure_future(waited.wait())
    await asyncio.wait([nxt, flag], timeout=60.0, return_when=asyncio.FIRST_COMPLETED)
    assert waited.is_set(), "the live subscription never waited"
    assert not nxt.done(), nxt.result()  # neither delivered nor raised: held back
    assert reads <= READS, f"{reads} reads of the feed in {waits} waits"
    assert sub.position == 0
    flag.cancel()
    # ended by closing its store (a cancel of the task waiting in XREAD: see
    # tests/backends/test_redis_cancel.py)
    await reader.close()
    with pytest.raises(StoreClosed):
        await asyncio.wait_for(nxt, 60.0)


async def test_next_batch_returns_the_events_before_unconfirmed_ones(
    open_store: Opener,
) -> None:
    # the read after a page raises (a page confirmed, the next not yet): the events
    # taken already come back first (their cursor has moved past them), then the error
    store = open_store("memory://")
    for agent in ("a", "b", "c"):
        await store.save(agent, {"n": 0})
    backend = store.backend
    read = backend.read_feed_page  # (what a subscription reads: a page and the feed id)

    async def held_after_one(
        after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        # (the entries past position 1 unconfirmed: a page reaching them raises; a page
        # may start at the entry the cursor passed, to check it is still there)
        records, feed = await read(after, limit)
        if any(r.position > 1 for r in records):
            raise FeedNotReplicated(after, 1, 0, 0.1)
        return records, feed

    backend.read_feed_page = held_after_one  # type: ignore[method-assign]
    sub = store.subscribe(stop_at_head=True, batch_size=1)
    assert [e.agent_id for e in await sub.next_batch(10)] == ["a"]
    assert sub.position == 1
    with pytest.raises(FeedNotReplicated):
        await sub.next_batch(10)
    backend.read_feed_page = read  # type: ignore[method-assign]
    assert [e.agent_id for e in await sub.next_batch(10)] == ["b", "c"]
