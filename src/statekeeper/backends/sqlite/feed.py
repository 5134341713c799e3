"""The SQLite backend's change feed: schema step 4 and the feed's queries.

Every row inserted into ``sk_events`` gets a row in ``sk_feed`` from a trigger, in the
same transaction: the position is ``sk_feed``'s ``INTEGER PRIMARY KEY`` (the next
after the largest). SQLite has one writer at a time per file, so positions commit in
the order they are taken and every committed position is safe to read (no in-flight
append can come before it). The append statements are untouched: the trigger runs
inside SQLite's C code, in the append's own transaction, and writes one row at the
end of one B-tree (no ``AUTOINCREMENT`` counter, no second index: the cheapest write
that gives a position; ``benchmarks/bench_feed.py`` counts it).

Positions never go back: the row with the largest position is never deleted (a trim
keeps it, hidden below the floor), so the next position is always above every one
handed out. Deleting an agent costs one row: ``sk_feed_deleted`` records the largest
position at that moment, and a reader skips the agent's rows at or below it — they
would otherwise match the events of a stream re-created under the same id. The rows
themselves go with the next trim.

Readers in other processes learn of new positions by polling the largest position
(one index probe) every ``feed_poll_interval`` seconds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...records import FeedRecord, RawEvent

__all__ = [
    "FEED_POLL",
    "ensure_feed",
    "feed_bounds",
    "feed_position",
    "feed_positions",
    "read_feed",
    "read_feed_page",
    "trim_feed",
]

#: seconds between two polls of the feed head by a waiting reader
FEED_POLL = 0.02

_FEED_SCHEMA = (
    """CREATE TABLE sk_feed (
        position INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        seq      INTEGER NOT NULL
    )""",
    """CREATE TABLE sk_feed_deleted (
        agent_id TEXT PRIMARY KEY,
        through  INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TRIGGER sk_feed_append AFTER INSERT ON sk_events BEGIN
        INSERT INTO sk_feed (agent_id, seq) VALUES (new.agent_id, new.seq);
    END""",
    """CREATE TRIGGER sk_feed_forget AFTER DELETE ON sk_agents BEGIN
        INSERT INTO sk_feed_deleted (agent_id, through)
        VALUES (old.agent_id, coalesce((SELECT max(position) FROM sk_feed), 0))
        ON CONFLICT (agent_id) DO UPDATE SET through = excluded.through;
    END""",
)

_READ = """
SELECT f.position, f.agent_id, e.seq, e.kind, e.ts, CAST(e.payload AS BLOB),
       CAST(e.checksum AS BLOB){id}
FROM sk_feed f
JOIN sk_events e ON e.agent_id = f.agent_id AND e.seq = f.seq
LEFT JOIN sk_feed_deleted d ON d.agent_id = f.agent_id
WHERE f.position > max(?, coalesce((SELECT CAST(value AS INTEGER) FROM sk_meta
                                    WHERE key = 'feed_floor'), 0))
  AND (d.through IS NULL OR f.position > d.through)
ORDER BY f.position LIMIT ?
"""
#: the feed's id in each row (SQLite evaluates the constant subquery once): a page and
#: the id it belongs to in one statement, one snapshot (:func:`read_feed_page`)
_READ_ID = _READ.format(id=",\n       (SELECT value FROM sk_meta WHERE key = 'feed_id')")
_READ = _READ.format(id="")


def ensure_feed(conn: sqlite3.Connection) -> None:
    """Schema step 3 -> 4 (inside the caller's write transaction; idempotent): create
    the feed and its triggers, and give the events already stored positions in the
    order they were inserted."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sk_feed'"
    ).fetchone()
    if exists:
        return
    for statement in _FEED_SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO sk_feed (agent_id, seq) SELECT agent_id, seq FROM sk_events ORDER BY rowid"
    )


def read_feed(conn: sqlite3.Connection, after: int, limit: int) -> list[FeedRecord]:
    """Feed records after ``after`` (one read statement: one consistent snapshot)."""
    rows: list[tuple[Any, ...]] = conn.execute(_READ, (after, limit)).fetchall()
    return [FeedRecord(r[0], r[1], RawEvent(r[2], r[3], r[4], r[5], r[6])) for r in rows]


