"""Migration by rewrite (issue 14 item 4): the stored records themselves are at the new
version afterwards, rollback puts the originals back byte for byte, stale caches in
another store are fenced, finalize drops the kept bytes, and a backend without the
rewrite capability gets a typed error (or migrates by appended events on request)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Capability
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import CapabilityUnsupported, MigrationError
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import MIGRATE_EVENT, finalize, migrate, rollback
from statekeeper.schema.rewrite import PRE, original

from . import apps
from ._stores import store_url

Dump = dict[str, Any]


async def _dump(store: StateStore) -> Dump:
    """Every stored record of every agent, as the backend holds it: events, snapshots,
    head and head tag."""
    backend = store.backend
    out: Dump = {}
    async for info in store.iter_agents():
        agent_id = info.agent_id
        head, tag = await backend.head_tag(agent_id)
        events = await backend.read(agent_id, 0)
        snaps = []
        below: int | None = None
        while True:
            snap = await backend.latest_snapshot(agent_id, below)
            if snap is None:
                break
            snaps.append(snap)
            if snap.seq <= 1:
                break
            below = snap.seq - 1
        out[agent_id] = (head, tag, events, snaps)
    return out


def _body(store: StateStore, agent_id: str, seq: int, kind: str, ts: float, payload: bytes,
          checksum: bytes) -> dict[str, Any]:  # fmt: skip
    codec = store.codec
    opened = codec.open(agent_id, seq, kind, ts, payload, checksum)
    body: dict[str, Any] = codec.deserialize(opened.body, agent_id, seq, fmt=opened.format)
    return body


async def _populate(store: StateStore, n: int) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(n):
        await states.create(f"a{i:03d}", apps.SupportV1(customer_name=f"c{i}", tags=[str(i)]))
        state = await states.load(f"a{i:03d}")
        state.priority = "high"
        await states.save(f"a{i:03d}", state)  # head at seq 2


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


@pytest.mark.parametrize("snapshot_every", [1, 100])
async def test_migrate_rewrites_the_stored_records_and_rollback_restores_them_byte_for_byte(
    url: str, snapshot_every: int, tmp_path: Path
) -> None:
    journal = tmp_path / "j.json"
    async with StateStore(url, snapshot_every=snapshot_every, durability="group") as store:
        await _populate(store, 12)
        before = await _dump(store)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 12 and report.ok
        after = await _dump(store)
        assert after.keys() == before.keys()
        for agent_id, (head, tag, events, snaps) in after.items():
            old_head, old_tag, old_events, old_snaps = before[agent_id]
            assert head == old_head == 2 and tag != old_tag  # same head, new head tag
            assert events[:-1] == old_events[:-1]  # the history below the head untouched
            last = events[-1]
            body = _body(store, agent_id, last.seq, last.type, last.timestamp, last.payload,
                         last.checksum)  # fmt: skip
            assert body["v"] == 2 and body[PRE]["v"] == 1  # the stored event is at v2
            if snapshot_every == 1:  # the snapshot at the head: whole, at v2
                assert snaps[0].seq == 2 and snaps[1:] == old_snaps[1:]
                s = _body(store, agent_id, 2, "snapshot", snaps[0].timestamp, snaps[0].payload,
                          snaps[0].checksum)  # fmt: skip
                i = int(agent_id[1:])
                expected = apps.SupportV2(customer=f"c{i}", priority=3, tags=[str(i)])
                assert s["v"] == 2 and s["data"] == {"$model": "support", **expected.model_dump()}
            else:
                assert snaps == old_snaps == []
        if url == "memory://":
            await _after(store, report.run_id, before, journal)
    if url != "memory://":
        async with StateStore(url) as fresh:  # another process: reads the stored v2
            await _after(fresh, report.run_id, before, journal)


async def _after(fresh: StateStore, run_id: str, before: Dump, journal: Path) -> None:
    """What any process sees after the migration, then the rollback."""
    snap = await TypedStates(fresh, apps.support_v2).load_snapshot("a007")
    assert snap.stored_version == 2 and snap.state.customer == "c7"
    assert (await fresh.verify()).ok
    kept = await original(fresh, "a007", run_id)
    assert kept is not None and kept.event == before["a007"][2][-1]
    back = await rollback(fresh, apps.support_v2, journal=journal)
    assert back.changed == 12 and back.failed == []
    assert await _dump(fresh) == before  # every record, byte for byte, and the head tags
    assert (await fresh.verify()).ok
    assert (await fresh.load("a003")).data["customer_name"] == "c3"


async def test_a_store_holding_the_old_state_in_its_cache_is_fenced(tmp_path: Path) -> None:
    """Another process cached the pre-migration state at the head: its next write must
    not apply ops computed against the old document onto the migrated one."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as old, StateStore(url) as migrator:
        await _populate(old, 3)
        cached = await old.load("a001")  # cached at the head, at v1
        assert cached.schema_version == 1
        report = await migrate(migrator, apps.support_v2)
        assert report.changed == 3
        # the old process writes from its own view: the head tag it holds is stale
        await old.save("a001", {**cached.data, "tags": ["1", "from-old"]})
        snap = await old.load("a001")
        assert snap.seq == 3 and snap.data["tags"] == ["1", "from-old"]
    async with StateStore(url) as fresh:
        assert (await fresh.verify()).ok
        assert (await fresh.load("a001")).data["tags"] == ["1", "from-old"]


