"""Settling an agent (store/settle.py): its head stored as one whole snapshot off the
save's path, replacing the snapshot before it when no load needs that one.

Was: nothing stored the head whole but a save on which a snapshot fell due; a cold
load past a whole snapshot read the chain (whole snapshot, tails, events) — 1.2-1.7x
``get_tuple`` (docs/benchmarks.md, "cold7"). ``settle`` did not exist."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.backends.base import Capability
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import AgentNotFound
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import RawSnapshot

from ..backends._services import fresh_url


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * 200}


def _doc(n: int) -> dict[str, Any]:
    return {"messages": [_msg(i) for i in range(n)]}


async def _chat(store: StateStore, agent: str, start: int, stop: int) -> None:
    for n in range(start + 1, stop + 1):
        await store.save(agent, _doc(n))


def _snapshots(path: Path, agent: str = "a") -> list[int]:
    with sqlite3.connect(path) as conn:
        return [
            s
            for (s,) in conn.execute(
                "SELECT seq FROM sk_snapshots WHERE agent_id = ? ORDER BY seq", (agent,)
            )
        ]


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_settle_stores_the_head_whole_and_a_cold_load_reads_that_one_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 150)  # whole at 100, tails every 8 after it
        before = _snapshots(path)
        assert 150 not in before and before[0] == 100
        assert await store.settle("a") == 150
        assert await store.settle("a") is None  # the head is whole already
    assert _snapshots(path)[-1] == 150
    async with StateStore(_url(path), cache_size=0) as store:
        head, _, snapshot, events = await store.backend.read_state("a")
        assert (head, snapshot is not None and snapshot.seq, events) == (150, 150, [])
        body, _ = store._reads.open_snapshot("a", snapshot)
        assert "base" not in body and len(body["data"]["messages"]) == 150  # whole
        assert (await store.load("a")).data == _doc(150)
        assert (await store.verify()).problems == []


async def test_a_settle_replaces_the_row_of_the_settle_before(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 120)
        assert await store.settle("a") == 120
        kept = _snapshots(path)
        for turn in range(5):  # a chat settled every turn: two saves, then quiet
            top = 120 + 2 * (turn + 1)
            await _chat(store, "a", top - 2, top)
            assert await store.settle("a") == top
            assert _snapshots(path) == [*kept[:-1], top]  # one head row, replaced
        for seq in (101, 119, 121, 125, 130):  # every older state still loads
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        assert (await store.verify()).problems == []


async def test_a_snapshot_a_load_needs_is_kept(tmp_path: Path) -> None:
    """The snapshot before the head is removed only when a load of a seq between it
    and the head replays no more than the policy's bound without it."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=10) as store:
        await _chat(store, "a", 0, 12)  # a whole snapshot at 10
        assert await store.settle("a") == 12
        assert _snapshots(path) == [10, 12]  # 12 - 0 > 10 events without the one at 10
        await _chat(store, "a", 12, 14)
        assert await store.settle("a") == 14
        assert _snapshots(path) == [10, 14]  # 14 - 10 <= 10: the row at 12 replaced


async def test_a_compacted_streams_base_is_never_removed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 5)
        await store.snapshot("a")
        await _chat(store, "a", 5, 6)
        await apply_retention(store, RetentionPolicy.parse("* keep_last=1\n"))
        assert await store.backend.stream_bases(["a"]) == [5]  # the snapshot at 5: the base
        await _chat(store, "a", 6, 8)
        assert await store.settle("a") == 8  # (8 events from seq 0: within the bound)
        assert _snapshots(path) == [5, 8]
    async with StateStore(_url(path), cache_size=0) as store:
        assert (await store.load("a", at_seq=7)).data == _doc(7)
        assert (await store.verify()).problems == []


def _tamper(path: Path, seq: int, payload: bytes | None = None) -> None:
    with sqlite3.connect(path) as conn:
        if payload is None:
            (old,) = conn.execute(
                "SELECT payload FROM sk_snapshots WHERE agent_id = 'a' AND seq = ?", (seq,)
            ).fetchone()
            payload = bytes(old[:-40]) + bytes([old[-40] ^ 1]) + bytes(old[-39:])
        conn.execute(
            "UPDATE sk_snapshots SET payload = ? WHERE agent_id = 'a' AND seq = ?",
            (payload, seq),
        )


