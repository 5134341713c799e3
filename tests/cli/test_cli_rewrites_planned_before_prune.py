"""``statekeeper rekey`` and ``statekeeper migrate`` on a live store whose retention
prune lands between a rewrite's plan and its commit: the engine refuses that rewrite
(``RewriteBelowPrunedBase``, nothing of it written); the run plans that agent again on
a fresh read and completes (exit 0). Was: the whole run stopped with the
ConfigurationError, exit 1."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import Keyring, StateStore, SyncStateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.cli import app
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import RewriteRequest
from statekeeper.schema import TypedStates
from statekeeper.security.rekey_retry import REPLANS

from ..schema import apps


def test_rekey_goes_on_past_an_agent_a_prune_raced(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.json"
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    url = f"sqlite:///{tmp_path / 'live.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(keys), snapshot_every=3) as store:
        for agent_id in ("a", "b"):
            for i in range(10):
                store.save(agent_id, {"n": i})  # snapshots at 3, 6, 9
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    real = SQLiteBackend.rewrite
    log: list[str] = []

    async def rewrite(self: SQLiteBackend, request: RewriteRequest) -> None:
        if request.agent_id == "a" and request.snapshots and not log:
            log.append("pruned")  # the retention run lands between rekey's walk and commit
            await self.prune("a", 6)
        try:
            await real(self, request)
        except RewriteBelowPrunedBase as exc:
            log.append(f"refused {exc.agent_id} {exc.seq}")
            raise

    monkeypatch.setattr(SQLiteBackend, "rewrite", rewrite)
    result = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(keys), "--json"])
    assert result.exit_code == 0, result.output
    assert log == ["pruned", "refused a 3"]
    assert json.loads(result.stdout)["agents"] == 2
    status = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(keys), "--json"])
    assert len(json.loads(status.stdout)["usage"]) == 1  # every record under the new key
    with SyncStateStore(url, keyring=Keyring.from_file(keys)) as store:
        assert store.load("a").data == {"n": 9} and store.load("b").data == {"n": 9}
        assert [e.seq for e in store.history("a", after_seq=6)] == [7, 8, 9, 10]


def test_rekey_refused_on_every_walk_says_it_gave_up_and_how_to_resume(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prune landing under every walk of agent 'a': after REPLANS walks the run
    stops (exit 2) saying it gave up on 'a' after that many walks because retention
    kept pruning it, that nothing of 'a' was half-written, and that running rekey again
    resumes. Was: the engine's bare refusal ("cannot rewrite the snapshot at seq 3")."""
    keys = tmp_path / "keys.json"
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    url = f"sqlite:///{tmp_path / 'live.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(keys), snapshot_every=3) as store:
        for i in range(10):
            store.save("a", {"n": i})
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    real = SQLiteBackend.rewrite
    walks: list[int] = []

    async def rewrite(self: SQLiteBackend, request: RewriteRequest) -> None:
        if request.agent_id == "a":
            walks.append(request.expected_seq)
            raise RewriteBelowPrunedBase("a", 3, 6)  # (nothing of it written)
        await real(self, request)

    async def backoff(attempt: int) -> None:  # (not slept: no timing)
        return None

    monkeypatch.setattr(SQLiteBackend, "rewrite", rewrite)
    monkeypatch.setattr(importlib.import_module("statekeeper.security.rekey"), "_backoff", backoff)
    result = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(keys)])
    assert result.exit_code == 2, result.output
    assert len(walks) == REPLANS
    said = " ".join(result.output.split())
    assert (
        f"rekey gave up on agent 'a' after {REPLANS} walks because retention kept "
        "pruning it" in said
    ), said
    assert "Nothing of 'a' was half-written" in said
    assert "Run 'statekeeper rekey' again to resume" in said
    status = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(keys), "--json"])
    assert len(json.loads(status.stdout)["usage"]) == 1  # all still under the old key


def test_migrate_goes_on_past_a_page_refused_as_planned_before_a_prune(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"

    async def populate() -> None:
        async with StateStore(url) as store:
            states = TypedStates(store, apps.support_v1)
            for i in range(3):
                await states.create(f"a{i}", apps.SupportV1(customer_name=f"c{i}"))

    asyncio.run(populate())
    real = SQLiteBackend.rewrite_many
    log: list[str] = []

    async def rewrite_many(self: SQLiteBackend, requests: Any) -> list[bool]:
        if not log:  # the engine refuses the page (nothing of it written)
            log.append("refused")
            raise RewriteBelowPrunedBase(requests[1].agent_id, 2, 3)
        return await real(self, requests)

    monkeypatch.setattr(SQLiteBackend, "rewrite_many", rewrite_many)
    journal = str(tmp_path / "journal.json")
    args = ["--db", url, "migrate", "--app", "tests.schema.apps:v2", "--journal", journal, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert log == ["refused"]
    report = json.loads(result.stdout)
    assert report["changed"] == 3 and report["failed"] == [], report
