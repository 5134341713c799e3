"""On a governed tiered store a save's entry is written ahead of it (tiered has no one
commit for the write and its entry), naming the event it announces; after a
``keep_last`` compaction removed those events, ``AuditLog.verify`` named every save
the compaction removed as unapplied ("the writer stopped between the entry and the
write") — a false alarm for every compaction, with no race at all. Now verify reports
on a tiered store exactly what it reports on its durable engine alone; a save whose
event is still stored is checked as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import tiered_url
from statekeeper.governance import Audit, AuditLog, AuditReport, parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import AppendRequest, AppendResult

from ..backends._services import fresh_url
from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')
KEEP_3 = RetentionPolicy.parse("acme keep_last=3\n")


def _options() -> dict[str, Any]:
    return {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}


def _shown(report: AuditReport) -> tuple[bool, list[str], list[str]]:
    return report.ok, report.problems, report.unapplied


async def _compacted(url: str) -> tuple[bool, list[str], list[str]]:
    async with StateStore(url, **_options()) as store:
        for i in range(9):
            await store.save("acme/b", {"i": i})
        report = await apply_retention(store, KEEP_3)
        assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [("compact", "done", 6)]
        assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [7, 8, 9]
        return _shown(await AuditLog(store.backend, KEYRING).verify())


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_verify_after_a_compaction_matches_the_durable_engine_alone(
    tmp_path: Path, engine: str
) -> None:
    with fresh_url(engine, tmp_path, "alone.db") as alone:
        expected = await _compacted(alone)
    assert expected == (True, [], [])
    with fresh_url(engine, tmp_path, "durable.db") as durable:
        tiered = await _compacted(tiered_url(hot="memory://", durable=durable))
    assert tiered == expected


async def test_verify_after_a_compaction_on_s3(tmp_path: Path) -> None:
    """S3 writes its saves' entries ahead too: the same false alarm, gone."""
    with fresh_url("s3", tmp_path) as url:
        assert await _compacted(url) == (True, [], [])


class _Stopped(BaseException):
    """The writer process stopping between the entry and the write (no void)."""


async def test_a_save_not_written_is_still_named_after_a_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check stays: the entry of a save whose writer stopped before the write (seq
    10, above what the compaction removed) is still unapplied; only the saves the
    compaction removed (seqs 1-6) are not named."""
    with fresh_url("sqlite", tmp_path, "durable.db") as durable:
        async with StateStore(tiered_url(hot="memory://", durable=durable), **_options()) as store:
            for i in range(9):
                await store.save("acme/b", {"i": i})

            append = store.backend.append

            async def stopped(request: AppendRequest) -> AppendResult:
                if request.agent_id == "acme/b":  # (not the audit log's own entry)
                    raise _Stopped
                return await append(request)

            monkeypatch.setattr(store.backend, "append", stopped)
            with pytest.raises(_Stopped):
                await store.save("acme/b", {"i": 9})
            monkeypatch.undo()
            await apply_retention(store, KEEP_3)
            assert [e.seq for e in await store.backend.read("acme/b", 0, None)] == [7, 8, 9]
            report = await AuditLog(store.backend, KEYRING).verify()
    assert report.ok, report.problems
    assert report.unapplied == [
        "entry 10: the save of 'acme/b' at seq 10 it records was not written (the writer"
        " stopped between the entry and the write)"
    ]