def read_feed_page(
    conn: sqlite3.Connection, after: int, limit: int
) -> tuple[list[FeedRecord], str | None]:
    """:func:`read_feed` and the feed's id as of the same snapshot (one statement): a
    restore renews the id before it writes, so a page holding one of its positions
    carries the new id (None: an empty page, or a store without an id)."""
    rows: list[tuple[Any, ...]] = conn.execute(_READ_ID, (after, limit)).fetchall()
    page = [FeedRecord(r[0], r[1], RawEvent(r[2], r[3], r[4], r[5], r[6])) for r in rows]
    return page, (None if not rows or rows[0][7] is None else str(rows[0][7]))


def feed_bounds(conn: sqlite3.Connection) -> tuple[int, int]:
    """``(floor, head)``: the trimmed-through position and the largest position."""
    row = conn.execute(
        "SELECT (SELECT CAST(value AS INTEGER) FROM sk_meta WHERE key = 'feed_floor'),"
        " (SELECT max(position) FROM sk_feed)"
    ).fetchone()
    floor = int(row[0] or 0)
    return floor, max(int(row[1] or 0), floor)


def feed_position(conn: sqlite3.Connection, agent_id: str, seq: int) -> int | None:
    """The position of ``agent_id``'s event ``seq`` (the newest row: a deleted stream's
    rows of the same seq are older), None when it is trimmed away. ``sk_feed`` has no
    index on the agent (the append's trigger writes one row at the end of one B-tree):
    this reads the feed's rows from the head back to the event, once per agent retention
    compacts or purges."""
    row = conn.execute(  # (newest first, stopping at the first match: a recent event is
        # found at once; an old one reads back to it)
        "SELECT position FROM sk_feed WHERE agent_id = ? AND seq = ? AND position >"
        " coalesce((SELECT CAST(value AS INTEGER) FROM sk_meta WHERE key = 'feed_floor'), 0)"
        " ORDER BY position DESC LIMIT 1",
        (agent_id, seq),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


#: rows of the first window :func:`feed_positions` reads back from the head (each next
#: window twice as deep: a recent event is found at once, an old one in one pass)
_WINDOW = 1024
_BATCH_READ = (
    "SELECT position, agent_id, seq FROM sk_feed WHERE position > ? AND position <= ?"
    " AND agent_id IN (SELECT value FROM json_each(?)) ORDER BY position DESC"
)


def feed_positions(
    conn: sqlite3.Connection, wanted: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The positions of many ``(agent_id, seq)`` events (those found), in ONE pass over
    the feed from the head back until all are found or the floor is reached: the rows
    are read in windows of positions, each twice as deep as the one before, filtered by
    agent in SQL. A retention run asks this once for a page of agents instead of
    :func:`feed_position` per agent (each a scan back to the event)."""
    todo = set(wanted)
    found: dict[tuple[str, int], int] = {}
    if not todo:
        return found
    floor, head = feed_bounds(conn)
    agents = json.dumps(sorted({a for a, _ in todo}))
    top, window = head, _WINDOW
    while todo and top > floor:
        low = max(floor, top - window)
        for position, agent_id, seq in conn.execute(_BATCH_READ, (low, top, agents)):
            key = (agent_id, int(seq))
            if key in todo:  # (the newest row: a deleted stream's are older)
                todo.discard(key)
                found[key] = int(position)
        top, window = low, window * 2
    return found


def trim_feed(conn: sqlite3.Connection, through: int) -> int:
    """Drop feed rows ``<= through`` (but the largest: positions must not go back) and
    raise the floor (caller's transaction)."""
    dropped = conn.execute(
        "DELETE FROM sk_feed WHERE position <= ?"
        " AND position < (SELECT max(position) FROM sk_feed)",
        (through,),
    ).rowcount
    conn.execute("DELETE FROM sk_feed_deleted WHERE through <= ?", (through,))
    conn.execute(
        "INSERT INTO sk_meta (key, value) VALUES ('feed_floor', ?) ON CONFLICT (key) DO UPDATE"
        " SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
        (str(through),),
    )
    return int(dropped)
