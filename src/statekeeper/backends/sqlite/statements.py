"""The statements of an append, made once (a string built per append was a new key for
the statement cache to hash), and the writer connection's preparation of them: the
head's compare-and-set, the event and idempotency rows, and the lone append's one
statement (TEMP views and triggers of the writer connection)."""

from __future__ import annotations

import contextlib
import sqlite3

from ...records import AppendRequest, EventType


def _prepare_writes(conn: sqlite3.Connection) -> None:
    """Compile the statements of a save into the writer connection's statement cache, in
    the transaction that starts a new file's WAL, each run so that it changes nothing:
    a create and an event row that a NOT NULL column refuses before any page is
    touched, a head update of no agent. The first create, the first update and the
    first event row of the file's first saves then run compiled statements: their
    compilation (the event row's with its feed trigger) was ~0.1 ms of a new store's
    first save, and what made each agent's second save slower than its third
    (docs/benchmarks.md, "perf-normal"). A file this process opens but did not create
    compiles them on first use, as before."""
    for sql, args in (
        (_CREATE, ("", None, 0.0, 0.0, None)),  # head_seq NOT NULL
        (_INSERT_EVENT, ("", 0, None, 0.0, None, None)),  # kind NOT NULL
        (_CLAIM_TAGGED, (0, 0.0, None, "", 0, None)),  # no agent "" (ids are not empty)
    ):
        with contextlib.suppress(sqlite3.IntegrityError):
            conn.execute(sql, args)
    # the lone append's one statement (_SAVE_NEXT) and a snapshot-carrying one's
    # (_SNAP_NEXT): the head of no agent moved, refused by the trigger — or no such
    # view, when the writer could not make it
    with contextlib.suppress(sqlite3.IntegrityError, sqlite3.OperationalError):
        conn.execute(_SAVE_NEXT, ("", 0, 0.0, None, None, None, None))
    with contextlib.suppress(sqlite3.IntegrityError, sqlite3.OperationalError):
        conn.execute(_SNAP_NEXT, ("", 0, "", 0.0, None, None, None, None, None, 0, 0.0, None, None))


#: the head-tag clause of the head compare-and-set (``AppendRequest.check_tag``): the
#: stored head must still be the incarnation the writer folded
_TAG_CHECK = {False: "", True: " AND head_tag IS ?"}

#: the head compare-and-set of an append without a lease, by ``check_tag`` (built once:
#: a string concatenated per append was a new key for the statement cache to hash)
_CLAIM = {
    check: "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
    " WHERE agent_id = ? AND head_seq = ?" + clause
    for check, clause in _TAG_CHECK.items()
}
_CREATE = (
    "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO NOTHING"
)
#: the head compare-and-set of a lone append (append_next's: seq and tag)
_CLAIM_TAGGED = _CLAIM[True]
_HEAD_SEQ = "SELECT head_seq FROM sk_agents WHERE agent_id = ?"
#: an append's idempotency key claimed (rowcount 0: it is there, a duplicate), the
#: range of the append that claimed it, and a claim undone (the head refused); a
#: record's ``created_at`` is its append's first event's timestamp
_CLAIM_KEY = (
    "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id, key) DO NOTHING"
)
_KEY_RANGE = "SELECT first_seq, last_seq FROM sk_idempotency WHERE agent_id = ? AND key = ?"
_FORGET_KEY = "DELETE FROM sk_idempotency WHERE agent_id = ? AND key = ?"
_INSERT_EVENT = (
    "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum) VALUES (?, ?, ?, ?, ?, ?)"
)
#: a lone ``append_next`` row as ONE statement, in autocommit (``commit_next``): the
#: head's compare-and-set and the event row made by an ``INSTEAD OF`` trigger on a view,
#: both TEMP — objects of the writer connection alone, not of the file (its schema, its
#: other connections and every other write path are untouched). The head moves only
#: from ``seq - 1`` with the expected tag, else the trigger aborts the statement with
#: :data:`_MOVED` (nothing written); the event's ``INSERT`` fires the feed trigger as
#: before. One statement instead of ``BEGIN IMMEDIATE``, the ``UPDATE``, the
#: ``INSERT`` and ``COMMIT``: three fewer trips through pysqlite (bind, step, reset,
#: the GIL dropped and taken, SQLite's connection mutex), ~12k of a steady save's
#: ~170k instructions (docs/benchmarks.md, "perfsave")
_MOVED = "statekeeper: the head moved"
_SAVE_NEXT_SCHEMA = (
    "CREATE TEMP VIEW IF NOT EXISTS sk_next_row"
    "(agent_id, seq, ts, payload, checksum, tag, expected)"
    " AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    "CREATE TEMP TRIGGER IF NOT EXISTS sk_next_row_append INSTEAD OF INSERT ON sk_next_row"
    " BEGIN"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    f" SELECT RAISE(ABORT, '{_MOVED}') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    f" VALUES (new.agent_id, new.seq, '{EventType.PATCH}', new.ts, new.payload, new.checksum);"
    " END",
)
_SAVE_NEXT = "INSERT INTO sk_next_row VALUES (?, ?, ?, ?, ?, ?, ?)"


