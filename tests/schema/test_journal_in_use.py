"""A migration to another target refuses a journal that still holds an open run (neither
finalized nor rolled back): it used to replace that run's record without a word, and
with it the way to roll that run back or finalize it through its journal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import JournalInUse, MigrationError
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import Journal, finalize, migrate, rollback

from . import apps
from .test_migrate_cli import _cli
from .test_migrate_cli import _populate as _cli_populate


async def _populate(store: StateStore, n: int) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(n):
        await states.create(f"a{i:03d}", apps.SupportV1(customer_name=f"c{i}"))


async def _versions(store: StateStore, n: int) -> set[int]:
    return {(await store.load(f"a{i:03d}")).schema_version for i in range(n)}


async def test_a_migration_to_another_target_keeps_the_open_runs_record(tmp_path: Path) -> None:
    journal = tmp_path / "statekeeper-migrate-support.json"  # the CLI's default: one per model
    async with StateStore("memory://") as store:
        await _populate(store, 5)
        first = await migrate(store, apps.support_v2, journal=journal)  # v1 -> v2, in January
        # later: v2 -> v3, the same (default) journal
        with pytest.raises(JournalInUse) as caught:
            await migrate(store, apps.support_v3, journal=journal)
        error = caught.value
        assert isinstance(error, MigrationError)
        assert (error.journal, error.run_id, error.model, error.target) == (
            str(journal),
            first.run_id,
            "support",
            2,
        )
        assert error.state == "migrated, its rollback window still open"
        text = str(error)
        assert str(journal) in text and first.run_id in text
        assert "finalize" in text and "roll it back" in text and "another journal" in text
        # nothing written, and the first run's record is still there: it can be rolled back
        assert await _versions(store, 5) == {2}
        record = Journal.load(journal)
        assert record is not None and record.run_id == first.run_id and record.target == 2
        back = await rollback(store, apps.support_v2, journal=journal)
        assert back.run_id == first.run_id and back.changed == 5
        assert await _versions(store, 5) == {1}
        # a rolled back run is closed: the journal takes the new run
        third = await migrate(store, apps.support_v3, journal=journal)
        assert third.ok and third.changed == 5 and await _versions(store, 5) == {3}


async def test_after_finalizing_or_with_another_journal_the_new_target_runs(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.json"
    async with StateStore("memory://") as store:
        await _populate(store, 4)
        first = await migrate(store, apps.support_v2, journal=journal)
        # another journal: both runs keep their records
        other = tmp_path / "v3.json"
        second = await migrate(store, apps.support_v3, journal=other)
        assert second.changed == 4 and await _versions(store, 4) == {3}
        kept = Journal.load(journal)
        assert kept is not None and kept.run_id == first.run_id
        back = await rollback(store, apps.support_v3, journal=other)
        assert back.changed == 4 and await _versions(store, 4) == {2}
        # finalized: the journal is free for the next target
        await finalize(store, apps.support_v2, journal=journal)
        third = await migrate(store, apps.support_v3, journal=journal)
        assert third.ok and third.run_id != first.run_id and await _versions(store, 4) == {3}


async def test_an_interrupted_run_to_another_target_is_not_replaced(tmp_path: Path) -> None:
    journal = tmp_path / "j.json"
    Journal(run_id="r1", model="support", target=2, after="a001").save(journal)
    async with StateStore("memory://") as store:
        await _populate(store, 3)
        with pytest.raises(JournalInUse, match="interrupted after agent 'a001'"):
            await migrate(store, apps.support_v3, journal=journal)
        # a dry run writes no journal: it still runs
        dry = await migrate(store, apps.support_v3, journal=journal, dry_run=True)
        assert dry.dry_run and dry.changed == 3
        record = Journal.load(journal)
        assert record is not None and record.run_id == "r1" and record.after == "a001"
        # the same target resumes the interrupted run, as before
        resumed = await migrate(store, apps.support_v2, journal=journal)
        assert resumed.run_id == "r1" and resumed.resumed_after == "a001"


def test_cli_migrate_to_another_target_refuses_the_open_journal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _cli_populate(url, 3)
    journal = tmp_path / "j.json"
    done = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v2", "--journal",
                str(journal), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    refused = _cli("--db", url, "migrate", "--app", "tests.schema.apps:v3", "--journal",
                   str(journal), "--json")  # fmt: skip
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())  # rich wraps long lines
    assert "JournalInUse" in message or "holds run" in message, refused.stderr
    assert run_id in message and "--finalize" in message and "--rollback" in message
    record = Journal.load(journal)
    assert record is not None and record.run_id == run_id and not record.rolled_back
