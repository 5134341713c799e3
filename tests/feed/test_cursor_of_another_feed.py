"""A feed cursor names its feed. ``statekeeper restore`` writes the events again, agent
by agent, under the target's own new positions: a consumer's cursor of the source (or
of the target before the restore) then named other events, and a subscription resumed
from it skipped some and delivered others twice, without an error (trial of commit
427bf502: a consumer at position 3 of ``a0#1 a1#1 a0#2 a1#2 a0#3 a1#3`` resumed on the
restored ``a0#1 a0#2 a0#3 a1#1 a1#2 a1#3`` with ``a1#1..3`` — ``a0#3`` never delivered,
``a1#1`` twice). The cursor carries the feed's id now, which a restore (and a new
store) renews and a restart keeps: another feed's cursor raises ``FeedChanged``, on
every engine a restore targets; the runner's stored position likewise, until the
projection is rebuilt."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedChanged, InvalidArgument
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.builtins import BUILTINS
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.store.feed_cursor import FeedCursor

from ..backends._services import fresh_url

#: the trial's source feed: (1 a0#1)(2 a1#1)(3 a0#2)(4 a1#2)(5 a0#3)(6 a1#3)
ORDER = [f"a{i % 2}" for i in range(6)]


async def _fill(store: StateStore) -> None:
    for n, agent in enumerate(ORDER):
        await store.save(agent, {"n": n})


async def _consume(store: StateStore, count: int) -> str:
    """A consumer that took ``count`` events: the cursor string it keeps."""
    sub = store.subscribe()
    for _ in range(count):
        await anext(sub)
    return str(sub.cursor)


@pytest.mark.parametrize("target", ["sqlite", "postgresql", "redis"])
async def test_a_cursor_of_the_store_before_its_restore_is_refused(
    tmp_path: Path, target: str
) -> None:
    key = BackupKey(os.urandom(32))
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with fresh_url("sqlite", tmp_path / "src") as src_url:
        async with StateStore(src_url) as source:
            await _fill(source)
            saved = await _consume(source, 3)  # applied a0#1 a1#1 a0#2
            await backup(source, tmp_path / "full.skb", key)
        with fresh_url(target, tmp_path / "dst") as dst_url:
            async with StateStore(dst_url) as restored:
                await restore(restored, [tmp_path / "full.skb"], key)
                late = restored.subscribe(from_position=saved, stop_at_head=True)
                with pytest.raises(FeedChanged, match="rebuild") as caught:
                    await anext(late)
                assert isinstance(caught.value, InvalidArgument)
                assert caught.value.cursor_feed == FeedCursor.parse(saved).feed
                # from 0, the consumer gets every event of the restored store once
                got = [(c.agent_id, c.seq) async for c in restored.subscribe(stop_at_head=True)]
                assert sorted(got) == sorted((a, s) for a in ("a0", "a1") for s in (1, 2, 3))


async def test_a_restore_renews_the_targets_own_feed(tmp_path: Path) -> None:
    """A cursor the target itself gave out before the restore names other events once
    the restore wrote more (the restored events are old events under new positions)."""
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as source:
        await _fill(source)
        await backup(source, tmp_path / "full.skb", key)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as target:
        await target.save("local", {"n": 0})
        before = await _consume(target, 1)
        await restore(target, [tmp_path / "full.skb"], key)
        with pytest.raises(FeedChanged):
            await anext(target.subscribe(from_position=before, stop_at_head=True))


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_restart_keeps_the_feed_and_the_cursor_resumes_exactly(
    tmp_path: Path, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await _fill(store)
            saved = await _consume(store, 3)
            assert saved.startswith("fc3:")  # the feed id, the mark of the last event passed
            if engine == "memory":  # (a memory store does not outlive its process)
                await _resumed(store, saved)
        if engine != "memory":
            async with StateStore(url) as reopened:
                await _resumed(reopened, saved)


async def _resumed(store: StateStore, saved: str) -> None:
    await store.save("a0", {"n": 6})
    rest = [(c.agent_id, c.seq) async for c in store.subscribe(saved, stop_at_head=True)]
    assert rest == [("a1", 2), ("a0", 3), ("a1", 3), ("a0", 4)]


async def test_a_cursor_without_a_feed_id_is_taken_as_the_stores(tmp_path: Path) -> None:
    """Cursors kept before feed ids (``"fc1:3"``, an int) resume on their store as before."""
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        await _fill(store)
        for old in ("fc1:3", 3, FeedCursor((3,))):
            rest = [c.seq async for c in store.subscribe(old, stop_at_head=True)]
            assert rest == [2, 3, 3]


async def test_another_stores_cursor_is_refused(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as first:
        await _fill(first)
        saved = await _consume(first, 3)
    async with StateStore(f"sqlite:///{tmp_path / 'b.db'}") as second:
        await _fill(second)
        with pytest.raises(FeedChanged):
            await anext(second.subscribe(saved, stop_at_head=True))
        # position 0 is the same on every feed
        cursor = FeedCursor.parse(saved)
        start = FeedCursor((0,), cursor.feed)
        assert len([c async for c in second.subscribe(start, stop_at_head=True)]) == 6


async def test_a_runners_position_from_before_a_restore_is_refused_until_rebuilt(
    tmp_path: Path,
) -> None:
    key = BackupKey(os.urandom(32))
    models = tmp_path / "models.db"
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as source:
        await _fill(source)
        async with ProjectionRunner(source, models, [BUILTINS["agent_activity"]()]) as runner:
            await runner.catch_up()
        await backup(source, tmp_path / "full.skb", key)
    async with StateStore(f"sqlite:///{tmp_path / 'dst.db'}") as restored:
        await restore(restored, [tmp_path / "full.skb"], key)
        await restored.save("a0", {"n": 6})
        async with ProjectionRunner(restored, models, [BUILTINS["agent_activity"]()]) as runner:
            with pytest.raises(FeedChanged, match="projections rebuild agent_activity"):
                await runner.catch_up()
            assert await runner.query("SELECT agent_id, events FROM agent_activity") == [
                ("a0", 3),
                ("a1", 3),
            ]  # nothing applied
            await runner.rebuild("agent_activity")
            rows = await runner.query(
                "SELECT agent_id, events, last_seq FROM agent_activity ORDER BY 1"
            )
            assert rows == [("a0", 4, 4), ("a1", 3, 3)]
            await restored.save("a1", {"n": 7})
            await runner.catch_up()  # follows the new feed from here on
            rows = await runner.query("SELECT agent_id, events FROM agent_activity ORDER BY 1")
            assert rows == [("a0", 4), ("a1", 4)]


async def test_a_runners_position_of_an_older_file_is_kept_on_its_store(tmp_path: Path) -> None:
    """A read-model file written before feed ids (no ``feed`` column) resumes exactly."""
    models = tmp_path / "models.db"
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        await _fill(store)
        async with ProjectionRunner(store, models, [BUILTINS["agent_activity"]()]) as runner:
            await runner.catch_up()
        with sqlite3.connect(models) as db:  # as an older version left it
            db.execute("ALTER TABLE sk_projections DROP COLUMN feed")
        db.close()
        await store.save("a0", {"n": 6})
        async with ProjectionRunner(store, models, [BUILTINS["agent_activity"]()]) as runner:
            assert await runner.catch_up() == {"agent_activity": 1}
            rows = await runner.query("SELECT agent_id, events FROM agent_activity ORDER BY 1")
            assert rows == [("a0", 4), ("a1", 3)]


async def test_a_store_has_its_feed_id_from_its_creation(tmp_path: Path) -> None:
    """A store only ever read (a read-only runner) still has an id to check against:
    made with the file, and by the first writable open of an older file."""
    path = tmp_path / "a.db"
    async with StateStore(f"sqlite:///{path}") as store:
        await store.save("a0", {"n": 0})
    with sqlite3.connect(path) as db:
        (made,) = db.execute("SELECT value FROM sk_meta WHERE key = 'feed_id'").fetchone()
        db.execute("DELETE FROM sk_meta WHERE key = 'feed_id'")  # as an older version left it
    db.close()
    async with StateStore(f"sqlite:///{path}") as store:
        assert await store.count_agents() == 1  # opened, nothing written, no feed read
    with sqlite3.connect(path) as db:
        (again,) = db.execute("SELECT value FROM sk_meta WHERE key = 'feed_id'").fetchone()
    db.close()
    assert again != made
    async with StateStore(f"sqlite:///{path}") as store:
        assert await store.backend.feed_id() == again  # kept


async def test_trimming_through_another_feeds_cursor_is_refused(tmp_path: Path) -> None:
    """Retention by a consumer's cursor: one of another feed would trim events the
    consumer never had."""
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as first:
        await _fill(first)
        saved = await _consume(first, 3)
    async with StateStore(f"sqlite:///{tmp_path / 'b.db'}") as second:
        await _fill(second)
        with pytest.raises(FeedChanged):
            await second.trim_feed(saved)
        assert await second.feed_bounds() == (0, 6)  # nothing trimmed
        assert await second.trim_feed(await _consume(second, 3)) == 3