def _prepare_save_next(conn: sqlite3.Connection) -> bool:
    """Make :data:`_SAVE_NEXT`'s and :data:`_APPEND_NEXT`'s TEMP views and triggers on
    the writer connection ``conn`` (outside any transaction); False when they cannot be
    made (a lone append then runs its four or five statements, as every other write
    does)."""
    try:
        for sql in (*_SAVE_NEXT_SCHEMA, *_APPEND_NEXT_SCHEMA, *_SNAP_NEXT_SCHEMA):
            conn.execute(sql)
    except sqlite3.Error:
        return False
    return True


#: a lone append of one event of any kind on an existing stream, with or without an
#: idempotency key, as ONE statement in autocommit (``SQLiteBackend._commit_statement``):
#: the LangGraph saver's checkpoints and writes (a checkpoint's key is its history
#: index), an ``append``'s event. Its TEMP trigger makes what :meth:`_append_one`
#: makes, in its order: the key claimed first (a plain ``INSERT``: a key already there
#: fails the statement with SQLite's unique-constraint error and nothing written, and
#: its range is then read back: a duplicate, as before), the head's compare-and-set
#: (seq and tag; :data:`_MOVED` when it changed no row, the key's row undone with the
#: statement), the event row (its feed trigger fires). Five statements (``BEGIN
#: IMMEDIATE``, the key, the head, the event, ``COMMIT``) become one
#: (docs/benchmarks.md, "lgsmall")
_APPEND_NEXT_SCHEMA = (
    "CREATE TEMP VIEW IF NOT EXISTS sk_append_row"
    "(agent_id, seq, kind, ts, payload, checksum, tag, expected, key)"
    " AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    "CREATE TEMP TRIGGER IF NOT EXISTS sk_append_row_append INSTEAD OF INSERT ON sk_append_row"
    " BEGIN"
    " INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " SELECT new.agent_id, new.key, new.seq, new.seq, new.ts WHERE new.key IS NOT NULL;"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    f" SELECT RAISE(ABORT, '{_MOVED}') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    " VALUES (new.agent_id, new.seq, new.kind, new.ts, new.payload, new.checksum);"
    " END",
)
_APPEND_NEXT = "INSERT INTO sk_append_row VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"

#: a lone append of one event WITH a snapshot (the snapshot policy fired: a
#: ``snapshot_every`` count, the default policy's whole or tail snapshot) as ONE
#: statement in autocommit (``commit_next``, ``SQLiteBackend._row_statement``,
#: ``_commit_statement``): :data:`_APPEND_NEXT`'s trigger — the key claimed when there
#: is one, the head's compare-and-set (seq and tag; :data:`_MOVED` when it changed no
#: row: nothing written, the key's row undone with the statement), the event row (its
#: feed trigger fires) — and then the snapshot row, as ``_put_snapshot`` stores it
#: (``INSERT OR REPLACE``: the statement that fires the trigger names no conflict
#: clause, so the trigger's own applies). Five statements (``BEGIN IMMEDIATE``, the
#: head, the event, the snapshot, ``COMMIT``) become one; a crash leaves all of it or
#: none (docs/benchmarks.md, "onestmt")
_SNAP_NEXT_SCHEMA = (
    "CREATE TEMP VIEW IF NOT EXISTS sk_snap_row"
    "(agent_id, seq, kind, ts, payload, checksum, tag, expected, key,"
    " snap_seq, snap_ts, snap_payload, snap_checksum)"
    " AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " NULL, NULL, NULL, NULL",
    "CREATE TEMP TRIGGER IF NOT EXISTS sk_snap_row_append INSTEAD OF INSERT ON sk_snap_row"
    " BEGIN"
    " INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " SELECT new.agent_id, new.key, new.seq, new.seq, new.ts WHERE new.key IS NOT NULL;"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    f" SELECT RAISE(ABORT, '{_MOVED}') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    " VALUES (new.agent_id, new.seq, new.kind, new.ts, new.payload, new.checksum);"
    " INSERT OR REPLACE INTO sk_snapshots(agent_id, seq, ts, payload, checksum)"
    " VALUES (new.agent_id, new.snap_seq, new.snap_ts, new.snap_payload, new.snap_checksum);"
    " END",
)
_SNAP_NEXT = "INSERT INTO sk_snap_row VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _one_statement(request: AppendRequest) -> bool:
    """Whether ``request`` is :data:`_APPEND_NEXT`'s case (or, with a snapshot,
    :data:`_SNAP_NEXT`'s): one event on an existing stream (``expected_seq`` > 0), its
    head tag compared, no lease."""
    return (
        request.expected_seq > 0
        and request.check_tag
        and request.fence is None
        and len(request.events) == 1
    )


#: the head compare-and-set and the event row of a batch of ``append_next`` rows
#: (``SQLiteBackend._append_rows``), their parameters a row's columns as they are
#: (seq, timestamp, new tag, agent, expected tag; agent, seq, timestamp, payload, checksum)
_CLAIM_ROWS = (
    "UPDATE sk_agents SET head_seq = ?1, updated_at = ?2, head_tag = ?3"
    " WHERE agent_id = ?4 AND head_seq = ?1 - 1 AND head_tag IS ?5"
)
_INSERT_ROWS = (
    "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    f" VALUES (?1, ?2, '{EventType.PATCH}', ?3, ?4, ?5)"
)
