"""Rolling back a run named by id marks the journal only when the journal holds that
run: the journal's own run stays resumable, finalizable and rollbackable."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import MigrationError
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import Journal, finalize, migrate, rollback

from . import apps
from .test_migrate_cli import _cli
from .test_migrate_cli import _populate as _cli_populate


async def _populate(store: StateStore, n: int) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(n):
        await states.create(f"a{i:03d}", apps.SupportV1(customer_name=f"c{i}", tags=[str(i)]))


async def _versions(store: StateStore, n: int) -> set[int]:
    return {(await store.load(f"a{i:03d}")).schema_version for i in range(n)}


async def test_rolling_back_another_run_leaves_the_journals_run_alone(tmp_path: Path) -> None:
    journal = tmp_path / "statekeeper-migrate-support.json"  # the CLI's default: one per model
    async with StateStore("memory://") as store:
        await _populate(store, 6)
        first = await migrate(store, apps.support_v2, journal=journal)
        await rollback(store, apps.support_v2, journal=journal)
        second = await migrate(store, apps.support_v2, journal=journal)  # a new run
        assert second.run_id != first.run_id and second.changed == 6
        # `statekeeper migrate --rollback --run <first>` (the default journal given too):
        # that run left no trace (rolled back byte for byte): refused, nothing written
        with pytest.raises(MigrationError, match="rolled back already"):
            await rollback(store, apps.support_v2, run_id=first.run_id, journal=journal)
        assert await _versions(store, 6) == {2}
        record = Journal.load(journal)
        assert record is not None and record.run_id == second.run_id
        assert not record.rolled_back  # was: marked rolled back, though nothing was
        # so the journal's run is still the one a rollback through the journal undoes
        back = await rollback(store, apps.support_v2, journal=journal)
        assert back.run_id == second.run_id and back.changed == 6
        assert await _versions(store, 6) == {1}


async def test_finalize_after_rolling_back_another_run(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://") as store:
        await _populate(store, 4)
        first = await migrate(store, apps.support_v2, journal=journal)
        await rollback(store, apps.support_v2, journal=journal)
        await migrate(store, apps.support_v2, journal=journal)
        with pytest.raises(MigrationError, match="rolled back already"):
            await rollback(store, apps.support_v2, run_id=first.run_id, journal=journal)
        done = await finalize(store, apps.support_v2, journal=journal)  # was: MigrationError
        assert done.ok and await _versions(store, 4) == {2}


async def test_a_finalized_journal_does_not_block_rolling_back_another_run(
    tmp_path: Path,
) -> None:
    async with StateStore("memory://") as store:
        await _populate(store, 4)
        first = await migrate(store, apps.support_v2, journal=tmp_path / "first.json")
        journal = tmp_path / "j.json"
        await migrate(store, apps.support_v2, journal=journal)  # a later run ...
        await finalize(store, apps.support_v2, journal=journal)  # ... finalized
        # the first run (its window still open) rolled back by id, the default journal given
        back = await rollback(store, apps.support_v2, run_id=first.run_id, journal=journal)
        assert back.run_id == first.run_id  # was: MigrationError, the journal's run finalized
        assert back.changed == 4 and await _versions(store, 4) == {1}
        record = Journal.load(journal)
        assert record is not None and record.finalized and not record.rolled_back


def test_cli_rollback_of_the_journals_run_by_id_marks_the_journal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _cli_populate(url, 5)
    journal = tmp_path / "j.json"
    app = ("--app", "tests.schema.apps:v2", "--journal", str(journal), "--json")
    done = _cli("--db", url, "migrate", *app)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    back = _cli("--db", url, "migrate", "--rollback", "--run", run_id, *app)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["changed"] == 5
    record = Journal.load(journal)
    # was: the journal still said "migrated", so --finalize re-migrated every agent
    assert record is not None and record.rolled_back
    refused = _cli("--db", url, "migrate", "--finalize", *app)
    assert refused.returncode != 0 and "rolled back" in refused.stderr


def test_cli_rollback_of_a_run_that_migrated_nothing_says_so(tmp_path: Path) -> None:
    """Every agent already at the target: the run migrated none, and its rollback
    restores none. ``--json`` said ``"target": 0`` (no such version); now ``null``
    and the text says there was nothing to roll back."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    journal = str(tmp_path / "j.json")

    async def at_v2() -> None:
        async with StateStore(url) as store:
            await TypedStates(store, apps.support_v2).create("x", apps.SupportV2(customer="c"))

    asyncio.run(at_v2())
    args = ["--db", url, "migrate", "--app", "tests.schema.apps:v2", "--journal", journal]
    assert _cli(*args).returncode == 0
    back = _cli(*args, "--rollback", "--json")
    assert back.returncode == 0, back.stderr
    out = json.loads(back.stdout)
    assert (out["action"], out["changed"], out["target"]) == ("rollback", 0, None)
    text = _cli(*args, "--rollback")
    assert text.returncode == 0, text.stderr
    assert "nothing to roll back" in text.stdout
