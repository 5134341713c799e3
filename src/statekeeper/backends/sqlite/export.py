"""The SQLite backend's export for backups: the records of many streams as plain
tuples (:class:`~statekeeper.records.StreamRows`), a few statements per page of agents.

Whole streams (what a full backup reads) are one range scan per table over the page's
ids in key order, rows grouped as they come: no per-agent lookup, no object per record.

A full backup of a SQLite store does not read rows at all: the pages of a snapshot
(:mod:`.pages`), or for a namespace :func:`copy_file` (a point-in-time copy of
its streams into a new file, by SQLite), and
:func:`stream_heads` (the manifest's heads, one scan of the copy's events); a
restore reads such a copy back with :func:`iter_streams`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

from ...errors import BackendError
from ...records import EventRow, SnapshotRow, StreamRows

__all__ = [
    "FileCopyStop",
    "FileCopyStopped",
    "Stray",
    "compacted_streams",
    "copy_file",
    "export_slices",
    "export_whole",
    "iter_streams",
    "merge_streams",
    "stream_head_columns",
    "stream_heads",
    "stream_totals",
]


def _blob(value: Any) -> bytes | None:
    """A BLOB column as bytes (as the backend reads its head tags)."""
    if value is None or type(value) is bytes:
        return value
    return str(value).encode("utf-8", "replace")


def export_whole(
    reader: sqlite3.Connection, chunk: Sequence[tuple[str, int, int]]
) -> list[StreamRows]:
    """Whole streams of ``chunk`` (distinct ids): each table scanned once over
    ``min(id)..max(id)`` in key order, rows of ids not asked for (created since the
    caller listed them) and past each ``to_seq`` left out."""
    wanted = {a: hi for a, _, hi in chunk}
    lo_id, hi_id = min(wanted), max(wanted)
    span = (lo_id, hi_id)
    events: dict[str, list[EventRow]] = {a: [] for a in wanted}
    current: list[EventRow] | None = None
    current_id = None
    for row in reader.execute(
        "SELECT agent_id, seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
        " FROM sk_events WHERE agent_id BETWEEN ? AND ? ORDER BY agent_id, seq",
        span,
    ):
        if row[0] != current_id:
            current_id = row[0]
            current = events.get(current_id)
        if current is not None:
            current.append(row[1:])
    for agent_id, cut in wanted.items():
        got = events[agent_id]
        while got and got[-1][0] > cut:  # appended since the caller's cut
            got.pop()
    snaps: dict[str, SnapshotRow] = {}
    for agent_id, seq, ts, payload, checksum in reader.execute(
        "SELECT agent_id, seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
        " FROM sk_snapshots WHERE agent_id BETWEEN ? AND ? ORDER BY agent_id, seq",
        span,
    ):
        upto = wanted.get(agent_id)
        if upto is not None and seq <= upto:
            snaps[agent_id] = (seq, ts, payload, checksum)  # the latest at or below hi
    heads = {
        r[0]: (r[1], _blob(r[2]))
        for r in reader.execute(
            "SELECT agent_id, head_seq, head_tag FROM sk_agents WHERE agent_id BETWEEN ? AND ?",
            span,
        )
    }
    keys: dict[str, list[tuple[str, int, int]]] = {}
    for agent_id, name, first, last in reader.execute(
        "SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency"
        " WHERE agent_id BETWEEN ? AND ? ORDER BY agent_id, first_seq",
        span,
    ):
        if agent_id in wanted:
            keys.setdefault(agent_id, []).append((name, first, last))
    out = []
    for agent_id, _, _ in chunk:
        head, tag = heads.get(agent_id, (0, None))
        out.append(
            StreamRows(
                agent_id, head, tag, events[agent_id], snaps.get(agent_id), keys.get(agent_id, [])
            )
        )
    return out


def export_slices(
    reader: sqlite3.Connection, chunk: Sequence[tuple[str, int, int]]
) -> list[StreamRows]:
    """Slices of streams: each statement an index range read per range (one row per
    range, numbered: an agent may be asked for twice)."""
    values = ",".join("(?, ?, ?, ?)" for _ in chunk)
    flat: list[Any] = []
    for i, (agent_id, after_seq, to_seq) in enumerate(chunk):
        flat += [i, agent_id, max(after_seq, 1), to_seq]
    events: list[list[EventRow]] = [[] for _ in chunk]
    for row in reader.execute(
        f"WITH w(i, a, lo, hi) AS (VALUES {values})"
        " SELECT w.i, e.seq, e.kind, e.ts, CAST(e.payload AS BLOB),"
        " CAST(e.checksum AS BLOB) FROM w JOIN sk_events e"
        " ON e.agent_id = w.a AND e.seq BETWEEN w.lo AND w.hi"
        " ORDER BY w.i, e.seq",
        flat,
    ):
        events[row[0]].append(row[1:])
    snaps: dict[int, SnapshotRow] = {}
    for snap in reader.execute(
        f"WITH w(i, a, lo, hi) AS (VALUES {values})"
        " SELECT w.i, s.seq, s.ts, CAST(s.payload AS BLOB),"
        " CAST(s.checksum AS BLOB) FROM w JOIN sk_snapshots s"
        " ON s.agent_id = w.a AND s.seq = (SELECT max(seq) FROM sk_snapshots"
        " WHERE agent_id = w.a AND seq <= w.hi)",
        flat,
    ):
        snaps[snap[0]] = snap[1:]
    ids = sorted({a for a, _, _ in chunk})
    marks = ",".join("?" * len(ids))
    heads = {
        r[0]: (r[1], _blob(r[2]))
        for r in reader.execute(
            f"SELECT agent_id, head_seq, head_tag FROM sk_agents WHERE agent_id IN ({marks})",
            ids,
        )
    }
    keys: dict[str, list[tuple[str, int, int]]] = {a: [] for a in ids}
    for r in reader.execute(
        "SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency"
        f" WHERE agent_id IN ({marks}) ORDER BY agent_id, first_seq",
        ids,
    ):
        keys[r[0]].append((r[1], r[2], r[3]))
    out = []
    for i, (agent_id, _, _) in enumerate(chunk):
        head, tag = heads.get(agent_id, (0, None))
        out.append(StreamRows(agent_id, head, tag, events[i], snaps.get(i), list(keys[agent_id])))
    return out


# -- the file path of a backup: a point-in-time copy of the whole file -----------------

#: every stream's head found from the events: one scan of the events table in its
#: own (rowid) order, each row's agent looked up in the heads table (small, cached),
#: the rows at their agent's head kept (on the copy, so the manifest describes exactly
#: the bytes shipped): its seq and the checksum of its head event. Measured on the
#: 100,000-agent bench store (300,000 events): 0.082 CPU-s inside SQLite against
#: 0.144 for :data:`STREAM_HEADS` (an index probe and a table probe per agent), 0.18
#: against 0.22 with the rows fetched and sorted (docs/benchmarks.md, fifth pass)
HEAD_EVENTS = """
SELECT e.agent_id, e.seq, CAST(e.checksum AS BLOB)
FROM sk_events e CROSS JOIN sk_agents a
WHERE a.agent_id = e.agent_id AND a.head_seq = e.seq
"""

#: every stream's head as three values, not a row per stream (what the manifest's
#: columns are): the ids joined by NUL (never in an agent id), the seqs by commas, the
#: checksums end to end (all of one length, else :func:`stream_head_columns` takes the
#: rows), with the count and the lengths to check them by. The heads table scanned in
#: id order, each head event found by the events' key (one probe per stream, not one
#: per event as :data:`HEAD_EVENTS`): callgrind, the heads of the 100,000-agent bench
#: store through a memory map: 1.26 G instructions against 1.91 G aggregated the other
#: way round and 2.01 G for the rows (docs/benchmarks.md, bk15)
HEAD_COLUMNS = """
SELECT count(*), group_concat(a.agent_id, char(0)), group_concat(a.head_seq),
       CAST(group_concat(CAST(e.checksum AS BLOB), '') AS BLOB),
       min(length(CAST(e.checksum AS BLOB))), max(length(CAST(e.checksum AS BLOB)))
