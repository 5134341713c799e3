"""``SQLiteBackend.commit_next`` outside its one-statement save: a create (seq 1), and
any save when the TEMP views are missing (a save with a snapshot too) run the row's
statements (``_append_row``) in a transaction of their own on the loop; with the views
a save with a snapshot is one statement (``_SNAP_NEXT``). Pinned here:
the statements sent, in order, what is stored, and each refusal (the error's seqs,
nothing written, no transaction left open)."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import ConflictError
from statekeeper.backends.base import NextRow
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.records import RawSnapshot

_BEGIN = "BEGIN IMMEDIATE"
_CREATE = "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
_CLAIM = "UPDATE sk_agents SET head_seq = "
_EVENT = "INSERT INTO sk_events("
_SNAPSHOT = "INSERT OR REPLACE INTO sk_snapshots("
_HEAD = "SELECT head_seq FROM sk_agents WHERE agent_id = "
_SNAP_ROW = "INSERT INTO sk_snap_row VALUES ("


def _tag(seq: int) -> bytes:
    return hashlib.sha256(f"a/{seq}".encode()).digest()[:16]


def _row(seq: int, expected: bytes | None, snapshot: RawSnapshot | None = None) -> NextRow:
    payload = f"event {seq}".encode()
    return (
        "a",
        seq,
        float(seq),
        payload,
        hashlib.sha256(payload).digest(),
        _tag(seq),
        expected,
        snapshot,
    )


def _stored(path: Path) -> tuple[int, bytes, list[int], list[int]]:
    """The head seq and tag, the event seqs and the snapshot seqs of agent "a"."""
    with closing(sqlite3.connect(path)) as conn:
        head, tag = conn.execute(
            "SELECT head_seq, head_tag FROM sk_agents WHERE agent_id = 'a'"
        ).fetchone()
        events = [
            r[0]
            for r in conn.execute("SELECT seq FROM sk_events WHERE agent_id = 'a' ORDER BY seq")
        ]
        snaps = [
            r[0]
            for r in conn.execute("SELECT seq FROM sk_snapshots WHERE agent_id = 'a' ORDER BY seq")
        ]
        return int(head), bytes(tag), events, snaps


def _committed(backend: SQLiteBackend, row: NextRow) -> list[str]:
    """``commit_next(row)`` (True: committed now), the statements it sent."""
    seen: list[str] = []
    writer = backend._writer
    assert writer is not None
    writer.set_trace_callback(seen.append)
    try:
        backend._pass_due = asyncio.get_running_loop().time() + 3600.0  # no pass due
        assert backend.commit_next(row) is True
    finally:
        writer.set_trace_callback(None)
    assert not writer.in_transaction
    return seen


def _refused(backend: SQLiteBackend, row: NextRow, expected: int, current: int) -> list[str]:
    """``commit_next(row)`` refused with ``expected`` and ``current`` seqs, the
    statements it sent."""
    seen: list[str] = []
    writer = backend._writer
    assert writer is not None
    writer.set_trace_callback(seen.append)
    try:
        backend._pass_due = asyncio.get_running_loop().time() + 3600.0
        with pytest.raises(ConflictError) as refused:
            backend.commit_next(row)
    finally:
        writer.set_trace_callback(None)
    assert (refused.value.expected_seq, refused.value.current_seq) == (expected, current)
    assert not writer.in_transaction
    return seen


def _kinds(statements: list[str]) -> list[str]:
    """Each statement by what it is (its leading words), once (pysqlite traces a
    statement again as each trigger program of it starts: the feed's)."""
    kinds = (_BEGIN, _CREATE, _CLAIM, _EVENT, _SNAPSHOT, _HEAD, _SNAP_ROW, "COMMIT")
    named = [next((k for k in kinds if s.startswith(k)), s) for s in statements]
    return [k for i, k in enumerate(named) if i == 0 or named[i - 1] != k]


@pytest.mark.parametrize("one_statement", [True, False], ids=["view", "no-view"])
async def test_creates_and_snapshot_saves_commit_their_rows_in_one_transaction(
    tmp_path: Path, one_statement: bool
) -> None:
    path = tmp_path / "rows.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.append_next("b", 1, 1.0, b"b", b"sum", None, None)  # (the writer open)
        assert backend._save_next
        backend._save_next = one_statement
        # a create: the head, the event, one commit
        assert _kinds(_committed(backend, _row(1, None))) == [_BEGIN, _CREATE, _EVENT, "COMMIT"]
        assert _stored(path) == (1, _tag(1), [1], [])
        # a create of an agent there already: refused, nothing written
        assert _kinds(_refused(backend, _row(1, None), 0, 1)) == [
            _BEGIN,
            _CREATE,
            _HEAD,
            "COMMIT",
        ]
        # a save with a snapshot: the head, the event and the snapshot, one commit —
        # with the TEMP views, ONE statement in autocommit (_SNAP_NEXT's trigger)
        snap = RawSnapshot(2, 2.0, b"state@2", b"ck2")
        assert _kinds(_committed(backend, _row(2, _tag(1), snap))) == (
            [_SNAP_ROW] if one_statement else [_BEGIN, _CLAIM, _EVENT, _SNAPSHOT, "COMMIT"]
        )
        assert _stored(path) == (2, _tag(2), [1, 2], [2])
        # a stale one: refused, nothing written
        stale = _row(3, _tag(1), RawSnapshot(3, 3.0, b"state@3", b"ck3"))
        assert _kinds(_refused(backend, stale, 2, 2)) == (
            [_SNAP_ROW, _HEAD] if one_statement else [_BEGIN, _CLAIM, _HEAD, "COMMIT"]
        )
        assert _stored(path) == (2, _tag(2), [1, 2], [2])
        if not one_statement:  # a save without snapshot takes the same statements
            assert _kinds(_committed(backend, _row(3, _tag(2)))) == [
                _BEGIN,
                _CLAIM,
                _EVENT,
                "COMMIT",
            ]
            assert _stored(path) == (3, _tag(3), [1, 2, 3], [2])
        # (a refused transaction commits; a refused statement rolls back)
        assert backend.append_commits == (4 if one_statement else 6)
    finally:
        await backend.close()
