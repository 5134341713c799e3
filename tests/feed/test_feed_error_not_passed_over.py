"""A subscription that meets an error is not moved past events it never handed over:
a consumer that goes on after the error (a retry loop, a timeout around the call) is
given every event, none skipped."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackendError, IntegrityError

Opener = Callable[..., StateStore]


async def _damaged_second_event(path: Path) -> None:
    async with StateStore(f"sqlite:///{path}") as store:
        for i in range(3):
            await store.save("a", {"i": i})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sk_events SET payload = x'00' || payload WHERE seq = 2")


async def test_a_damaged_event_is_met_again_not_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _damaged_second_event(path)
    async with StateStore(f"sqlite:///{path}") as store:
        sub = store.subscribe(stop_at_head=True)
        assert (await anext(sub)).seq == 1
        for _ in range(2):  # a consumer that logs the error and goes on
            with pytest.raises(IntegrityError):
                await anext(sub)
            assert sub.position == 1  # (was: the next call handed over seq 3, cursor 3)


async def test_next_batch_hands_over_the_events_before_a_damaged_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await _damaged_second_event(path)
    async with StateStore(f"sqlite:///{path}") as store:
        sub = store.subscribe(stop_at_head=True)
        # (was: IntegrityError at once, seq 1 taken and dropped, the cursor past it)
        assert [c.seq for c in await sub.next_batch()] == [1]
        assert sub.position == 1
        with pytest.raises(IntegrityError):
            await sub.next_batch()
        assert sub.position == 1


def _reads(store: StateStore, monkeypatch: pytest.MonkeyPatch, second: Any) -> None:
    """The backend's feed reads: the first as stored, the second ``second()``, then as
    stored again."""
    backend = store.backend
    read = backend.read_feed_page  # (what a subscription reads: a page and the feed id)
    calls = []

    async def flaky(after: int, limit: int) -> Any:
        calls.append(after)
        if len(calls) == 2:
            return await second()
        return await read(after, limit)

    monkeypatch.setattr(backend, "read_feed_page", flaky)


async def test_next_batch_keeps_what_it_took_when_a_later_read_fails(
    feed_url: str, open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(feed_url)
    for i in range(5):
        await store.save("a", {"i": i})

    async def fails() -> Any:
        raise BackendError("connection reset")

    _reads(store, monkeypatch, fails)
    sub = store.subscribe(batch_size=2)
    # (was: BackendError, seqs 1 and 2 taken and dropped, the cursor past them)
    first = [c.seq for c in await sub.next_batch(5)]
    rest = [c.seq for c in await sub.next_batch(5)]
    assert (first, rest) == ([1, 2], [3, 4, 5])


async def test_next_batch_cancelled_while_reading_more_hands_them_over_later(
    feed_url: str, open_store: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(feed_url)
    for i in range(5):
        await store.save("a", {"i": i})
    reading = asyncio.Event()

    async def hangs() -> Any:
        reading.set()
        await asyncio.Event().wait()

    _reads(store, monkeypatch, hangs)
    sub = store.subscribe(batch_size=2)
    batch = asyncio.create_task(sub.next_batch(5))
    await reading.wait()  # seqs 1 and 2 taken, reading the next page
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert sub.position == 0  # nothing handed over: nothing passed over
    assert [c.seq for c in await sub.next_batch(5)] == [1, 2, 3, 4, 5]