FROM sk_agents a CROSS JOIN sk_events e
WHERE a.head_seq > 0 AND e.agent_id = a.agent_id AND e.seq = a.head_seq
"""

#: the streams with a head (what :data:`HEAD_EVENTS` must find, one each)
STREAMS_WITH_HEADS = "SELECT count(*) FROM sk_agents WHERE head_seq > 0"

#: every stream's head in one statement over the heads: its seq and the checksum of
#: its head event, or empty (no event at its head: a damaged stream, which the
#: restore refuses); :func:`stream_heads` asks it only when :data:`HEAD_EVENTS` misses
#: a stream (a stream compacted by retention keeps its events after its base, head
#: included)
STREAM_HEADS = """
SELECT a.agent_id, a.head_seq, coalesce(CAST(e.checksum AS BLOB), x'')
FROM sk_agents a
LEFT JOIN sk_events e ON e.agent_id = a.agent_id AND e.seq = a.head_seq
WHERE a.head_seq > 0
ORDER BY a.agent_id
"""

#: the totals: events stored, events the heads account for (equal unless a stream was
#: compacted: its events below the base are gone), streams with a snapshot
STREAM_TOTALS = """
SELECT (SELECT count(*) FROM sk_events),
       (SELECT coalesce(sum(head_seq), 0) FROM sk_agents WHERE head_seq > 0),
       (SELECT count(DISTINCT agent_id) FROM sk_snapshots)
