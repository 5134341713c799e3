"""What a new-user trial of ``statekeeper migrate`` found, each checked as the user met
it: a journal given with another store, a rollback of an unknown run, a target newer
than the code, a rollback without a downcaster, the journal's count across a resume,
Ctrl-C, an upcaster's KeyError, and a cached agent after an in-place migration."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import (
    ConflictError,
    InvalidArgument,
    JournalOfAnotherStore,
    MigrationError,
    UpcasterFailed,
)
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import Journal, migrate, rollback

from ..backends._services import fresh_url
from ..cli._proc import ctrl_c_reaches_it
from . import apps
from .test_migrate_cli import ROOT, _env, _populate


async def _seed(store: StateStore, n: int) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(n):
        await states.create(f"s-{i:03d}", apps.SupportV1(customer_name=f"C{i}"))


async def _heads(store: StateStore) -> dict[str, int]:
    return {info.agent_id: info.head_seq async for info in store.iter_agents()}


async def test_the_journal_of_one_store_is_refused_for_another(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    async with StateStore(f"sqlite:///{a}") as store:
        await _seed(store, 5)
        assert (await migrate(store, apps.support_v2, journal=journal)).ok
    async with StateStore(f"sqlite:///{b}") as store:
        await _seed(store, 5)
        with pytest.raises(JournalOfAnotherStore) as info:
            await migrate(store, apps.support_v2, journal=journal)
        assert info.value.journal_store == f"sqlite:{a}" and info.value.store == f"sqlite:{b}"
        assert str(a) in str(info.value) and str(b) in str(info.value)
        with pytest.raises(JournalOfAnotherStore):
            await rollback(store, apps.support_v2, journal=journal)
        assert (await migrate(store, apps.support_v2, dry_run=True)).versions == {1: 5}
    record = Journal.load(journal)
    assert record is not None and record.store == f"sqlite:{a}" and not record.rolled_back


async def test_a_rollback_of_an_unknown_run_is_refused() -> None:
    async with StateStore("memory://") as store:
        await _seed(store, 4)
        report = await migrate(store, apps.support_v2)
        before = await _heads(store)
        with pytest.raises(MigrationError, match="'nonexistent'"):
            await rollback(store, apps.support_v2, run_id="nonexistent")
        assert await _heads(store) == before
        assert (await rollback(store, apps.support_v2, run_id=report.run_id)).changed == 4


async def test_a_target_newer_than_the_code_is_refused_up_front(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://") as store:
        await _seed(store, 2)
        with pytest.raises(InvalidArgument, match="newest schema version of support"):
            await migrate(store, apps.support_v2, to=3, journal=journal)
        assert not journal.exists()
        assert (await migrate(store, apps.support_v2, journal=journal)).ok  # not blocked


def _v2_without_downcaster() -> Any:
    schema = SchemaRegistry().register(apps.SupportV2, name="support", version=2)
    schema.upcaster(from_version=1)(apps._v1_to_v2)
    return schema


async def test_a_rollback_without_a_downcaster_says_why_and_what_force_throws_away() -> None:
    schema = _v2_without_downcaster()
    async with StateStore("memory://") as store:
        await _seed(store, 2)
        run = (await migrate(store, schema)).run_id
        await TypedStates(store, schema).save("s-000", apps.SupportV2(customer="new"))
        blocked = await rollback(store, schema, run_id=run)
        (failure,) = blocked.failed
        assert failure.kind == "RollbackBlocked"
        assert "no downcaster from schema version 2" in failure.error
        assert "newer than this code" not in failure.error
        assert "throws away the writes made since" in failure.error
        forced = await rollback(store, schema, run_id=run, force=True)
        assert forced.forced == 1 and forced.ok
        assert (await store.load("s-000")).data["customer_name"] == "C0"


async def test_a_caster_key_error_names_a_missing_field_never_a_looked_up_value() -> None:
    async with StateStore("memory://") as store:
        await store.save("urgent", {"$model": "support", "customer_name": "x", "priority": "P9"})
        await store.save("renamed", {"$model": "support", "name": "x", "priority": "low"})
        report = await migrate(store, apps.support_v2, dry_run=True)
        errors = {f.agent_id: f.error for f in report.failed}
        assert "P9" not in errors["urgent"] and "its key is not shown" in errors["urgent"]
        assert "the document has no key 'customer_name'" in errors["renamed"]
        with pytest.raises(UpcasterFailed) as info:
            await store.agent("urgent", model=apps.support_v2)
        assert "P9" not in str(info.value)


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_url(request.param, tmp_path) as found:
        yield found


async def test_a_cached_agent_after_an_in_place_migration_is_told_to_reload(url: str) -> None:
    async with StateStore(url) as store:
        await _seed(store, 1)
        agent = await store.agent("s-000", model=apps.support_v2)
        async with StateStore(url) as other:  # the migration, from another process
            assert (await migrate(other, apps.support_v2)).changed == 1
        agent.state.tags.append("after")
        with pytest.raises(ConflictError) as info:
            await agent.save()
        text = str(info.value)
        assert "was rewritten since this process read it" in text
        assert "statekeeper migrate" in text and "reload" in text
        await agent.refresh()
        agent.state.tags.append("after")
        await agent.save()
        assert (await store.load("s-000")).data["tags"] == ["after"]


def test_ctrl_c_says_how_far_it_got_and_the_rerun_resumes_with_the_right_count(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    n = 1600
    _populate(url, n)
    journal = tmp_path / "j.json"
    args = [sys.executable, "-m", "statekeeper.cli", "--db", url, "migrate", "--app",
            "tests.schema.apps:v2", "--journal", str(journal)]  # fmt: skip
    # (this checkout's package first, wherever the environment installed one from)
    path = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    gate = tmp_path / "gate"  # the upcast of agent 1500 (page 2) creates it and waits
    go = tmp_path / "go"  # for this one
    env = {**_env(), **path, apps.GATE: str(gate), apps.GO: str(go)}
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it
    )
    try:
        deadline = time.monotonic() + 240
        while not gate.exists():  # wait for the condition: page 1 done, page 2 started
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the migration never reached agent 1500"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGINT)  # (pending before the upcast can see `go`)
        go.touch()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert f"1,000 of {n:,} agents processed" in err
    assert "run the same command again to resume" in err and str(journal) in err
    assert json.loads(journal.read_text())["changed"] == 1000
    rerun = subprocess.run(
        [*args, "--json"],
        cwd=ROOT,
        env={**_env(), **path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["changed"] == n - 1000
    assert json.loads(journal.read_text())["changed"] == n


def test_journal_store_identity_of_a_memory_store_is_not_recorded(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"

    async def go() -> None:
        async with StateStore("memory://") as store:
            await _seed(store, 1)
            await migrate(store, apps.support_v2, journal=journal)

    asyncio.run(go())
    record = Journal.load(journal)
    assert record is not None and record.store is None
