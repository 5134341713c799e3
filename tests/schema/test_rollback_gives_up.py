"""A rollback (or finalize's release) whose write of an agent is refused on every one
of its :data:`RETRIES` tries -- a rewrite refused as planned before a retention prune,
or a head moved by a live writer each time -- reports that agent failed, naming it and
the refusal's kind; the CLI exits non-zero. Was: the agent was neither counted nor
listed, and the run was reported a success with that agent left un-rolled-back.

The pauses between an agent's tries (:func:`statekeeper.schema.report.pause`) are
counted through ``report._sleep``, not slept (~0.6 s of them an agent: the tests slept
that for real)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite.backend import SQLiteBackend
from statekeeper.errors import ConflictError, RewriteBelowPrunedBase
from statekeeper.schema.migrate import finalize, migrate, rollback
from statekeeper.schema.report import RETRIES, Journal

from ..cli._proc import sk_in_process
from . import apps
from .test_migrate_planned_before_prune import _populate, _refuse, _versions

#: the module (``statekeeper.schema.report``): its ``_sleep`` is what ``pause`` waits with
REPORT = importlib.import_module("statekeeper.schema.report")
#: the pauses of one agent refused on every try: one between each two of its tries
BACKOFF = [min(0.0005 * attempt, 0.02) for attempt in range(1, RETRIES)]


@pytest.fixture(autouse=True)
def pauses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The delays ``pause`` asked for, recorded instead of slept; a test that gave up on
    an agent checks it paused between every two of its tries."""
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(REPORT, "_sleep", sleep)
    yield waits


async def _migrated(url: str, journal: Path) -> None:
    async with StateStore(url, snapshot_every=2) as store:
        await _populate(store)
        report = await migrate(store, apps.support_v2, journal=journal)
        assert report.changed == 3 and report.ok, report.failed


async def test_a_rollback_refused_on_every_try_reports_the_agent(
    tmp_path: Path, pauses: list[float]
) -> None:
    url, journal = f"sqlite:///{tmp_path / 'r.db'}", tmp_path / "journal.json"
    await _migrated(url, journal)
    async with StateStore(url, snapshot_every=2) as store:
        log = _refuse(store, None)
        back = await rollback(store, apps.support_v2, journal=journal)
        assert back.changed == 2 and not back.ok
        (failed,) = back.failed
        assert (failed.agent_id, failed.kind) == ("a1", "RewriteBelowPrunedBase")
        assert "not rolled back" in failed.error and f"{RETRIES} tries" in failed.error
        assert len(log) == RETRIES + 1  # the page's try, then a1's own
        assert pauses == BACKOFF  # between a1's own tries, counted (not slept)
        assert await _versions(store) == {"a0": 1, "a1": 2, "a2": 1}  # a1 as it was
    record = Journal.load(journal)
    assert record is not None and not record.rolled_back  # run again to finish
    async with StateStore(url, snapshot_every=2) as store:
        again = await rollback(store, apps.support_v2, journal=journal)
        assert again.ok and again.changed == 1, again.failed
        assert await _versions(store) == {"a0": 1, "a1": 1, "a2": 1}


async def test_a_rollback_whose_head_moves_on_every_try_reports_the_agent(
    tmp_path: Path, pauses: list[float]
) -> None:
    url, journal = f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "journal.json"
    await _migrated(url, journal)
    async with StateStore(url, snapshot_every=2) as store:
        backend = store.backend
        rewrite, many = backend.rewrite, backend.rewrite_many

        async def one(request: Any) -> Any:
            if request.agent_id == "a1":
                raise ConflictError("a1", request.expected_seq, request.expected_seq + 1)
            return await rewrite(request)

        async def page(requests: Any) -> Any:
            done = await many([r for r in requests if r.agent_id != "a1"])
            flags = iter(done)
            return [False if r.agent_id == "a1" else next(flags) for r in requests]

        backend.rewrite = one  # type: ignore[method-assign]
        backend.rewrite_many = page  # type: ignore[method-assign]
        back = await rollback(store, apps.support_v2, journal=journal)
        (failed,) = back.failed
        assert (failed.agent_id, failed.kind) == ("a1", "ConflictError")
        assert back.changed == 2 and back.retries == RETRIES
        assert pauses == BACKOFF
        assert await _versions(store) == {"a0": 1, "a1": 2, "a2": 1}


async def test_finalize_refused_on_every_release_reports_the_agent(
    tmp_path: Path, pauses: list[float]
) -> None:
    url, journal = f"sqlite:///{tmp_path / 'f.db'}", tmp_path / "journal.json"
    await _migrated(url, journal)
    async with StateStore(url, snapshot_every=2) as store:
        _refuse(store, None)
        done = await finalize(store, apps.support_v2, journal=journal)
        assert done.released == 2 and not done.ok
        (failed,) = done.failed
        assert (failed.agent_id, failed.kind) == ("a1", "RewriteBelowPrunedBase")
        assert "not released" in failed.error
        assert pauses == BACKOFF
    async with StateStore(url, snapshot_every=2) as store:  # run again: released
        again = await finalize(store, apps.support_v2, journal=journal)
        assert again.ok and again.released == 1, again.failed


def test_the_cli_exits_non_zero_naming_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[float]
) -> None:
    url, journal = f"sqlite:///{tmp_path / 'cli.db'}", tmp_path / "journal.json"
    import asyncio

    asyncio.run(_migrated(url, journal))
    rewrite, many = SQLiteBackend.rewrite, SQLiteBackend.rewrite_many

    async def one(self: Any, request: Any) -> Any:
        if request.agent_id == "a1":
            raise RewriteBelowPrunedBase("a1", 2, 3)
        return await rewrite(self, request)

    async def page(self: Any, requests: Any) -> Any:
        if any(r.agent_id == "a1" for r in requests):
            raise RewriteBelowPrunedBase("a1", 2, 3)
        return await many(self, requests)

    monkeypatch.setattr(SQLiteBackend, "rewrite", one)
    monkeypatch.setattr(SQLiteBackend, "rewrite_many", page)
    done = sk_in_process(
        "--db", url, "migrate", "--app", "tests.schema.apps:v2", "--rollback",
        "--journal", str(journal), columns=200,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 agent(s) cannot be written" in done.stdout
    assert "'a1': RewriteBelowPrunedBase: not rolled back" in done.stdout
    assert pauses == BACKOFF  # (the CLI runs in this process: counted, not slept)
