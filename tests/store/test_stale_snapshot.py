"""A snapshot left by a deleted stream is never served for its next incarnation.

A delete lists an agent's objects, then deletes them; on a backend without a
transaction over them (S3: the snapshot object follows the commit; any backend: a
``save_snapshot`` in flight) a snapshot of the deleted stream can land after the listing
and survive the delete. Once the agent is re-created, that snapshot sits at a seq the
new stream has too. A snapshot carries the chain link of the event at its seq, so the
read checks it against the stream's own event there: a foreign one is passed over
(the state is folded from the events), never served.
"""

from __future__ import annotations

from pathlib import Path

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.backends.base import Backend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import RawSnapshot


async def _old_snapshot(store: StateStore, agent_id: str, seq: int) -> RawSnapshot:
    snap = await store.backend.latest_snapshot(agent_id, seq)
    assert snap is not None and snap.seq == seq
    return snap


async def leftover_served(backend: Backend) -> None:
    async with StateStore(backend, snapshot_every=1, cache_size=0) as store:
        await store.save("a", {"who": "old", "n": 1})
        await store.save("a", {"who": "old", "n": 2})
        left = [await _old_snapshot(store, "a", s) for s in (1, 2)]
        assert await store.delete("a")
        for n in (1, 2, 3):  # the next incarnation, with snapshots of its own
            await store.save("a", {"who": "new", "n": n})
        # a late writer of the deleted stream: its snapshots land now
        for snap in left:
            await backend.save_snapshot("a", snap)
        assert (await backend.latest_snapshot("a", 2)) == left[1]  # the set-up holds
        for seq in (1, 2):
            assert (await store.load("a", at_seq=seq)).data == {"who": "new", "n": seq}
        assert (await store.load("a")).data == {"who": "new", "n": 3}
        assert [e.seq async for e in store.history("a")] == [1, 2, 3]
        # verify names them (repair rebuilds them); loads never used them
        assert {(p.seq, p.kind) for p in (await store.verify()).problems} <= {
            (1, "snapshot"),
            (2, "snapshot"),
        }


async def leftover_at_head(backend: Backend) -> None:
    async with StateStore(backend, snapshot_every=1, cache_size=0) as store:
        await store.save("b", {"who": "old"})
        left = await _old_snapshot(store, "b", 1)
        assert await store.delete("b")
        await store.save("b", {"who": "new"})
        await backend.save_snapshot("b", left)
        assert (await store.load("b", at_seq=1)).data == {"who": "new"}
        assert (await store.load("b")).data == {"who": "new"}


async def test_memory_leftover_snapshot_is_not_served() -> None:
    await leftover_served(MemoryBackend())
    await leftover_at_head(MemoryBackend())


async def test_sqlite_leftover_snapshot_is_not_served(tmp_path: Path) -> None:
    await leftover_served(SQLiteBackend(str(tmp_path / "s.db")))
    await leftover_at_head(SQLiteBackend(str(tmp_path / "t.db")))


async def test_compaction_never_keeps_a_leftover_as_its_base(tmp_path: Path) -> None:
    """Retention compacts at a seq where a snapshot is stored: a leftover one there is
    replaced by the stream's own state (once the events below are gone, the base is
    the only state at its seq, and nothing could tell it apart any more)."""
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    backend = SQLiteBackend(str(tmp_path / "r.db"))
    async with StateStore(backend, snapshot_every=1, cache_size=0) as store:
        await store.save("a", {"who": "old", "n": 1})
        await store.save("a", {"who": "old", "n": 2})
        left = await _old_snapshot(store, "a", 2)
        assert await store.delete("a")
        for n in range(1, 6):
            await store.save("a", {"who": "new", "n": n})
        await backend.save_snapshot("a", left)
        await apply_retention(store, RetentionPolicy.parse("* keep_last=3\n"))
        assert (await store.load("a", at_seq=2)).data == {"who": "new", "n": 2}
        assert (await store.load("a", at_seq=3)).data == {"who": "new", "n": 3}
        assert (await store.verify()).ok