async def test_finalize_drops_the_kept_records(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", durability="group") as store:
        await _populate(store, 5)
        report = await migrate(store, apps.support_v2, journal=journal)
        new = TypedStates(store, apps.support_v2)
        state = await new.load("a002")
        state.escalated = True
        await new.save("a002", state)  # written since: its kept bytes sit below the head
        done = await finalize(store, apps.support_v2, journal=journal)
        assert done.released == 4
        assert await original(store, "a001", report.run_id) is None
        assert await original(store, "a002", report.run_id) is not None
        assert (await new.load("a001")).customer == "c1"
        assert (await store.verify()).ok


class _NoRewrite(MemoryBackend):
    capabilities = MemoryBackend.capabilities - {Capability.REWRITE}


async def test_a_backend_without_rewrite_is_refused_or_migrated_by_appends() -> None:
    async with StateStore(_NoRewrite()) as store:
        await _populate(store, 3)
        with pytest.raises(CapabilityUnsupported, match=r"rewrite.*method='append'"):
            await migrate(store, apps.support_v2)
        assert (await store.load("a000")).schema_version == 1  # nothing written
        report = await migrate(store, apps.support_v2, method="append")
        assert report.changed == 3
        assert [e.type async for e in store.history("a000")][-1] == MIGRATE_EVENT
        back = await rollback(store, apps.support_v2, run_id=report.run_id)
        assert back.changed == 3 and (await store.load("a000")).schema_version == 1


class _Writes:
    """Counts a backend's rewrites: ``rewrite_many`` calls (and their sizes) and
    ``rewrite`` calls made directly (not from inside ``rewrite_many``)."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.many: list[int] = []
        self.single = 0
        self._inside = False
        one, many = backend.rewrite, backend.rewrite_many

        async def rewrite(request: Any) -> None:
            if not self._inside:
                self.single += 1
            await one(request)

        async def rewrite_many(requests: Any) -> list[bool]:
            self.many.append(len(requests))
            self._inside = True
            try:
                result: list[bool] = await many(requests)
                return result
            finally:
                self._inside = False

        monkeypatch.setattr(backend, "rewrite", rewrite)
        monkeypatch.setattr(backend, "rewrite_many", rewrite_many)


async def test_rollback_and_finalize_rewrite_a_page_at_a_time(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rollback and finalize rewrite each page of agents with one rewrite_many (one
    transaction on SQLite, one statement on PostgreSQL), not agent by agent; the
    rollback is still byte for byte and finalize leaves no kept bytes in any head."""
    monkeypatch.setattr("statekeeper.schema.report.PAGE", 10)  # 25 agents: 3 pages
    journal = tmp_path / "j.json"
    async with StateStore(url, durability="group") as store:
        await _populate(store, 25)
        before = await _dump(store)
        writes = _Writes(store.backend, monkeypatch)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 25 and report.ok
        assert writes.many == [10, 10, 5] and writes.single == 0
        writes.many.clear()
        back = await rollback(store, apps.support_v2, journal=journal)
        assert back.changed == 25 and back.failed == [] and back.target == 1
        assert writes.many == [10, 10, 5] and writes.single == 0  # a page at a time
        assert await _dump(store) == before  # every record and head tag, byte for byte
        assert (await store.verify()).ok
        # migrate again (a new run) and close the window
        journal.unlink()
        again = await migrate(store, apps.support_v2, journal=journal)
        assert again.changed == 25
        writes.many.clear()
        done = await finalize(store, apps.support_v2, journal=journal)
        assert done.released == 25
        assert writes.many == [10, 10, 5] and writes.single == 0
        for agent_id, (head, _tag, events, _snaps) in (await _dump(store)).items():
            last = events[-1]
            assert last.seq == head
            body = _body(store, agent_id, last.seq, last.type, last.timestamp, last.payload,
                         last.checksum)  # fmt: skip
            assert PRE not in body and body["v"] == 2
        assert (await store.verify()).ok
        with pytest.raises(MigrationError, match="finalized"):
            await rollback(store, apps.support_v2, journal=journal)
    if url != "memory://":
        async with StateStore(url) as fresh:  # another process reads the stored v2
            assert (await TypedStates(fresh, apps.support_v2).load("a024")).customer == "c24"
            assert (await fresh.verify()).ok