@pytest.mark.parametrize("how", ["edited", "stale"])
async def test_a_tampered_or_stale_head_row_is_never_served(tmp_path: Path, how: str) -> None:
    """An edited head row, or the payload of an older state put at the head's seq, is
    passed over: the load folds the chain before it (as for any damaged snapshot), and
    verify names the row."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 130)
        assert await store.settle("a") == 130
    with sqlite3.connect(path) as conn:
        (older,) = conn.execute(
            "SELECT payload FROM sk_snapshots WHERE agent_id = 'a' AND seq = 100"
        ).fetchone()
    _tamper(path, 130, older if how == "stale" else None)
    async with StateStore(_url(path), cache_size=0) as store:
        assert (await store.load("a")).data == _doc(130)
        problems = (await store.verify()).problems
        assert [(p.seq, p.kind) for p in problems] == [(130, "snapshot")]


async def test_saves_after_a_settle_build_on_it(tmp_path: Path) -> None:
    """The settled row is the base of the next snapshots (tails on it); a cold store
    settles too."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=100) as store:
        await _chat(store, "a", 0, 110)
        await store.settle("a")
        await _chat(store, "a", 110, 130)  # tails at 118, 126 on the row at 110
    assert {110, 118, 126} <= set(_snapshots(path))
    async with StateStore(_url(path), snapshot_every=100, cache_size=0) as store:
        assert await store.settle("a") == 130
        for seq in (111, 118, 127, 130):
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        assert (await store.verify()).problems == []


async def test_what_does_not_settle(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path / "s.db")) as store:
        with pytest.raises(AgentNotFound):
            await store.settle("nobody")
    async with StateStore(_url(tmp_path / "d.db"), full_snapshot_every=3) as store:
        await _chat(store, "a", 0, 3)
        assert await store.settle("a") is None  # deltas: not one whole row
    assert _snapshots(tmp_path / "d.db") == []


async def test_write_behind_is_flushed_before_the_head_is_settled(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="async", snapshot_every=100) as store:
        await _chat(store, "a", 0, 105)
        assert await store.settle("a") == 105
    assert _snapshots(path) == [100, 105]
    backend = SQLiteBackend(str(path))
    try:
        assert (await backend.head("a")) == 105
    finally:
        await backend.close()


