"""``retention apply``'s summary counts the skipped actions apart from those made.

Before, "N action(s)" counted an action left to the next run (the agent deleted, made
again or written since it was listed: outcome ``skipped``, nothing changed) as one
made: a run that compacted nothing said "1 action(s)"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.errors import ConflictError
from statekeeper.governance import retention as r
from statekeeper.governance.retention_idle import check_unchanged

from ..cli._subprocess import cli_in_process


def test_a_skipped_compaction_is_not_counted_as_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as store:
        for name in ("a", "b"):
            for n in range(3):
                store.save(name, {"n": n})

    async def b_deleted_meanwhile(store: Any, agent_id: str, head: int, seen: Any) -> None:
        if agent_id == "b":  # (another process deleted it after the listing)
            raise ConflictError(agent_id, head, 0)
        await check_unchanged(store, agent_id, head, seen)

    monkeypatch.setattr(r, "check_unchanged", b_deleted_meanwhile)
    run = cli_in_process("retention", "apply", "--db", url, "--rule", "* keep_last=1")
    assert run.code == 0, str(run)
    assert "2 agent(s) scanned, 0 on legal hold, 1 action(s), 1 skipped" in run.stdout, str(run)
    as_json = cli_in_process("retention", "apply", "--db", url, "--rule", "* keep_last=1", "--json")
    assert [(a["agent_id"], a["outcome"]) for a in json.loads(as_json.stdout)["actions"]] == [
        ("b", "skipped")
    ]


def test_a_progress_file_keeps_the_skipped_count() -> None:
    from statekeeper.cli.retention_resume import Done
    from statekeeper.governance.retention import RetentionAction, RetentionReport

    done = Done()
    report = RetentionReport()
    report.actions += [
        RetentionAction("a", "compact", "done"),
        RetentionAction("b", "compact", "skipped"),
    ]
    done.count(report)
    assert (done.actions, done.skipped) == (1, 1)
    again = Done.of(done.json())
    assert again is not None and (again.actions, again.skipped) == (1, 1)
    older = Done.of({"scanned": 2, "held": 0, "actions": 2, "unsupported": 0})  # (before)
    assert older is not None and (older.actions, older.skipped) == (2, 0)
