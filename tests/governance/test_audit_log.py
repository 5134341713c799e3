"""The audit log is verifiable: edits, deletions, truncation, splices and rollback are
found; concurrent writers keep one valid chain; a wrong key reads nothing."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest

from statekeeper.backends.base import Capability
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.url import open_backend
from statekeeper.errors import IntegrityError
from statekeeper.governance import AuditHead, AuditLog
from statekeeper.governance.audit import AUDIT_ID
from statekeeper.records import RawEvent, RewriteRequest
from statekeeper.security import Keyring
from statekeeper.testing import request

from .conftest import KEYRING


async def _filled(log: AuditLog, n: int = 5) -> None:
    """``n`` save entries, each of the one event it records (written to the store
    first: ``verify`` reports entries of events the store does not hold)."""
    for i in range(n):
        await log.backend.append(request(f"acme/a{i}", 0))
        await log.record("save", principal="alice", agent_id=f"acme/a{i}", first_seq=1, last_seq=1)


async def test_entries_round_trip_and_verify(engine_url: str) -> None:
    backend = open_backend(engine_url)
    try:
        log = AuditLog(backend, KEYRING)
        assert (await log.verify()).ok and await log.head() is None
        await _filled(log)
        entries = [e async for e in log.entries()]
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
        assert entries[2].agent_id == "acme/a2" and entries[2].principal == "alice"
        report = await log.verify()
        assert report.ok and report.entries == 5 and report.head == await log.head()
    finally:
        await backend.close()


async def test_an_edited_entry_is_found(engine_url: str) -> None:
    backend = open_backend(engine_url)
    try:
        if not backend.supports(Capability.REWRITE):
            pytest.skip("the engine cannot rewrite records (the attack needs it)")
        log = AuditLog(backend, KEYRING)
        await _filled(log)
        raw = (await backend.read(AUDIT_ID, after_seq=2, to_seq=3))[0]
        flipped = bytearray(raw.payload)
        flipped[-1] ^= 0x01
        seq, tag = await backend.head_tag(AUDIT_ID)
        forged = RawEvent(raw.seq, raw.type, raw.timestamp, bytes(flipped), raw.checksum)
        await backend.rewrite(RewriteRequest(AUDIT_ID, seq, tag, events=[forged]))
        report = await log.verify()
        assert not report.ok
        assert any("entry 3" in p for p in report.problems)
        with pytest.raises(IntegrityError):
            [e async for e in log.entries()]
    finally:
        await backend.close()


async def test_a_wrong_key_reads_nothing(engine_url: str) -> None:
    backend = open_backend(engine_url)
    try:
        await _filled(AuditLog(backend, KEYRING), 2)
        other = Keyring({"k1": "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="})
        report = await AuditLog(backend, other).verify()
        assert not report.ok
        with pytest.raises(IntegrityError):
            [e async for e in AuditLog(backend, other).entries()]
    finally:
        await backend.close()


async def test_concurrent_writers_keep_one_chain(engine_url: str) -> None:
    first = open_backend(engine_url)
    second = first if engine_url.startswith("memory") else open_backend(engine_url)
    try:
        a, b = AuditLog(first, KEYRING), AuditLog(second, KEYRING)

        async def write(log: AuditLog, who: str) -> None:
            for i in range(15):
                await log.record("save", principal=who, agent_id=f"x/{who}{i}")

        await asyncio.gather(write(a, "a"), write(b, "b"))
        entries = [e async for e in a.entries()]
        assert [e.seq for e in entries] == list(range(1, 31))
        assert sorted(e.agent_id or "" for e in entries) == sorted(
            [f"x/a{i}" for i in range(15)] + [f"x/b{i}" for i in range(15)]
        )
        assert (await b.verify()).ok
    finally:
        await first.close()
        if second is not first:
            await second.close()


# -- attacks on the file itself (SQLite: the attacker edits the database) --------------


def _sql(path: Path, statement: str, *args: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, args)


@pytest.fixture
async def sqlite_log(tmp_path: Path) -> tuple[Path, AuditLog]:
    path = tmp_path / "audit.db"
    backend = SQLiteBackend(str(path))
    log = AuditLog(backend, KEYRING)
    await _filled(log)
    await backend.close()
    return path, log


async def _verify(path: Path, witness: AuditHead | None = None) -> list[str]:
    backend = SQLiteBackend(str(path))
    try:
        return (await AuditLog(backend, KEYRING).verify(witness)).problems
    finally:
        await backend.close()


async def test_a_deleted_entry_is_found(sqlite_log: tuple[Path, AuditLog]) -> None:
    path, _ = sqlite_log
    _sql(path, "DELETE FROM sk_events WHERE agent_id = ? AND seq = 3", AUDIT_ID)
    problems = await _verify(path)
    assert any("entries 3..3 are missing" in p for p in problems), problems


async def test_a_renumbered_deletion_is_found(sqlite_log: tuple[Path, AuditLog]) -> None:
    path, _ = sqlite_log
    # delete entry 3 and renumber the ones after it: no gap, but a broken chain
    _sql(path, "DELETE FROM sk_events WHERE agent_id = ? AND seq = 3", AUDIT_ID)
    for seq in (4, 5):
        _sql(
            path,
            "UPDATE sk_events SET seq = ? WHERE agent_id = ? AND seq = ?",
            seq - 1,
            AUDIT_ID,
            seq,
        )
    _sql(path, "UPDATE sk_agents SET head_seq = 4 WHERE agent_id = ?", AUDIT_ID)
    assert await _verify(path)


async def test_truncation_is_found(sqlite_log: tuple[Path, AuditLog]) -> None:
    path, _ = sqlite_log
    _sql(path, "DELETE FROM sk_events WHERE agent_id = ? AND seq >= 4", AUDIT_ID)
    problems = await _verify(path)
    assert any("truncated" in p for p in problems), problems
    # ... also when the head is moved back with it (its tag no longer matches)
    _sql(path, "UPDATE sk_agents SET head_seq = 3 WHERE agent_id = ?", AUDIT_ID)
    problems = await _verify(path)
    assert any("head" in p for p in problems), problems


async def test_a_rollback_is_found_by_the_witness(
    sqlite_log: tuple[Path, AuditLog], tmp_path: Path
) -> None:
    path, _ = sqlite_log
    old = tmp_path / "old.db"
    shutil.copy(path, old)
    backend = SQLiteBackend(str(path))
    log = AuditLog(backend, KEYRING)
    await log.record("delete", principal="mallory", agent_id="acme/a1")
    witness = await log.head()
    await backend.close()
    assert witness is not None and witness.seq == 6
    assert await _verify(path, witness) == []
    # the attacker restores the copy taken before the entry: consistent, but old
    shutil.copy(old, path)
    assert await _verify(path) == []  # without a witness nothing can tell
    problems = await _verify(path, witness)
    assert any("rolled back" in p for p in problems), problems
    # the head file round-trips
    assert AuditHead.loads(witness.dumps()) == witness


async def test_an_emptied_log_is_found(sqlite_log: tuple[Path, AuditLog]) -> None:
    path, _ = sqlite_log
    _sql(path, "DELETE FROM sk_events WHERE agent_id = ?", AUDIT_ID)
    problems = await _verify(path)
    assert any("truncated" in p for p in problems), problems


async def test_a_wrong_key_is_one_kind_of_problem_not_a_truncation(
    sqlite_log: tuple[Path, AuditLog],
) -> None:
    path, _ = sqlite_log
    backend = SQLiteBackend(str(path))
    try:
        other = Keyring({"k1": "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="})
        problems = (await AuditLog(backend, other).verify()).problems
    finally:
        await backend.close()
    assert len(problems) == 5 and all("different key" in p for p in problems), problems