def test_the_sync_twin_settles(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SyncStateStore(_url(path), snapshot_every=10) as store:
        for n in range(1, 14):
            store.save("a", _doc(n))
        assert store.settle("a") == 13
    assert _snapshots(path)[-1] == 13


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis", "tiered"])
async def test_every_engine_with_prune_settles_and_replaces(tmp_path: Path, engine: str) -> None:
    """The same backend ops on every engine that prunes: the head stored whole, the row
    before it replaced, every state loading and verifying."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, snapshot_every=10) as store:
            if not store.backend.supports(Capability.PRUNE):
                await _chat(store, "a", 0, 12)
                assert await store.settle("a") is None
                pytest.skip(f"{engine}: no PRUNE")
            await _chat(store, "a", 0, 12)
            assert await store.settle("a") == 12
            await _chat(store, "a", 12, 14)
            assert await store.settle("a") == 14
            seqs = [s.seq for s in [await store.backend.latest_snapshot("a", 13)] if s]
            assert seqs == [10]  # the row at 12 replaced by the one at 14
            store._cache.clear()  # (a cold load: memory:// is this store's own)
            head, _, snapshot, events = await store.backend.read_state("a")
            assert (head, snapshot is not None and snapshot.seq, events) == (14, 14, [])
            for seq in range(1, 15):
                assert (await store.load("a", at_seq=seq)).data == _doc(seq)
            assert (await store.verify()).problems == []


@pytest.mark.parametrize("source", ["sqlite", "memory"])
async def test_a_backup_chain_across_settles_restores_every_state(
    tmp_path: Path, source: str
) -> None:
    """A full backup holding a settled row, a settle that replaces it, an incremental:
    the restored store loads every state and verifies."""
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    src_dir, dst_dir = tmp_path / "src", tmp_path / "dst"
    src_dir.mkdir()
    dst_dir.mkdir()
    with fresh_url(source, src_dir) as src_url, fresh_url("sqlite", dst_dir) as dst_url:
        async with StateStore(src_url, snapshot_every=10) as src:
            await _chat(src, "a", 0, 12)
            assert await src.settle("a") == 12
            await backup(src, full, bkey)
            await _chat(src, "a", 12, 14)
            assert await src.settle("a") == 14  # the row at 12 replaced
            await backup(src, inc, bkey, since=full)
        async with StateStore(dst_url, cache_size=0) as dst:
            await restore(dst, [full, inc], bkey)
            for seq in range(1, 15):
                assert (await dst.load("a", at_seq=seq)).data == _doc(seq)
            assert (await dst.verify()).problems == []


async def test_a_namespaced_store_settles_its_own_agent(tmp_path: Path) -> None:
    """Was (before the namespaced override): ``settle("a")`` in namespace ``acme``
    looked for the stored id ``a`` (AgentNotFound) instead of ``acme/a``."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), namespace="acme", snapshot_every=10) as store:
        await _chat(store, "a", 0, 12)
        assert await store.settle("a") == 12
    assert _snapshots(path, "acme/a") == [10, 12]


async def test_retention_after_settles_keeps_every_state_it_promises(tmp_path: Path) -> None:
    """A settled row is a snapshot like any other to retention: a compaction at or
    below it, or past it, leaves the kept states loading and the store verifying."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), snapshot_every=10) as store:
        await _chat(store, "a", 0, 25)
        assert await store.settle("a") == 25
        await _chat(store, "a", 25, 27)
        assert await store.settle("a") == 27
        await apply_retention(store, RetentionPolicy.parse("* keep_last=4\n"))
        await _chat(store, "a", 27, 29)
        assert await store.settle("a") == 29
    async with StateStore(_url(path), cache_size=0) as store:
        for seq in range(24, 30):
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        assert (await store.verify()).problems == []


async def test_a_snapshot_the_byte_bound_needs_is_kept(tmp_path: Path) -> None:
    """Under the default policy (by replay cost) large events make snapshots due after
    few events: the settled row before the head is kept when a load below the head
    would replay more than that bound without it (was, counting events alone: removed,
    a load at seq 15 replaying 14 events of ~100 KB)."""
    path = tmp_path / "s.db"
    big = "y" * 100_000
    async with StateStore(_url(path)) as store:  # snapshot_every="bounded"
        for n in range(1, 3):
            await store.save("a", {"n": n, f"k{n}": big + str(n)})
        assert await store.settle("a") == 2
        for n in range(3, 6):
            await store.save("a", {**{f"k{i}": big + str(i) for i in range(1, n + 1)}, "n": n})
        kept = _snapshots(path)
        assert await store.settle("a") == 5
        assert set(kept) | {5} == set(_snapshots(path))  # nothing removed


async def test_a_settled_agent_demoted_and_settled_again_on_a_tiered_store(
    tmp_path: Path,
) -> None:
    """Tiered demotion copies the settled row to the cold tier with the rest; a settle
    of the demoted agent reads it back first (as any write) and settles there."""
    from statekeeper.backends import MemoryBackend
    from statekeeper.backends.tiered import TieredBackend

    backend = TieredBackend(SQLiteBackend(str(tmp_path / "d.db")), cold=MemoryBackend())
    async with StateStore(backend, snapshot_every=10, cache_size=0) as store:
        await _chat(store, "a", 0, 12)
        assert await store.settle("a") == 12
        assert await backend.demote("a")
        assert (await store.load("a")).data == _doc(12)
        await _chat(store, "a", 12, 14)
        assert await store.settle("a") == 14
        assert await backend.demote("a")
        for seq in range(1, 15):
            assert (await store.load("a", at_seq=seq)).data == _doc(seq)
        assert (await store.verify()).problems == []


def _remade_at(
    store: StateStore, other: StateStore, call: int, op: str = "latest_snapshot"
) -> None:
    """After ``store``'s backend answers its ``call``-th ``op`` (its answer kept),
    ``other`` deletes agent ``a`` and makes it again, compacted: 16 events of another
    content, its base the snapshot at 14."""
    real = getattr(store.backend, op)
    calls = 0

    async def remade(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        out = await real(*args, **kwargs)
        calls += 1
        if calls == call:
            assert await other.delete("a")
            for n in range(1, 15):
                await other.save("a", {"new": n})
            await other.snapshot("a")
            for n in range(15, 17):
                await other.save("a", {"new": n})
            await apply_retention(other, RetentionPolicy.parse("* keep_last=2\n"))
            assert await other.backend.stream_bases(["a"]) == [14]
        return out

    setattr(store.backend, op, remade)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("call", [1, 2])
async def test_a_stream_deleted_and_made_again_meanwhile_is_left_alone(
    tmp_path: Path, engine: str, call: int
) -> None:
    """Another process deletes the agent and makes it again (compacted, its base the
    snapshot at 14) while a settle runs: after settle's read of the row below the head
    (call 1), the row at 16 was the old stream's state put in the new one (every load
    of it then failed: HistoryCompacted); after its last read before the prune (call 2),
    the prune by seq removed the new stream's base — its history gone (IntegrityError:
    events 1..14 are gone). Now the head is read again before each write: nothing of
    the new stream touched."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, snapshot_every=10) as store, StateStore(url) as other:
            await _chat(store, "a", 0, 14)
            assert await store.settle("a") == 14
            await _chat(store, "a", 14, 16)
            _remade_at(store, other, call)
            await store.settle("a")
            del store.backend.latest_snapshot
        async with StateStore(url, cache_size=0) as fresh:
            assert (await fresh.load("a")).data == {"new": 16}
            assert (await fresh.load("a", at_seq=15)).data == {"new": 15}
            assert (await fresh.verify()).problems == []


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "tiered"])
async def test_a_stream_made_again_after_the_last_look_keeps_its_base(
    tmp_path: Path, engine: str
) -> None:
    """The remake lands after settle's last look at the head (its ``head_tag``) and
    before its commit: the commit is checked at the head in its own step and writes
    nothing — neither the row nor the removal. Was (two commits): the prune by seq
    removed the new stream's compacted base at 14 — its history gone."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, snapshot_every=10) as store, StateStore(url) as other:
            await _chat(store, "a", 0, 14)
            assert await store.settle("a") == 14
            await _chat(store, "a", 14, 16)
            _remade_at(store, other, 1, "head_tag")
            assert await store.settle("a") is None
            del store.backend.head_tag
        async with StateStore(url, cache_size=0) as fresh:
            assert await fresh.backend.stream_bases(["a"]) == [14]
            assert (await fresh.load("a")).data == {"new": 16}
            assert (await fresh.load("a", at_seq=15)).data == {"new": 15}
            assert (await fresh.verify()).problems == []


async def _latest(store: StateStore, agent_id: str, upto: int | None = None) -> RawSnapshot:
    snapshot = await store.backend.latest_snapshot(agent_id, upto)
    assert snapshot is not None
    return snapshot


# (writer's options, its saves, the settle's head, the row it replaced, the writer's
# saves after it, its rows then on that base, the base of older rows, those rows)
_TAILS = ({"snapshot_every": 100}, 135, 132, 149, (140, 148), 100, (108, 116, 124))
_DELTAS = ({"snapshot_every": 10, "full_snapshot_every": 3}, 42, 40, 50, (50,), 10, (20, 30))


@pytest.mark.parametrize(
    ("engine", "how"),
    [("sqlite", _TAILS), ("sqlite", _DELTAS), ("postgresql", _DELTAS), ("redis", _DELTAS)],
)
async def test_another_stores_snapshots_on_the_base_a_settle_replaced_are_no_false_alarm(
    tmp_path: Path, engine: str, how: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer whose cache stays valid through another store's settle (the settle
    writes no event) goes on making snapshots on the base it holds — a cumulative tail
    (SQLite: tails), or a whole snapshot under its ``full_snapshot_every=3`` (every
    engine) — which that settle replaced by its whole row at the head. Those snapshots
    cannot load; every state still loads, from the settled row. Was: verify reported
    each ("the base snapshot (seq 132) is missing") and every load of one warned to run
    ``statekeeper repair`` — a false alarm. A base gone with no usable snapshot above it
    is still reported."""
    options, saved, replaced, last, orphans, old_base, old_rows = how
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, **options) as writer,
            StateStore(url, snapshot_every=100) as settler,
        ):
            await _chat(writer, "a", 0, saved)
            assert (await _latest(writer, "a")).seq == replaced
            assert await settler.settle("a") == saved
            assert (await _latest(settler, "a", saved - 1)).seq < replaced
            await _chat(writer, "a", saved, last)
            assert (await _latest(writer, "a")).seq == orphans[-1]
        async with StateStore(url, cache_size=0) as fresh:
            caplog.clear()
            for seq in range(replaced - 12, last + 1):
                assert (await fresh.load("a", at_seq=seq)).data == _doc(seq)
            assert [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()] == []
            assert (await fresh.verify()).problems == []
            await fresh.backend.prune("a", 0, (old_base,))  # a base with none above: damage
            problems = (await fresh.verify()).problems
            assert [(p.seq, p.kind) for p in problems] == [(s, "snapshot") for s in old_rows]


