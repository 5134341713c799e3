"""A projection of some event types, followed live on a store busy with others: its
stored position stayed at its last event (the subscription passed over the others in
memory only). ``projections status`` showed it further and further behind while it was
up to date, ``runner.consumed()`` kept ``trim_feed`` from trimming past it (the feed
grew for ever on a busy store), and a restart re-read everything passed over. The
runner now records the subscription's cursor each time it waits live with nothing to
apply: the position is the head, nothing applied twice."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from statekeeper import StateStore
from statekeeper.feed import FeedCursor, Projection, ProjectionRunner
from statekeeper.records import FeedEvent

Opener = Callable[..., StateStore]
DEADLINE = 120.0  # seconds: a bound on a loaded machine, never a pause


class Spend(Projection):
    name = "spend"
    tables = ("spend",)
    event_types = frozenset({"charge"})

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS spend (agent_id TEXT PRIMARY KEY, cents INT)")

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        db.execute(
            "INSERT INTO spend VALUES (?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET cents = cents + excluded.cents",
            (change.agent_id, change.event.info["cents"]),
        )


async def _until(check: Callable[[], object]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await check():  # type: ignore[misc]
        assert time.monotonic() < deadline, "not reached"
        await asyncio.sleep(0.02)


async def test_a_live_filtered_projection_keeps_up_its_position(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    await store.save("shop/a", {})
    await store.append("shop/a", "charge", {"cents": 5})
    async with ProjectionRunner(store, tmp_path / "rm.db", [Spend()], batch_size=8) as runner:
        task = asyncio.create_task(runner.run())
        try:

            async def spent(cents: int) -> bool:
                rows = await runner.query("SELECT agent_id, cents FROM spend")
                return rows == [("shop/a", cents)]

            await _until(lambda: spent(5))
            for i in range(30):  # other types only
                await store.save(f"shop/b{i % 3}", {"i": i})
            head = (await store.feed_cursor_bounds()).head

            async def caught_up() -> bool:
                return await runner.consumed() == head

            await _until(caught_up)
            (status,) = await runner.status()
            assert status.behind == 0 and status.applied == 1
            await store.append("shop/a", "charge", {"cents": 7})
            await _until(lambda: spent(12))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # a restart resumes from there: nothing applied twice, nothing re-read
        assert await runner.catch_up() == {"spend": 0}
        assert await runner.query("SELECT agent_id, cents FROM spend") == [("shop/a", 12)]
        assert isinstance(await runner.consumed(), FeedCursor)