"""

#: the streams compacted by retention (only asked when the totals differ): each one's
#: base (its first event's seq minus one), the checksum of its base snapshot (NULL:
#: none stored there) and how many events it holds (head - base, unless damaged)
COMPACTED = """
SELECT a.agent_id, a.head_seq, f.first - 1, CAST(s.checksum AS BLOB), f.n
FROM sk_agents a
JOIN (SELECT agent_id, min(seq) AS first, count(*) AS n FROM sk_events GROUP BY agent_id) f
  ON f.agent_id = a.agent_id
LEFT JOIN sk_snapshots s ON s.agent_id = a.agent_id AND s.seq = f.first - 1
WHERE a.head_seq > 0 AND (f.first > 1 OR f.n != a.head_seq)
ORDER BY a.agent_id
"""

#: the tables a copy holds: the streams and the schema version (not the change feed,
#: its deletion marks, the leases: nothing a restore reads, and the feed and marks name
#: agents deleted since)
COPIED_TABLES = ("sk_meta", "sk_agents", "sk_events", "sk_snapshots", "sk_idempotency")


class FileCopyStopped(BackendError):
    """A namespace's copy (:func:`copy_file`) was cancelled: its thread stopped."""


class FileCopyStop:
    """A :func:`copy_file`'s stop, from another thread: the statement running is
    interrupted (``sqlite3_interrupt``) and :meth:`check` raises
    :class:`FileCopyStopped` before the next one. The connection is interrupted only
    under the lock its close takes (:meth:`ended`): never once it is closed."""

    def __init__(self, dest: str) -> None:
        self._dest = dest
        self._lock = threading.Lock()
        self._stopped = False
        self._conn: sqlite3.Connection | None = None

    def started(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._conn = conn
        self.check()

    def ended(self) -> None:
        with self._lock:
            self._conn = None

    def check(self) -> None:
        if self._stopped:
            raise FileCopyStopped(f"the copy into {self._dest} was cancelled")

    def __call__(self) -> None:
        with self._lock:
            self._stopped = True
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.interrupt()


def copy_file(
    source: str,
    dest: str,
    prefix: str = "",
    timeout: float = 30.0,
    copied: Callable[[str], None] | None = None,
    stop: FileCopyStop | None = None,
) -> None:
    """A consistent point-in-time copy of the streams of the store at ``source``
    (those whose id starts with ``prefix``, every one if empty) into the new file
    ``dest``, by SQLite alone (``INSERT INTO copy.t SELECT * FROM store.t``, no row
    reaches Python): the tables of :data:`COPIED_TABLES`, created as the store's, all
    filled in ONE transaction, so the copy reads one snapshot of the store while its
    writers (WAL) keep committing.

    A whole store's backup ships its pages instead (:mod:`.pages`: no copy);
    this is a namespace's: measured against ``VACUUM INTO`` (the whole file, 0.47 CPU-s
    for 170 MB) and the online backup API (``Connection.backup``, 0.33 CPU-s): 0.47
    CPU-s, and it alone leaves out other namespaces.
    ``copied`` is called with each table's name once it is copied, inside the
    transaction (tests commit writes there). ``stop`` (:class:`FileCopyStop`) ends it
    early from another thread."""
    conn = sqlite3.connect(dest, timeout=timeout, isolation_level=None)
    try:
        if stop is not None:
            stop.started(conn)
        conn.execute("PRAGMA journal_mode = OFF")  # a private new file: no journal
        conn.execute("PRAGMA synchronous = OFF")  # the backup file is synced, not this
        conn.execute("ATTACH ? AS store", ("file:" + quote(os.path.abspath(source)) + "?mode=ro",))
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        marks = ",".join("?" * len(COPIED_TABLES))
        tables = conn.execute(
            "SELECT sql FROM store.sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
            f" AND name IN ({marks}) ORDER BY name",
            COPIED_TABLES,
        ).fetchall()
        (app_id,) = conn.execute("PRAGMA store.application_id").fetchone()
        conn.execute(f"PRAGMA main.application_id = {int(app_id)}")
        for (sql,) in tables:
            conn.execute(sql)
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else ""
        conn.execute("BEGIN")
        for table in COPIED_TABLES:
            if stop is not None:
                stop.check()  # (per table: the statement running is interrupted)
            if table == "sk_meta" or not prefix:
                conn.execute(f"INSERT INTO main.{table} SELECT * FROM store.{table}")
            else:
                conn.execute(
                    f"INSERT INTO main.{table} SELECT * FROM store.{table}"
                    " WHERE agent_id >= ? AND agent_id < ?",
                    (prefix, upper),
                )
            if copied is not None:
                copied(table)
        conn.execute("COMMIT")
        conn.execute("DETACH store")
    finally:
        if stop is not None:
            stop.ended()
        conn.close()


def stream_heads(reader: sqlite3.Connection) -> list[tuple[str, int, bytes]]:
    """``(agent, head seq, head checksum)`` of every stream, in id order: from
    :data:`HEAD_EVENTS` (sorted here: 0.011 CPU-s for 100,000, less than SQLite's
    sort), or, if a stream has no event at its head, :data:`STREAM_HEADS`."""
    (streams,) = reader.execute(STREAMS_WITH_HEADS).fetchone()
    found = reader.execute(HEAD_EVENTS).fetchall()
    if len(found) != streams:
        return reader.execute(STREAM_HEADS).fetchall()
    found.sort()  # ids are unique: the seq and checksum are never compared
    return found


def stream_head_columns(
    reader: sqlite3.Connection,
) -> tuple[list[str], list[int], list[bytes]]:
    """Every stream's agent, head seq and head checksum as three lists in id order
    (the manifest's ``heads`` columns; :func:`stream_heads` as columns). From
    :data:`HEAD_COLUMNS`: SQLite joins each column into one value, so no Python tuple
    is made per stream (the 100,000 tuples set off the cyclic collector); the rows of
    :func:`stream_heads` when a stream has no event at its head or the checksums
    differ in length."""
    (streams,) = reader.execute(STREAMS_WITH_HEADS).fetchone()
    found, ids, seqs, sums, shortest, longest = reader.execute(HEAD_COLUMNS).fetchone()
    if found == streams == 0:
        return [], [], []
    agents: list[str] = ids.split("\0") if found == streams and ids is not None else []
    if len(agents) != streams or shortest != longest or len(sums) != streams * shortest:
        rows = stream_heads(reader)
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    heads = list(map(int, seqs.split(",")))
    width = shortest
    checksums = [sums[at : at + width] for at in range(0, len(sums), width)]
    # in id order already (the heads table's key): checked (one linear pass), put in
    # order only if not (0.030 -> 0.021 CPU-s of Python for 100,000 heads, bench store)
    if sorted(agents) == agents:
        return agents, heads, checksums
    order = sorted(range(streams), key=agents.__getitem__)  # ids are unique
    return (
        [agents[i] for i in order],
        [heads[i] for i in order],
        [checksums[i] for i in order],
    )


def stream_totals(reader: sqlite3.Connection) -> tuple[int, int, bool]:
    """``(events, streams with a snapshot, whether any stream lacks events below its
    head)``: compacted by retention (see :func:`compacted_streams`) or damaged."""
    events, accounted, snapshots = reader.execute(STREAM_TOTALS).fetchone()
    return events, snapshots, events != accounted


def compacted_streams(reader: sqlite3.Connection) -> list[tuple[str, int, int, bytes | None, int]]:
    """``(agent, head, base, base snapshot checksum or None, events held)`` of every
    stream whose events do not start at seq 1 or do not reach its head (see
    :data:`COMPACTED`), in id order."""
    return reader.execute(COMPACTED).fetchall()


def iter_streams(reader: sqlite3.Connection, stray: Stray | None = None) -> Iterator[StreamRows]:
    """Every stream of a (static) file, whole, in id order, one at a time: the tables
    read by four cursors in key order, merged (memory: one stream); ``stray`` as
    :func:`merge_streams` takes it."""
    events = reader.execute(
        "SELECT agent_id, seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
        " FROM sk_events ORDER BY agent_id, seq"
    )
    snaps = reader.execute(
        "SELECT agent_id, seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB)"
        " FROM sk_snapshots ORDER BY agent_id, seq"
    )
    keys = reader.execute(
        "SELECT agent_id, key, first_seq, last_seq FROM sk_idempotency ORDER BY agent_id, first_seq"
    )
    heads = reader.execute(
        "SELECT agent_id, head_seq, head_tag FROM sk_agents WHERE head_seq > 0 ORDER BY agent_id"
    )
    return merge_streams(heads, events, snaps, keys, stray=stray)


#: what :func:`merge_streams` calls for a row outside every stream: ``(record, agent,
#: seq, head, after)`` — ``record`` ``"event"``, ``"snapshot"``, ``"idempotency
#: record"`` (``seq`` its first) or ``"head"``; ``head`` the agent's (0: none);
#: ``after`` empty, or for a row out of order the row it came after (``"the event seq
#: 3 of agent 'b'"``): its place was before that
Stray = Callable[[str, str, int, int, str], None]


def _after(record: str, agent_id: str, held: Sequence[Any], done: str) -> str:
    """The row an out-of-order row came after: the last one of ``held`` (the rows of
    ``agent_id`` kept so far: the stray is reported when it is met), else the rows of
    ``done`` (the agent merged before)."""
    if held:
        return f"the {record} seq {held[-1][0]} of agent {agent_id!r}"
    return f"the rows of agent {done!r}"


def merge_streams(
    heads: Iterator[Any],
    events: Iterator[Any],
    snaps: Iterator[Any],
    keys: Iterator[Any],
    *,
    stray: Stray | None = None,
) -> Iterator[StreamRows]:
    """Streams from four row sources in id order (then seq): heads ``(agent, head,
    tag)``, events ``(agent, seq, kind, ts, payload, checksum)``, snapshots ``(agent,
    seq, ts, payload, checksum)``, keys ``(agent, key, first, last)`` — a SQLite
    copy's tables (:func:`iter_streams`) or a PostgreSQL backup's ``COPY`` sections.

    A row outside every stream (an event or a snapshot past its head, an idempotency
    record ending past it, any of them of an agent without a head) or out of order (a
    row of an agent whose rows already ended, a head out of id order, a snapshot out
    of seq order) is left out; ``stray``, if given, is called for each (see
    :data:`Stray`) — where a row is dropped (no cost per kept row), and for the rows
    left after the last head. A consistent store holds none: a delete removes every
    row of the stream, idempotency records included, on every engine."""
    event = next(events, None)
    snap = next(snaps, None)
    key = next(keys, None)
    done = ""  # the agent merged before this one: a row at or before it is out of order
    for agent_id, head, tag in heads:
        if done and agent_id <= done and stray is not None:
            stray("head", agent_id, head, head, f"the head of agent {done!r}")
        got: list[EventRow] = []
        while event is not None and event[0] <= agent_id:
            if event[0] == agent_id and event[1] <= head:
                got.append(event[1:])
            elif stray is not None:
                row, own = event[0], event[0] == agent_id
                late = not own and bool(done) and row <= done
                after = _after("event", agent_id, got, done) if late else ""
                stray("event", row, event[1], head if own else 0, after)
            event = next(events, None)
        latest: SnapshotRow | None = None
        first: SnapshotRow | None = None  # a compacted stream's base: its first one
        while snap is not None and snap[0] <= agent_id:
            if snap[0] == agent_id and snap[1] <= head:
                if latest is not None and snap[1] <= latest[0] and stray is not None:
                    stray("snapshot", agent_id, snap[1], head, f"its snapshot seq {latest[0]}")
                latest = snap[1:]
                first = first or latest
            elif stray is not None:
                row, own = snap[0], snap[0] == agent_id
                late = not own and bool(done) and row <= done
                shown = [latest] if latest is not None else []
                after = _after("snapshot", agent_id, shown, done) if late else ""
                stray("snapshot", row, snap[1], head if own else 0, after)
            snap = next(snaps, None)
        named: list[tuple[str, int, int]] = []
        while key is not None and key[0] <= agent_id:
            if key[0] == agent_id and key[3] <= head:
                named.append(key[1:])
            elif stray is not None:
                row, own = key[0], key[0] == agent_id
                late = not own and bool(done) and row <= done
                firsts = [(k[1],) for k in named[-1:]]
                after = _after("idempotency record from", agent_id, firsts, done) if late else ""
                stray("idempotency record", row, key[2], head if own else 0, after)
            key = next(keys, None)
        base = first if got and got[0][0] > 1 and first and first[0] == got[0][0] - 1 else None
        yield StreamRows(agent_id, head, _blob(tag), got, latest, named, base)
        done = agent_id
    if stray is not None and event is not None:
        stray("event", event[0], event[1], 0, "")
    if stray is not None and snap is not None:
        stray("snapshot", snap[0], snap[1], 0, "")
    if stray is not None and key is not None:
        stray("idempotency record", key[0], key[2], 0, "")
