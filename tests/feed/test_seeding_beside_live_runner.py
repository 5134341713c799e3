"""A rebuild from the agents' states while another runner follows the projection live
on the same read-model file, the feed trimmed exactly to the live runner's position:
the rebuild's reset does not move the stored position back (it is the floor already),
so the live runner used to go on applying while the states were read. An event it
applied after an agent's state was read was lost when that state was seeded over it
(or doubled, when the state already held it). The live runner now applies nothing
while the projection is ``seeding`` (nor with seeds it started without): it waits, then
follows again from the stored position."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.feed import ProjectionRunner, seeding

from .test_rebuild_beside_live_runner import Seen, _wait_position

Opener = Callable[..., StateStore]


class SeenSeeded(Seen):
    """``Seen`` that can start from a state: the agent's seqs 1..state.seq, once each."""

    def seed(self, db: Any, state: Any) -> None:
        db.execute("DELETE FROM seen WHERE agent = ?", (state.agent_id,))
        db.executemany(
            "INSERT INTO seen VALUES (?, ?, 1)",
            [(state.agent_id, seq) for seq in range(1, state.seq + 1)],
        )


@contextlib.asynccontextmanager
async def _beside(
    store: StateStore, rm: Path
) -> AsyncIterator[tuple[ProjectionRunner, ProjectionRunner, list[asyncio.Task[Any]]]]:
    """Agent ``a`` at seq 3, a live runner following it on ``rm``, the feed trimmed
    exactly to the live position, and a second runner on the same read model; the
    tasks (the live run first, then any the test adds) are cancelled after."""
    for i in range(3):
        await store.save("a", {"i": i})
    async with (
        ProjectionRunner(store, rm, [SeenSeeded()]) as live,
        ProjectionRunner(store, rm, [SeenSeeded()]) as rebuilder,
    ):
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(live.run())]
        try:
            await _wait_position(live, 3)
            await store.trim_feed(await live.consumed())
            yield live, rebuilder, tasks
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_seeding_beside_a_live_runner_loses_no_event(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    async with _beside(store, tmp_path / "rm.db") as (live, rebuilder, tasks):
        # step 1: the rebuild reads agent a's state (seq 3) and stops before seeding it
        read, go = asyncio.Event(), asyncio.Event()
        get_many = store.get_many

        async def paused(agent_ids: Sequence[str]) -> Any:
            states = await get_many(agent_ids)
            read.set()
            await go.wait()
            return states

        store.get_many = paused  # type: ignore[method-assign]
        rebuilding = asyncio.create_task(rebuilder.rebuild("seen"))
        tasks.append(rebuilding)
        await read.wait()

        # step 2: seq 4 is written; the live runner's commit of it is awaited
        # (made, or refused) before the rebuild goes on
        tried = asyncio.Event()
        in_db = live._in_db

        async def watched(fn: Any, *args: Any) -> Any:
            try:
                return await in_db(fn, *args)
            finally:
                events = args[1] if fn == live._apply_sync and len(args) > 1 else ()
                if any(e.seq == 4 for e in events):
                    tried.set()

        live._in_db = watched  # type: ignore[method-assign]
        await store.save("a", {"i": 3})
        await tried.wait()

        # step 3: the rebuild seeds a from seq 3 and follows the feed from its floor
        go.set()
        await rebuilding
        rows = await rebuilder.query("SELECT seq, n FROM seen ORDER BY seq")
        await store.save("a", {"i": 4})  # and the live runner goes on after it
        await _wait_position(live, 5)
        after = await live.query("SELECT seq, n FROM seen ORDER BY seq")
        status = (await live.status())[0]
    assert rows == [(seq, 1) for seq in range(1, 5)]  # seq 4 neither lost nor doubled
    assert after == [(seq, 1) for seq in range(1, 6)]
    assert (status.state, status.position) == ("live", 5)


async def test_a_live_apply_after_the_seeding_is_not_doubled(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    """Seq 4 is in the state the agent is seeded from; the live runner's commit of it
    comes after the seeding, before the rebuild follows the feed (state
    ``rebuilding``, seeds it started without): applied there, it was in twice."""
    store = open_store(feed_url)
    async with _beside(store, tmp_path / "rm.db") as (live, rebuilder, tasks):
        # the live runner's commit of seq 4 is held until the seeding is over
        holding, release, tried = asyncio.Event(), asyncio.Event(), asyncio.Event()
        in_db = live._in_db

        async def held(fn: Any, *args: Any) -> Any:
            events = args[1] if fn == live._apply_sync and len(args) > 1 else ()
            mine = any(e.seq == 4 for e in events)
            if mine:
                holding.set()
                await release.wait()
            try:
                return await in_db(fn, *args)
            finally:
                if mine:
                    tried.set()

        live._in_db = held  # type: ignore[method-assign]
        await store.save("a", {"i": 3})
        await holding.wait()

        # the rebuild seeds a from seq 4 and stops before following the feed
        seeded, go = asyncio.Event(), asyncio.Event()
        rb_in_db = rebuilder._in_db

        async def paused(fn: Any, *args: Any) -> Any:
            result = await rb_in_db(fn, *args)
            if fn is seeding._seeded:
                seeded.set()
                await go.wait()
            return result

        rebuilder._in_db = paused  # type: ignore[method-assign]
        rebuilding = asyncio.create_task(rebuilder.rebuild("seen"))
        tasks.append(rebuilding)
        await seeded.wait()
        release.set()
        await tried.wait()
        go.set()
        await rebuilding
        rows = await rebuilder.query("SELECT seq, n FROM seen ORDER BY seq")
        await store.save("a", {"i": 4})
        await _wait_position(live, 5)
        after = await live.query("SELECT seq, n FROM seen ORDER BY seq")
    assert rows == [(seq, 1) for seq in range(1, 5)]  # seq 4 once
    assert after == [(seq, 1) for seq in range(1, 6)]