@pytest.mark.parametrize("engine", ["sqlite", "sqlite-together", "postgresql", "redis", "tiered"])
async def test_a_stream_compacted_to_the_replaced_row_meanwhile_keeps_it(
    tmp_path: Path, engine: str
) -> None:
    """Another process's retention compacts the stream to the row settle replaces (the
    snapshot at 14: base 14) after settle's last look at the head: the commit keeps
    that row (the stream's base now) and stores the new one — in its own step
    (``replace_snapshot``), or, where the removal goes in an ``append_together`` change
    whose prune refuses it whole ("sqlite-together": SQLite without its
    ``replace_snapshot``; PostgreSQL), the row alone at the same identity next. Was:
    the row was removed — events up to 14 gone and no base (every load of 15 or 16
    raised IntegrityError)."""
    with fresh_url(engine.removesuffix("-together"), tmp_path) as url:
        async with StateStore(url, snapshot_every=10) as store, StateStore(url) as other:
            await _chat(store, "a", 0, 14)
            assert await store.settle("a") == 14
            await _chat(store, "a", 14, 16)
            policy = store._writes.snapshots
            real = policy.prepare
            drops: list[Any] = []
            if engine.endswith("-together"):
                store.backend.replaces_snapshots = False  # (through append_together)
            together = not store.backend.replaces_snapshots  # (PostgreSQL too)
            commit = "append_together" if together else "replace_snapshot"
            real_commit = getattr(store.backend, commit)

            async def compacted(record: Any) -> None:
                # (after settle's last look at the head and its choice of the row to
                # remove, the one at 14. Was: hooked at that look, before the choice —
                # the row then not chosen, so no commit met it as the base)
                await apply_retention(other, RetentionPolicy.parse("* keep_last=2\n"))
                assert await other.backend.stream_bases(["a"]) == [14]
                await real(record)

            async def committed(*args: Any) -> Any:
                drops.append(args[1][0].drop_snapshots if together else args[2])
                return await real_commit(*args)

            policy.prepare = compacted  # type: ignore[method-assign]
            setattr(store.backend, commit, committed)
            assert await store.settle("a") == 16
            policy.prepare = real  # type: ignore[method-assign]
            delattr(store.backend, commit)
            assert drops[0] in (14, (14,))  # (the row at 14 to go, in the commit)
        async with StateStore(url, cache_size=0) as fresh:
            assert await fresh.backend.stream_bases(["a"]) == [14]
            assert (await fresh.backend.latest_snapshot("a", 14)) is not None
            for seq in (14, 15, 16):
                assert (await fresh.load("a", at_seq=seq)).data == _doc(seq)
            assert (await fresh.verify()).problems == []
