"""Gaps in the feed (a deleted agent's positions) never stop a subscription, on every
engine with a feed: a catch-up goes on past them to the events after them, and a live
subscription whose cursor is followed only by gaps waits for the next append instead
of reading the gaps again and again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from statekeeper import StateStore
from statekeeper.records import FeedRecord

Opener = Callable[..., StateStore]

#: reads of the feed a subscription may make while it waits for one append (a few per
#: wake-up; one that re-reads gaps without waiting makes thousands)
READS = 50


async def test_a_catch_up_goes_on_past_a_page_of_gaps(feed_url: str, open_store: Opener) -> None:
    store = open_store(feed_url)
    for n in range(3):
        await store.save("gone", {"n": n})
    # the engine's own delete: its positions are gaps, and no tombstone follows them
    # (store.delete appends one: tests/feed/test_delete_tombstones.py)
    await store.backend.delete_agent("gone")
    await store.save("kept", {"n": 0})
    # pages of 2: the first holds nothing but the deleted agent's positions (Redis
    # returned it empty, and the catch-up ended there, without "kept")
    seen = [e async for e in store.subscribe(stop_at_head=True, batch_size=2)]
    assert [(e.agent_id, e.seq) for e in seen] == [("kept", 1)]
    live = store.subscribe(batch_size=2)
    assert (await asyncio.wait_for(anext(live), 60.0)).agent_id == "kept"


async def test_a_live_subscription_followed_only_by_gaps_waits_for_the_next_append(
    feed_url: str, open_store: Opener
) -> None:
    store = open_store(feed_url)
    await store.save("kept", {"n": 0})
    await store.save("gone", {"n": 0})
    await store.backend.delete_agent("gone")  # the newest position: a gap (no tombstone)
    backend = store.backend
    read, wait = backend.read_feed_page, backend.wait_feed  # (a subscription's read)
    reads = 0
    waiting = asyncio.Event()

    async def counted_read(after: int = 0, limit: int = 500) -> tuple[list[FeedRecord], str | None]:
        nonlocal reads
        reads += 1
        # re-reading the gaps without end (on memory and SQLite without ever yielding:
        # nothing else ran, this test's append neither)
        assert reads <= READS, f"{reads} reads of the feed waiting for one append"
        return await read(after, limit)

    async def flagged_wait(after: int, max_wait: float) -> None:
        waiting.set()
        await wait(after, max_wait)

    backend.read_feed_page = counted_read  # type: ignore[method-assign]
    backend.wait_feed = flagged_wait  # type: ignore[method-assign]
    sub = store.subscribe()
    assert (await anext(sub)).agent_id == "kept"
    reads = 0
    nxt = asyncio.ensure_future(anext(sub))
    flag = asyncio.ensure_future(waiting.wait())
    await asyncio.wait([nxt, flag], timeout=60.0, return_when=asyncio.FIRST_COMPLETED)
    flag.cancel()
    await store.save("next", {"n": 1})
    event = await asyncio.wait_for(nxt, 60.0)
    assert (event.agent_id, event.position) == ("next", sub.position)
