"""SQLite schema 5: an event row's key is its feed position (no feed table, no trigger),
and a file written with the feed table (schema 4, main before this change) keeps every
position a reader may hold when it is opened."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper.backends.sqlite import SCHEMA_VERSION, SQLiteBackend
from statekeeper.backends.sqlite_files import APPLICATION_ID
from statekeeper.testing import request

#: schema 4 as ``backends/sqlite.py`` and ``backends/sqlite_feed.py`` wrote it (main
#: ``b2b9a87``): the head table, the events, the feed table and its two triggers
_V4 = """
CREATE TABLE sk_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sk_agents (
    agent_id TEXT PRIMARY KEY, head_seq INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, head_tag BLOB) WITHOUT ROWID;
CREATE INDEX sk_agents_written ON sk_agents (updated_at, agent_id);
CREATE TABLE sk_events (
    agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, ts REAL NOT NULL,
    payload BLOB NOT NULL, checksum BLOB NOT NULL, PRIMARY KEY (agent_id, seq));
CREATE TABLE sk_snapshots (
    agent_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL, payload BLOB NOT NULL,
    checksum BLOB NOT NULL, PRIMARY KEY (agent_id, seq));
CREATE TABLE sk_idempotency (
    agent_id TEXT NOT NULL, key TEXT NOT NULL, first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL, PRIMARY KEY (agent_id, key)) WITHOUT ROWID;
CREATE TABLE sk_leases (
    agent_id TEXT PRIMARY KEY, holder TEXT, token INTEGER NOT NULL,
    expires_at REAL NOT NULL) WITHOUT ROWID;
