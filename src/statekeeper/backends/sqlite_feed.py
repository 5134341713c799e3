"""The SQLite backend's change feed: the event row's own position, and the feed's queries.

An event's feed position is its row's key in ``sk_events``: ``position INTEGER
PRIMARY KEY AUTOINCREMENT``, taken by the append's own ``INSERT`` (no second table, no
trigger: the save writes one event row and nothing else for the feed;
``benchmarks/bench_save_floor.py`` counts the difference). SQLite has one writer at a
time per file, so positions commit in the order they are taken and every committed
position is safe to read (no in-flight append can come before it).

Positions never go back: ``AUTOINCREMENT`` keeps the largest position ever handed out
(in ``sqlite_sequence``), so a position freed by a delete is never handed out again,
and the feed's head is that largest position. Deleting an agent deletes its rows, and
with them its positions (gaps, as the feed contract says); a stream re-created under the
same id gets new positions, beyond every earlier one. A trim only raises the floor
(``sk_meta`` key ``feed_floor``): the events are the streams' data and stay.

Schema step 4 -> 5 (:func:`ensure_positions`) moves a file written with the separate
``sk_feed`` table (steps 4 and before) to this layout, keeping every position a reader
may hold: an event keeps the position its ``sk_feed`` row gave it; an event whose
feed row was trimmed gets a negative position (below every floor: never read again);
a file from before the feed (step 3) numbers its events in insertion (rowid) order,
as step 4 did.

Readers in other processes learn of new positions by polling the largest position
(one row of ``sqlite_sequence``) every ``feed_poll_interval`` seconds.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..records import FeedRecord, RawEvent

__all__ = ["EVENTS_DDL", "FEED_POLL", "ensure_positions", "feed_bounds", "read_feed", "trim_feed"]

#: seconds between two polls of the feed head by a waiting reader
FEED_POLL = 0.02

#: the events table (schema step 5): the row's key is its feed position
EVENTS_DDL = """CREATE TABLE IF NOT EXISTS {name} (
    position INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    UNIQUE (agent_id, seq)
)"""

_FLOOR = "coalesce((SELECT CAST(value AS INTEGER) FROM sk_meta WHERE key = 'feed_floor'), 0)"
_HEAD = "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'sk_events'), 0)"

_READ = f"""
SELECT position, agent_id, seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)
FROM sk_events WHERE position > max(?, {_FLOOR})
ORDER BY position LIMIT ?
"""

#: step 4 -> 5: every event with the position of its visible ``sk_feed`` row (a row at
#: or below its agent's ``sk_feed_deleted.through`` belonged to an earlier incarnation)
_KEEP_POSITIONS = """
INSERT INTO sk_events_v5 (position, agent_id, seq, kind, ts, payload, checksum)
SELECT coalesce((SELECT f.position FROM sk_feed f
                 WHERE f.agent_id = e.agent_id AND f.seq = e.seq
                   AND f.position > coalesce((SELECT d.through FROM sk_feed_deleted d
                                              WHERE d.agent_id = e.agent_id), 0)
                 ORDER BY f.position DESC LIMIT 1),
                -e.rowid),
       e.agent_id, e.seq, e.kind, e.ts, e.payload, e.checksum
FROM sk_events e
"""


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def has_positions(conn: sqlite3.Connection) -> bool:
    """True when ``sk_events`` is of schema step 5 (its rows carry their positions)."""
    return "position" in _columns(conn, "sk_events")


def ensure_positions(conn: sqlite3.Connection) -> None:
    """Schema step -> 5 (inside the caller's write transaction; idempotent): rebuild
    ``sk_events`` with its feed positions and drop the ``sk_feed`` tables and triggers."""
    if has_positions(conn):
        return
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for trigger in ("sk_feed_append", "sk_feed_forget"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute(EVENTS_DDL.format(name="sk_events_v5"))
    if "sk_feed" in tables:
        conn.execute(_KEEP_POSITIONS)
        head = conn.execute("SELECT max(position) FROM sk_feed").fetchone()[0]
    else:  # a file from before the feed: insertion order, as step 4 numbered them
        conn.execute(
            "INSERT INTO sk_events_v5 (position, agent_id, seq, kind, ts, payload, checksum)"
            " SELECT rowid, agent_id, seq, kind, ts, payload, checksum FROM sk_events"
        )
        head = None
    conn.execute("DROP TABLE sk_events")
    conn.execute("ALTER TABLE sk_events_v5 RENAME TO sk_events")
    for table in ("sk_feed", "sk_feed_deleted"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    # the largest position ever handed out (it may have been an event deleted since)
    last = conn.execute("SELECT max(position) FROM sk_events").fetchone()[0]
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'sk_events'")
    conn.execute(
        "INSERT INTO sqlite_sequence (name, seq) VALUES ('sk_events', ?)",
        (max(int(head or 0), int(last or 0), 0),),
    )


def read_feed(conn: sqlite3.Connection, after: int, limit: int) -> list[FeedRecord]:
    """Feed records after ``after`` (one read statement: one consistent snapshot)."""
    rows: list[tuple[Any, ...]] = conn.execute(_READ, (after, limit)).fetchall()
    return [FeedRecord(r[0], r[1], RawEvent(r[2], r[3], r[4], r[5], r[6])) for r in rows]


def feed_bounds(conn: sqlite3.Connection) -> tuple[int, int]:
    """``(floor, head)``: the trimmed-through position and the largest position."""
    row = conn.execute(f"SELECT {_FLOOR}, {_HEAD}").fetchone()
    floor = int(row[0] or 0)
    return floor, max(int(row[1] or 0), floor)


def trim_feed(conn: sqlite3.Connection, through: int) -> int:
    """Raise the floor to ``through`` (caller's transaction; never lowered) and return
    how many records that took out of the feed. The events stay: they are the streams."""
    dropped = conn.execute(
        f"SELECT count(*) FROM sk_events WHERE position > {_FLOOR} AND position <= ?",
        (through,),
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO sk_meta (key, value) VALUES ('feed_floor', ?) ON CONFLICT (key) DO UPDATE"
        " SET value = max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
        (str(through),),
    )
    return int(dropped)
