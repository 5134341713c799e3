"""A live subscription across a restore of its store. ``statekeeper restore`` renews the
target's feed id before its first write (the restored events come in as new positions:
old events a consumer may already hold), and a cursor of the old id is refused
(``FeedChanged``) when resumed — but a subscription that stayed live read no id after
its start: it went on delivering the restored events in the renewed numbering, and a
projection runner folded them into its read model, without an error (the last
session's note; reproduced on memory, SQLite, PostgreSQL, Redis, sharded Redis, the
sync face and the runner). Each page now comes with the feed's id, read in the same
statement (SQLite, PostgreSQL), pipeline (Redis) or moment (memory): the first page
after the renewal raises ``FeedChanged``, nothing of it delivered, the cursor before
it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import FeedChanged
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS
from statekeeper.governance.backup import BackupKey, restore

from ..backends._services import fresh_url
from ._shared import backup_of


async def _backup(tmp_path: Path) -> tuple[Path, BackupKey]:
    return await backup_of(tmp_path, "", 6)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis", "redis-sharded"])
async def test_a_live_subscription_is_told_at_the_first_page_after_a_restore(
    tmp_path: Path, engine: str
) -> None:
    path, key = await _backup(tmp_path)
    (tmp_path / "dst").mkdir()
    with fresh_url(engine.partition("-")[0], tmp_path / "dst") as url:
        async with StateStore(url + ("&shards=4" if engine == "redis-sharded" else "")) as target:
            await target.save("local", {"n": 0})
            sub = target.subscribe()
            assert (await anext(sub)).agent_id == "local"
            before = sub.cursor
            waiting = asyncio.create_task(anext(sub))  # live: waits for the next append
            await restore(target, [path], key)
            with pytest.raises(FeedChanged) as caught:
                await waiting  # was: a0#1 (or a1#1), in the restored numbering
            assert caught.value.cursor_feed == before.feed
            assert caught.value.store_feed == await target.backend.feed_id()
            assert sub.cursor == before  # nothing of the new numbering passed
            # and again at every call, next_batch too
            with pytest.raises(FeedChanged):
                await anext(sub)
            with pytest.raises(FeedChanged):
                await sub.next_batch(10)
            assert sub.cursor == before
            # a subscription from 0 of the restored store gets every event once
            got = [(c.agent_id, c.seq) async for c in target.subscribe(stop_at_head=True)]
            wanted = [(a, s) for a in ("a0", "a1") for s in (1, 2, 3)] + [("local", 1)]
            assert sorted(got) == wanted


async def test_a_subscription_read_page_by_page_stops_at_the_restore(tmp_path: Path) -> None:
    """Not waiting, just reading on (next_batch after next_batch): the same."""
    path, key = await _backup(tmp_path)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as target:
        for n in range(3):
            await target.save("local", {"n": n})
        sub = target.subscribe(batch_size=3)
        assert [c.seq for c in await sub.next_batch(2)] == [1, 2]
        await restore(target, [path], key)
        # local#3 was read before the restore (the first page's): delivered, then the
        # next page, of the renewed feed, is refused
        assert [c.seq for c in await sub.next_batch(5)] == [3]
        with pytest.raises(FeedChanged):
            await sub.next_batch(5)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
def test_a_sync_subscription_is_told_too(tmp_path: Path, engine: str) -> None:
    path, key = asyncio.run(_backup(tmp_path))
    (tmp_path / "dst").mkdir()
    with fresh_url(engine, tmp_path / "dst") as url, SyncStateStore(url) as target:
        target.save("local", {"n": 0})
        sub = target.subscribe()
        assert next(sub).agent_id == "local"
        before = sub.cursor

        async def restore_beside() -> None:  # another process's restore, as the CLI's
            async with StateStore(url) as other:
                await restore(other, [path], key)

        asyncio.run(restore_beside())
        with pytest.raises(FeedChanged):
            next(sub)  # was: a0#1
        assert sub.cursor == before


async def test_a_live_projection_runner_stops_instead_of_folding_the_restore_in(
    tmp_path: Path,
) -> None:
    path, key = await _backup(tmp_path)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as target:
        await target.save("local", {"n": 0})
        models = tmp_path / "models.db"
        async with ProjectionRunner(target, models, [BUILTINS["agent_activity"]()]) as runner:
            live = asyncio.create_task(runner.run())
            query = "SELECT agent_id, events FROM agent_activity ORDER BY agent_id"
            while await runner.query(query) != [("local", 1)]:  # live, and applied
                assert not live.done()
                await asyncio.sleep(0.01)
            await restore(target, [path], key)
            while not live.done():
                # was: the restored agents applied (a0 3, a1 3), no error
                assert await runner.query(query) == [("local", 1)]
                await asyncio.sleep(0.01)
            with pytest.raises(FeedChanged):
                await live
            assert await runner.query(query) == [("local", 1)]
            # and refused until rebuilt, which starts over on the new feed
            with pytest.raises(FeedChanged, match="projections rebuild agent_activity"):
                await runner.catch_up()
            await runner.rebuild("agent_activity")
            assert await runner.query(query) == [("a0", 3), ("a1", 3), ("local", 1)]