"""
_V4_FEED = """
CREATE TABLE sk_feed (position INTEGER PRIMARY KEY, agent_id TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE sk_feed_deleted (agent_id TEXT PRIMARY KEY, through INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER sk_feed_append AFTER INSERT ON sk_events BEGIN
    INSERT INTO sk_feed (agent_id, seq) VALUES (new.agent_id, new.seq);
END;
CREATE TRIGGER sk_feed_forget AFTER DELETE ON sk_agents BEGIN
    INSERT INTO sk_feed_deleted (agent_id, through)
    VALUES (old.agent_id, coalesce((SELECT max(position) FROM sk_feed), 0))
    ON CONFLICT (agent_id) DO UPDATE SET through = excluded.through;
END;
"""
#: schema 4's feed read and bounds (main's ``sqlite_feed._READ`` / ``feed_bounds``)
_V4_READ = """
SELECT f.position, f.agent_id, e.seq FROM sk_feed f
JOIN sk_events e ON e.agent_id = f.agent_id AND e.seq = f.seq
LEFT JOIN sk_feed_deleted d ON d.agent_id = f.agent_id
WHERE f.position > coalesce((SELECT CAST(value AS INTEGER) FROM sk_meta
                             WHERE key = 'feed_floor'), 0)
  AND (d.through IS NULL OR f.position > d.through)
ORDER BY f.position
"""
_V4_BOUNDS = (
    "SELECT (SELECT CAST(value AS INTEGER) FROM sk_meta WHERE key = 'feed_floor'),"
    " (SELECT max(position) FROM sk_feed)"
)


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _append(conn: sqlite3.Connection, agent: str, seq: int) -> None:
    """What schema 4's append wrote: the head row and the event (the trigger: the feed)."""
    conn.execute(
        "INSERT INTO sk_agents VALUES (?, ?, 1.0, 1.0, NULL)"
        " ON CONFLICT(agent_id) DO UPDATE SET head_seq = excluded.head_seq",
        (agent, seq),
    )
    conn.execute(
        "INSERT INTO sk_events VALUES (?, ?, 'e', 1.0, ?, ?)",
        (agent, seq, f"{agent}{seq}".encode(), b"c" * 32),
    )


def _delete(conn: sqlite3.Connection, agent: str) -> None:
    conn.execute("DELETE FROM sk_agents WHERE agent_id = ?", (agent,))
    conn.execute("DELETE FROM sk_events WHERE agent_id = ?", (agent,))


def _schema4_file(path: Path, feed: bool = True) -> None:
    """A store as schema 4 left it (``feed=False``: schema 3, before the feed), with
    what makes positions hard to keep: a trimmed feed, an agent deleted and re-created
    under the same id, and the largest position held by an agent deleted since."""
    with closing(_raw(path)) as conn:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(_V4 + (_V4_FEED if feed else ""))
        conn.execute("INSERT INTO sk_meta VALUES ('schema_version', ?)", ("4" if feed else "3",))
        for agent, seq in [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("c", 1), ("a", 3)]:
            _append(conn, agent, seq)
        _delete(conn, "b")
        for agent, seq in [("b", 1), ("c", 2), ("z", 1)]:  # b re-created
            _append(conn, agent, seq)
        _delete(conn, "z")  # it held the largest position
        if feed:  # trimmed through position 2: its rows dropped, the floor raised
            conn.execute("DELETE FROM sk_feed WHERE position <= 2")
            conn.execute("INSERT INTO sk_meta VALUES ('feed_floor', '2')")


async def test_an_append_writes_its_event_row_and_the_head_no_feed_row(tmp_path: Path) -> None:
    """Schema 5: the feed position is the event row's own key: an append changes the
    head row and the event row, nothing else (schema 4: a third row, in ``sk_feed``)."""
    backend = SQLiteBackend(tmp_path / "one.db")
    try:
        await backend.append(request("a", 0))
        writer = backend._writer
        assert writer is not None
        before = writer.total_changes  # counts the rows written by triggers too
        await backend.append(request("a", 1))
        assert writer.total_changes - before == 2
        (record,) = [r for r in await backend.read_feed(after=0) if r.event.seq == 2]
        with closing(_raw(tmp_path / "one.db")) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            (position,) = conn.execute(
                "SELECT position FROM sk_events WHERE agent_id = 'a' AND seq = 2"
            ).fetchone()
        assert "sk_feed" not in tables
        assert record.position == position
        assert await backend.schema_version() == SCHEMA_VERSION == 5
    finally:
        await backend.close()


async def test_a_schema_4_file_keeps_every_feed_position(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _schema4_file(path)
    with closing(_raw(path)) as conn:
        expected = conn.execute(_V4_READ).fetchall()
        floor, head = conn.execute(_V4_BOUNDS).fetchone()
    # a2, c1, a3, the re-created b1, c2 (b's first rows are hidden, z's event is gone)
    assert (floor, head) == (2, 9) and [r[0] for r in expected] == [3, 5, 6, 7, 8]

    backend = SQLiteBackend(path)  # converts the file, in one transaction
    try:
        assert await backend.schema_version() == 5
        records = await backend.read_feed(after=0, limit=100)
        assert [(r.position, r.agent_id, r.event.seq) for r in records] == expected
        assert await backend.feed_bounds() == (floor, head)
        # a reader that had passed position 5 gets the rest, exactly
        assert [r.position for r in await backend.read_feed(after=5)] == [6, 7, 8]
        # every event is still readable per agent, trimmed from the feed or not
        assert [e.payload for e in await backend.read("a")] == [b"a1", b"a2", b"a3"]
        assert [e.payload for e in await backend.read("b")] == [b"b1"]  # re-created
        # the file keeps working: the next position is beyond every earlier one, also
        # beyond the deleted agent's (9)
        await backend.append(request("a", 3))
        await backend.append(request("z", 0))
        later = await backend.read_feed(after=head)
        assert [(r.agent_id, r.position) for r in later] == [("a", 10), ("z", 11)]
        assert await backend.trim_feed(8) == 5  # positions 3, 5, 6, 7 and 8
        assert [r.position for r in await backend.read_feed(after=0)] == [10, 11]
    finally:
        await backend.close()
    reopened = SQLiteBackend(path)  # converted once: the next open is a plain open
    try:
        assert await reopened.feed_bounds() == (8, 11)
        assert [e.seq for e in await reopened.read("a")] == [1, 2, 3, 4]
    finally:
        await reopened.close()


async def test_a_file_from_before_the_feed_numbers_its_events_in_insertion_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    _schema4_file(path, feed=False)
    backend = SQLiteBackend(path)
    try:
        records = await backend.read_feed(after=0)
        pairs = [(r.agent_id, r.event.seq) for r in records]
        assert pairs == [("a", 1), ("a", 2), ("c", 1), ("a", 3), ("b", 1), ("c", 2)]
        positions = [r.position for r in records]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
        await backend.append(request("c", 2))
        (last,) = await backend.read_feed(after=positions[-1])
        assert (last.agent_id, last.event.seq) == ("c", 3)
    finally:
        await backend.close()
