"""Migrations (issue 14 item 4): dry run, batched online migration, verification,
resume, rollback and finalize, on SQLite, PostgreSQL and memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import InvalidArgument, MigrationError
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import Journal, finalize, migrate, rollback, verify
from statekeeper.schema.rewrite import original

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from . import apps


def _v1(i: int) -> apps.SupportV1:
    return apps.SupportV1(
        customer_name=f"c{i}", priority=("low", "normal", "high")[i % 3], tags=[str(i)]
    )


async def _populate(store: StateStore, n: int, *, bad: bool = True) -> None:
    states = TypedStates(store, apps.support_v1)
    for start in range(0, n, 200):
        await asyncio.gather(
            *(states.create(f"a{i:05d}", _v1(i)) for i in range(start, min(n, start + 200)))
        )
    await store.save("plain", {"untyped": True})
    if bad:  # a record no upcaster can take (customer_name missing)
        await store.save("bad", {"$model": "support", "priority": "low"})


async def _heads(store: StateStore) -> dict[str, int]:
    return {info.agent_id: info.head_seq async for info in store.iter_agents()}


async def test_a_dry_run_reports_counts_samples_and_failures_and_writes_nothing() -> None:
    async with StateStore("memory://", durability="group") as store:
        await _populate(store, 30)
        before = await _heads(store)
        report = await migrate(store, apps.support_v2, dry_run=True)
        assert await _heads(store) == before
        assert report.dry_run and report.changed == 30 and report.other == 1
        assert report.versions == {1: 31}
        assert [f.agent_id for f in report.failed] == ["bad"]
        assert report.failed[0].kind == "UpcasterFailed"
        sample = report.samples[1]
        assert {op["path"] for op in sample["ops"]} >= {"/customer_name", "/customer", "/priority"}
        assert sample["after"]["customer"] == sample["before"]["customer_name"]


async def test_migrate_writes_the_current_version_verifies_and_is_idempotent(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.json"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", durability="group") as store:
        await _populate(store, 50)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 50 and [f.agent_id for f in report.failed] == ["bad"]
        assert report.verified == 51 and [p.agent_id for p in report.problems] == ["bad"]
        new = TypedStates(store, apps.support_v2)
        for i in range(50):
            snap = await new.load_snapshot(f"a{i:05d}")
            assert snap.state == apps.upgraded(_v1(i)) and snap.stored_version == 2
        # rewritten in place: the head event itself is now at version 2, info unchanged
        events = [e async for e in store.history("a00007")]
        assert [(e.type, e.schema_version) for e in events] == [("created", 2)]
        kept = await original(store, "a00007", report.run_id)
        assert kept is not None and kept.version == 1 and kept.seq == 1
        assert Journal.load(journal).done  # type: ignore[union-attr]
        again = await migrate(store, apps.support_v2, journal=journal)
        assert again.changed == 0 and again.unchanged == 50 and again.run_id == report.run_id
        assert (await store.verify()).ok


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_migration_runs_while_writers_keep_writing(tmp_path: Path, engine: str) -> None:
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, durability="group") as store:
        await _populate(store, 200, bad=False)
        stop = asyncio.Event()
        writes = {"n": 0}

        async def writer() -> None:  # the live system: appends to a few agents
            while not stop.is_set():
                for i in range(5):
                    await store.append(f"a{i:05d}", "ping", {"n": writes["n"]})
                    writes["n"] += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(writer())
        report = await migrate(store, apps.support_v2, concurrency=8, check=False)
        stop.set()
        await task
        assert report.failed == [] and report.changed == 200
        assert writes["n"] > 0
        checked = await verify(store, apps.support_v2)
        assert checked.ok and checked.verified == 200
        pings = [e async for e in store.history("a00001") if e.type == "ping"]
        assert len(pings) == writes["n"] // 5  # no write lost to the migration


async def test_on_sqlite_a_page_of_agents_is_read_in_two_calls(tmp_path: Path) -> None:
    """The migration reads each page's head records and latest states together (one
    consistent read each), not with a head read and a latest read per agent."""
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", durability="group") as store:
        await _populate(store, 2500, bad=False)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", durability="group") as store:
        backend = store.backend
        calls: dict[str, int] = {}

        def counted(name: str) -> None:
            fn = getattr(backend, name)

            async def wrapper(*args: object, **kwargs: object) -> object:
                calls[name] = calls.get(name, 0) + 1
                return await fn(*args, **kwargs)

            setattr(backend, name, wrapper)

        for name in ("head_tag", "read_latest", "read_state", "read_latest_many"):
            counted(name)
        report = await migrate(store, apps.support_v2, check=False)
        assert report.changed == 2500 and report.failed == []
        assert calls.get("read_latest_many") == 3  # pages of 1,000 agents
        assert calls.get("head_tag", 0) + calls.get("read_latest", 0) == 0
        assert calls.get("read_state", 0) == 0
        checked = await verify(store, apps.support_v2)
        assert checked.ok and checked.verified == 2500


async def test_rollback_restores_the_pre_migration_states(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://", durability="group") as store:
        await _populate(store, 20, bad=False)
        before = {f"a{i:05d}": (await store.load(f"a{i:05d}")).data for i in range(20)}
        report = await migrate(store, apps.support_v2, journal=journal)
        new = TypedStates(store, apps.support_v2)
        touched = await new.load("a00003")
        touched.escalated = True
        touched.tags.append("later")
        await new.save("a00003", touched)  # written since its migration
        back = await rollback(store, apps.support_v2, journal=journal)
        assert back.changed == 20 and back.failed == [] and back.target == 1
        for agent_id, doc in before.items():
            snap = await store.load(agent_id)
            assert snap.schema_version == 1
            if agent_id != "a00003":
                assert snap.data == doc
        # the agent written since came back through the downcaster, keeping its tag
        assert (await TypedStates(store, apps.support_v1).load("a00003")).tags == ["3", "later"]
        assert Journal.load(journal).rolled_back  # type: ignore[union-attr]
        again = await rollback(store, apps.support_v2, run_id=report.run_id)
        assert again.changed == 0 and again.unchanged == 20


async def test_rollback_without_a_downcaster_refuses_agents_written_since_unless_forced() -> None:
    async with StateStore("memory://", durability="group") as store:
        await _populate(store, 5, bad=False)
        report = await migrate(store, apps.support_v2, check=False)
        new = TypedStates(store, apps.support_v2_bare)
        state = await new.load("a00001")
        state.tags.append("later")
        await new.save("a00001", state)
        blocked = await rollback(store, apps.support_v2_bare, run_id=report.run_id)
        assert [f.agent_id for f in blocked.failed] == ["a00001"] and blocked.changed == 4
        assert blocked.failed[0].kind == "RollbackBlocked"
        assert (await store.load("a00001")).schema_version == 2
        forced = await rollback(store, apps.support_v2_bare, run_id=report.run_id, force=True)
        assert forced.changed == 1
        assert (await TypedStates(store, apps.support_v1).load("a00001")).tags == ["1"]
        with pytest.raises(InvalidArgument, match="run id"):
            await rollback(store, apps.support_v2)


async def test_finalize_migrates_stragglers_and_closes_the_rollback_window(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://", durability="group") as store:
        await _populate(store, 10, bad=False)
        await migrate(store, apps.support_v2, journal=journal)
        # an old application instance still writes v1 during the rollout
        await TypedStates(store, apps.support_v1_dc).save("a00002", _v1(99))
        assert (await store.load("a00002")).schema_version == 1
        report = await finalize(store, apps.support_v2, journal=journal)
        assert report.changed == 1 and report.ok
        assert (await store.load("a00002")).schema_version == 2
        with pytest.raises(MigrationError, match="finalized"):
            await rollback(store, apps.support_v2, journal=journal)
        with pytest.raises(MigrationError, match="finalized"):
            await migrate(store, apps.support_v2, journal=journal)


async def test_a_journal_resumes_after_its_last_finished_page(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://", durability="group") as store:
        await _populate(store, 10, bad=False)
        Journal(run_id="r1", model="support", target=2, after="a00004").save(journal)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.resumed_after == "a00004" and report.run_id == "r1"
        assert report.changed == 5  # a00005..a00009; the others were "done" already
        assert (await store.load("a00001")).schema_version == 1
        (tmp_path / "other.json").write_text('{"x": 1}')
        with pytest.raises(MigrationError, match="not a readable migration journal"):
            await migrate(store, apps.support_v2, journal=tmp_path / "other.json")


async def test_migrate_and_rollback_on_postgresql(tmp_path: Path) -> None:
    require_postgres()
    name = namespace(tmp_path)
    drop_schema(name)
    try:
        async with StateStore(f"{POSTGRES_DSN}?schema={name}", durability="group") as store:
            await _populate(store, 40)
            report = await migrate(store, apps.support_v2)
            assert report.changed == 40 and report.verified == 41
            assert (await TypedStates(store, apps.support_v2).load("a00010")) == apps.upgraded(
                _v1(10)
            )
            back = await rollback(store, apps.support_v2, run_id=report.run_id)
            assert back.changed == 40
            assert (await store.load("a00010")).data["customer_name"] == "c10"
    finally:
        drop_schema(name)


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_a_store_opened_in_a_namespace_migrates_its_agents_and_only_those(
    tmp_path: Path, engine: str
) -> None:
    """Through ``StateStore(url, namespace=...)`` every agent of the namespace is
    migrated, rolled back and finalized (the records read and rewritten name the stored,
    prefixed ids); an agent outside the namespace is neither touched nor counted."""
    journal = tmp_path / "j.json"
    backend = MemoryBackend() if engine == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    whole = StateStore(backend, durability="group")
    acme = StateStore(whole.backend, namespace="acme", durability="group")
    try:
        await TypedStates(whole, apps.support_v1).create("outside", _v1(99))
        await TypedStates(whole, apps.support_v1).create("globex/g1", _v1(98))
        await _populate(acme, 12, bad=False)  # a00000..a00011 and "plain", under acme/
        outside = {a: (await whole.load(a)).data for a in ("outside", "globex/g1")}
        dry = await migrate(acme, apps.support_v2, dry_run=True)
        assert (dry.versions, dry.changed, dry.other, dry.total) == ({1: 12}, 12, 1, 13)
        report = await migrate(acme, apps.support_v2, journal=journal)
        assert report.versions == {1: 12} and report.changed == 12 and report.failed == []
        assert report.verified == 12 and report.problems == [] and report.scanned == 13
        for i in range(12):
            snap = await TypedStates(acme, apps.support_v2).load_snapshot(f"a{i:05d}")
            assert snap.state == apps.upgraded(_v1(i)) and snap.stored_version == 2
        assert (await whole.load("acme/a00003")).schema_version == 2
        assert (await original(whole, "acme/a00003", report.run_id)) is not None
        status = await verify(acme, apps.support_v2)
        assert status.ok and status.verified == 12
        back = await rollback(acme, apps.support_v2, journal=journal)
        assert back.changed == 12 and back.failed == [] and back.target == 1
        assert {(await acme.load(f"a{i:05d}")).schema_version for i in range(12)} == {1}
        await migrate(acme, apps.support_v2, journal=journal)
        done = await finalize(acme, apps.support_v2, journal=journal)
        assert done.ok and done.released == 12
        assert (await original(whole, "acme/a00003")) is None  # the window is closed
        for agent_id, doc in outside.items():  # untouched, at version 1
            left = await whole.load(agent_id)
            assert left.schema_version == 1 and left.data == doc and left.seq == 1
        assert (await whole.verify()).ok
    finally:
        await acme.flush()
        await whole.close()
