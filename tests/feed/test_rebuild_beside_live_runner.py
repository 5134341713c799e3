"""A rebuild of a projection while another runner follows it live on the same read-model
file: the live runner's next commit must not move the position over the events the
rebuild has not re-applied yet (they were lost from the read model, its state 'live')."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from statekeeper import StateStore
from statekeeper.feed import Projection, ProjectionRunner
from statekeeper.records import FeedEvent

Opener = Callable[..., StateStore]


class Seen(Projection):
    """One row per event, counting how often it was applied."""

    name = "seen"
    tables = ("seen",)

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS seen (agent TEXT, seq INT, n INT, PRIMARY KEY (agent, seq))"
        )

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        db.execute(
            "INSERT INTO seen VALUES (?, ?, 1) ON CONFLICT (agent, seq) DO UPDATE SET n = n + 1",
            (change.agent_id, change.seq),
        )


class Interrupted(Exception):
    """Ctrl-C of `statekeeper projections rebuild`, after its first batch committed."""


async def _position(runner: ProjectionRunner) -> int:
    return (await runner.status())[0].position


async def _wait_position(runner: ProjectionRunner, at_least: int) -> None:
    while await _position(runner) < at_least:  # noqa: ASYNC110 (another runner's commit)
        await asyncio.sleep(0.01)


async def test_a_rebuild_beside_a_live_runner_loses_no_event(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    for i in range(9):
        await store.save("a", {"i": i})
    rm = tmp_path / "rm.db"
    async with (
        ProjectionRunner(store, rm, [Seen()]) as live,
        ProjectionRunner(store, rm, [Seen()], batch_size=2) as rebuilder,
    ):
        following = asyncio.create_task(live.run())
        try:
            await store.save("a", {"i": 9})  # the live runner is following: it takes seq 10
            await _wait_position(live, 10)

            def stop_after_first_batch(done: int, total: int) -> None:
                raise Interrupted

            # reset to 0, re-applies seqs 1..2, then stops (state 'rebuilding')
            with contextlib.suppress(Interrupted):
                await rebuilder.rebuild("seen", progress=stop_after_first_batch)
            await store.save("a", {"i": 10})  # the live runner commits seq 11
            await _wait_position(live, 11)
            await rebuilder.rebuild("seen")  # resumes the interrupted rebuild
            rows = await live.query("SELECT seq, n FROM seen ORDER BY seq")
            status = (await live.status())[0]
        finally:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
    assert rows == [(seq, 1) for seq in range(1, 12)]
    assert (status.state, status.position) == ("live", 11)
