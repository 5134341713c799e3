"""A save that carries a snapshot at its event's seq (the snapshot policy fired:
``snapshot_every``, the default policy's whole or tail snapshot) is ONE statement in
autocommit on SQLite (docs/benchmarks.md, "onestmt"): an ``INSTEAD OF`` trigger on a
TEMP view of the writer connection claims the key (if any), moves the head from the
expected seq and tag (aborting when it moved), inserts the event (its feed row) and the
snapshot — five statements (``BEGIN IMMEDIATE``, the head, the event, the snapshot,
``COMMIT``) before.

What a user relies on, pinned here for each way such a save reaches the engine (the
store's save, ``append_next`` past a pass of the loop, a keyed ``append``): the save
is written whole and loads; a stale head is refused with neither row written (nor its
key kept); a key used before answers as a duplicate with nothing written."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot

_SNAP_ROW = "INSERT INTO sk_snap_row VALUES ("


def _rows(path: Path, agent_id: str) -> tuple[int, list[int], list[int], int, int]:
    """Head seq, event seqs, snapshot seqs, feed rows and key rows of ``agent_id``."""
    with closing(sqlite3.connect(path)) as conn:
        head = conn.execute(
            "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()[0]
        events = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM sk_events WHERE agent_id = ? ORDER BY seq", (agent_id,)
            )
        ]
        snaps = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM sk_snapshots WHERE agent_id = ? ORDER BY seq", (agent_id,)
            )
        ]
        feed, keys = (
            conn.execute(f"SELECT count(*) FROM {t} WHERE agent_id = ?", (agent_id,)).fetchone()[0]
            for t in ("sk_feed", "sk_idempotency")
        )
        return int(head), events, snaps, int(feed), int(keys)


def _traced(backend: SQLiteBackend) -> list[str]:
    seen: list[str] = []
    assert backend._writer is not None
    backend._writer.set_trace_callback(seen.append)
    return seen


def _sent(seen: list[str]) -> list[str]:
    """The writing statements sent: not a trigger program's own trace lines, nor a
    read or a checkpoint made on the writer connection beside the write."""
    return [
        s
        for i, s in enumerate(seen)
        if not s.startswith(("--", "SELECT", "PRAGMA")) and seen[i - 1 : i] != [s]
    ]


def _one_statement(seen: list[str]) -> bool:
    """Whether the write was ONE statement, the snapshot view's."""
    sent = _sent(seen)
    return len(sent) == 1 and sent[0].startswith(_SNAP_ROW)


@pytest.mark.parametrize("every", [1, "bounded"])
async def test_a_save_at_a_snapshot_seq_is_one_statement(tmp_path: Path, every: int | str) -> None:
    path = tmp_path / "s.db"
    msgs = [{"role": "user", "content": f"message {i} " + "x" * 300} for i in range(80)]
    async with StateStore(f"sqlite:///{path}?synchronous=NORMAL", snapshot_every=every) as store:
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        await store.save("a", {"messages": msgs[:1]})
        seen = _traced(backend)
        with_snapshot = 0
        for n in range(2, len(msgs) + 1):
            before = store._writes.snapshots_written
            del seen[:]
            await store.save("a", {"messages": msgs[:n]})
            if store._writes.snapshots_written != before:
                with_snapshot += 1
                assert _one_statement(seen), _sent(seen)
        assert with_snapshot >= (79 if every == 1 else 2)
        head, events, snaps, feed, _ = _rows(path, "a")
        assert head == 80 and events == list(range(1, 81)) and feed == 80
        assert snaps and snaps[-1] <= 80
    async with StateStore(f"sqlite:///{path}", cache_size=0) as reader:
        assert (await reader.load("a")).data == {"messages": msgs}
        assert (await reader.verify(["a"])).problems == []


async def test_a_stale_snapshot_save_leaves_neither_row(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    snap = RawSnapshot(2, 2.0, b"state@2", bytes(32))
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.append_next("a", 1, 1.0, b"e1", bytes(32), b"t1", None)
        await backend.append_next("a", 2, 2.0, b"e2", bytes(32), b"t2", b"t1", snap)
        assert _rows(path, "a")[:3] == (2, [1, 2], [2])
        seen = _traced(backend)
        # past a pass of the loop (append_next, not commit_next): one statement too
        stale = RawSnapshot(3, 3.0, b"state@3", bytes(32))
        with pytest.raises(ConflictError) as refused:
            await backend.append_next("a", 3, 3.0, b"e3", bytes(32), b"t3", b"t1", stale)
        assert (refused.value.expected_seq, refused.value.current_seq) == (2, 2)
        assert _one_statement(seen)
        assert _rows(path, "a") == (2, [1, 2], [2], 2, 0)  # neither row, no feed row
        del seen[:]
        await backend.append_next("a", 3, 3.0, b"e3", bytes(32), b"t3", b"t2", stale)
        assert _one_statement(seen)
        assert _rows(path, "a") == (3, [1, 2, 3], [2, 3], 3, 0)
        assert backend._writer is not None and not backend._writer.in_transaction
    finally:
        await backend.close()


def _request(seq: int, expected_tag: bytes, key: str | None) -> AppendRequest:
    event = RawEvent(seq, "patch", float(seq), b"e%d" % seq, bytes(32))
    return AppendRequest(
        "a",
        seq - 1,
        [event],
        snapshot=RawSnapshot(seq, float(seq), b"state@%d" % seq, bytes(32)),
        idempotency_key=key,
        head_tag=b"t%d" % seq,
        expected_tag=expected_tag,
        check_tag=True,
    )


async def test_a_keyed_append_with_a_snapshot_is_one_statement(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        await backend.append_next("a", 1, 1.0, b"e1", bytes(32), b"t1", None)
        seen = _traced(backend)
        result = await backend.append(_request(2, b"t1", "k2"))
        assert (result.first_seq, result.last_seq, result.duplicate) == (2, 2, False)
        assert _one_statement(seen)
        assert _rows(path, "a") == (2, [1, 2], [2], 2, 1)
        # the same key again: a duplicate, nothing written
        again = await backend.append(_request(3, b"t2", "k2"))
        assert (again.first_seq, again.last_seq, again.duplicate) == (2, 2, True)
        assert _rows(path, "a") == (2, [1, 2], [2], 2, 1)
        # a stale head with a new key: refused, neither row, the key not kept
        with pytest.raises(ConflictError):
            await backend.append(_request(3, b"t1", "k3"))
        assert _rows(path, "a") == (2, [1, 2], [2], 2, 1)
        done = await backend.append(_request(3, b"t2", "k3"))
        assert (done.first_seq, done.duplicate) == (3, False)
        assert _rows(path, "a") == (3, [1, 2, 3], [2, 3], 3, 2)
    finally:
        await backend.close()
