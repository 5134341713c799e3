"""The blocking face's subscription: ``SyncStateStore.subscribe`` gives the same
resumable cursor as the async one, so a sync consumer can stop, keep the cursor's string
and resume with no gap and no duplicate (SQLite's one feed, Redis with 4 shards)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import SyncStateStore
from statekeeper.feed import FeedCursor
from statekeeper.records import FeedEvent
from statekeeper.store.sync import SyncSubscription

from ..backends._services import fresh_url


@pytest.fixture(params=["sqlite", "redis-sharded"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    engine = "redis" if request.param == "redis-sharded" else request.param
    with fresh_url(engine, tmp_path) as base:
        yield base + "&shards=4" if request.param == "redis-sharded" else base


def _pairs(events: list[FeedEvent]) -> list[tuple[str, int]]:
    return [(e.agent_id, e.seq) for e in events]


def test_a_sync_subscriber_resumes_from_its_saved_cursor(url: str) -> None:
    with SyncStateStore(url) as store:
        for i in range(12):
            store.save(f"s/agent-{i % 4}", {"i": i})
        sub = store.subscribe(0, batch_size=3)
        assert isinstance(sub, SyncSubscription)
        first = [next(sub) for _ in range(5)]
        first += sub.next_batch(2)
        saved = str(sub.cursor)  # what a sync consumer keeps
        shards = sub.cursor.shards
        if shards == 1:
            assert sub.position == first[-1].position
        # more writes from another thread while nobody follows
        writer = threading.Thread(
            target=lambda: [store.save(f"s/agent-{i % 4}", {"i": i}) for i in range(12, 20)]
        )
        writer.start()
        writer.join()
        resumed = store.subscribe(FeedCursor.parse(saved), stop_at_head=True)
        rest = list(resumed)
        pairs = _pairs(first) + _pairs(rest)
        assert len(pairs) == len(set(pairs)), "an event was delivered twice"
        assert sorted(pairs) == sorted((f"s/agent-{a}", s) for a in range(4) for s in range(1, 6))
        assert resumed.cursor == store.feed_cursor_bounds().head
        last: dict[str, int] = {}
        for agent, seq in pairs:  # per-agent order across the resume
            assert seq == last.get(agent, 0) + 1
            last[agent] = seq
