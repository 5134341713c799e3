"""A restore's writes into an empty SQLite store from a checked store image, by SQLite
alone (``INSERT INTO main.t SELECT ... FROM image.t``: no row reaches Python).

The image is a whole store's file as a backup ships it (:mod:`.pages`, or a
namespace's copy, :func:`.export.copy_file`), decrypted and checked by the
restore first: every stream against the manifest, every record opened with the
target's keys and its chain followed, every head tag the target's own. What is
written is exactly what the record path of the restore writes for such an image
(:mod:`statekeeper.governance.backup.writepass`, from the streams
:func:`.export.merge_streams` reads): each stream with ``head_seq > 0``, its
events up to its head, its latest snapshot at or below its head and, for a stream
compacted by retention, its base snapshot (the one just before its first event), its
idempotency keys that start at or below its head (those its compaction kept too:
of the appends it removed, and of one it cut in two), and its head row
as the image holds it (head seq, tag, created and updated at: every append sets the
latter to its last event's time, as the record path's do), but for a compacted stream
created at its first event's time, as the record path's append onto its base sets it
(reading each stream's first event time instead of taking the row's: 0.73 against 0.33
CPU-s for 100,000 streams, docs/benchmarks.md "restore"). Everything in one write transaction of the
engine: the target must hold no stream row at all (else nothing is written and the
caller takes the record path), and the rows written must be the counts the caller
checked (else the transaction rolls back). When the image holds exactly the events the
restore checked, they are copied whole (:func:`_copy_events`: SQLite's transfer of the
stored records, the feed's rows written as its trigger would).

The idempotency records keep the time the image holds (``created_at``, what
retention's ``keys_ttl`` measures); an image of a store of schema 4 or older has none,
and each record gets its append's first event's timestamp (or, that event compacted
away, the time of the restore), as a schema migration gives them.
"""

from __future__ import annotations

import sqlite3
import time

from ...errors import BackupCorrupt
from .feed import _FEED_SCHEMA, trim_feed

__all__ = ["KEY_MADE_LATER", "Counts", "import_image", "stray_key", "stray_reason", "stray_row"]

#: (agents, events, snapshots) a restore checked and expects written
Counts = tuple[int, int, int]

_TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency")
#: the seq before a stream's first event in the image (0 for a whole stream)
_BASE = "coalesce((SELECT min(e.seq) FROM image.sk_events e WHERE e.agent_id = a.agent_id), 1) - 1"
_WRITES = (
    "INSERT INTO main.sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
    " SELECT a.agent_id, a.head_seq,"
    " CASE WHEN EXISTS (SELECT 1 FROM image.sk_events e WHERE e.agent_id = a.agent_id"
    " AND e.seq = 1) THEN a.created_at"
    " ELSE coalesce((SELECT e.ts FROM image.sk_events e WHERE e.agent_id = a.agent_id"
    " ORDER BY e.seq LIMIT 1), a.created_at) END,"
    " a.updated_at, a.head_tag FROM image.sk_agents a WHERE a.head_seq > 0 ORDER BY a.agent_id",
    "INSERT INTO main.sk_events(agent_id, seq, kind, ts, payload, checksum)"
    " SELECT e.agent_id, e.seq, e.kind, e.ts, CAST(e.payload AS BLOB), CAST(e.checksum AS BLOB)"
    " FROM image.sk_agents a JOIN image.sk_events e"
    " ON e.agent_id = a.agent_id AND e.seq <= a.head_seq"
    " WHERE a.head_seq > 0 ORDER BY e.agent_id, e.seq",
    "INSERT INTO main.sk_snapshots(agent_id, seq, ts, payload, checksum)"
    " SELECT s.agent_id, s.seq, s.ts, CAST(s.payload AS BLOB), CAST(s.checksum AS BLOB)"
    " FROM image.sk_agents a JOIN image.sk_snapshots s"
    " ON s.agent_id = a.agent_id AND s.seq <= a.head_seq"
    " WHERE a.head_seq > 0 AND (s.seq = (SELECT max(t.seq) FROM image.sk_snapshots t"
    f" WHERE t.agent_id = a.agent_id AND t.seq <= a.head_seq) OR s.seq = {_BASE})"
    " ORDER BY s.agent_id, s.seq",
)
#: the idempotency records, ``{made}`` their ``created_at``: the image's own (a copy of
#: a store of schema 5 on), else as a schema migration fills it (:data:`KEY_MADE`)
_KEYS = (
    "INSERT INTO main.sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " SELECT k.agent_id, k.key, k.first_seq, k.last_seq, {made}"
    " FROM image.sk_agents a JOIN image.sk_idempotency k ON k.agent_id = a.agent_id"
    " WHERE a.head_seq > 0 AND k.first_seq <= a.head_seq"
    " ORDER BY k.agent_id, k.key"
)
#: the time of an idempotency record stored without one (a file or an image of schema
#: 4 or older): its append's first event's timestamp, or (that event compacted away)
#: the time given as the parameter ``now``
KEY_MADE = (
    "coalesce((SELECT e.ts FROM {schema}.sk_events e WHERE e.agent_id = k.agent_id"
    " AND e.seq = k.first_seq), :now)"
)

#: made by the migration 4 -> 5 (``SQLiteBackend._migrate``): a process of a version
#: before it, which opened the file before the migration and goes on writing (a rolling
#: deploy), inserts its records without ``created_at``; the column's default (0, the
#: only constant ``ALTER TABLE`` can give an existing table) would date them to 1970,
#: and the first ``keys_ttl`` retention run forgot them at once: a retry of such an
#: append, within any ``keys_ttl``, was stored twice. The trigger gives each its append's
#: first event's time (the events are written first), or the time of the insert.
KEY_MADE_LATER = (
    "CREATE TRIGGER IF NOT EXISTS sk_idempotency_made AFTER INSERT ON sk_idempotency"
    " WHEN NEW.created_at = 0 BEGIN"
    " UPDATE sk_idempotency SET created_at = coalesce((SELECT e.ts FROM sk_events e"
    " WHERE e.agent_id = NEW.agent_id AND e.seq = NEW.first_seq),"
    " (julianday('now') - 2440587.5) * 86400.0)"
    " WHERE agent_id = NEW.agent_id AND key = NEW.key; END"
)


def _import_keys(conn: sqlite3.Connection) -> None:
    columns = {r[1] for r in conn.execute("PRAGMA image.table_info(sk_idempotency)")}
    made = "k.created_at" if "created_at" in columns else KEY_MADE.format(schema="image")
    conn.execute(_KEYS.format(made=made), {"now": time.time()})


def import_image(conn: sqlite3.Connection, expected: Counts, raise_floor: bool = False) -> bool:
    """Write the streams of the image attached to ``conn`` as ``image`` into its main
    database, inside the caller's write transaction (see the module documentation).
    False, nothing written, when the target holds any stream row; a count other than
    ``expected`` raises :class:`~statekeeper.errors.BackupCorrupt` (the caller's
    transaction rolls back). ``raise_floor``: the feed's floor through the first event
    of every stream compacted by retention, in the same transaction
    (:func:`_floor_over_bases`)."""
    for table in _TABLES:
        if conn.execute(f"SELECT 1 FROM main.{table} LIMIT 1").fetchone() is not None:
            return False
    (held,) = conn.execute("SELECT count(*) FROM image.sk_events").fetchone()
    stray = stray_row(conn, "sk_events", "image") if held != expected[1] else None
    if stray is not None:  # never copied past: the image is not what the restore checked
        raise BackupCorrupt("store image", *stray)
    trigger = _whole_events(conn, expected[1])
    if trigger is None:
        written = [conn.execute(sql).rowcount for sql in _WRITES]
    else:
        written = [conn.execute(sql).rowcount for sql in _WRITES[:1]]
        written.append(_copy_events(conn, trigger))
        written += [conn.execute(sql).rowcount for sql in _WRITES[2:]]
    _import_keys(conn)
    if tuple(written[:3]) != expected:
        raise BackupCorrupt(
            "store image",
            "streams",
            f"they are not what the restore checked: wrote {written[:3]}"
            f" (agents, events, snapshots), checked {list(expected)}",
        )
    if raise_floor:
        _floor_over_bases(conn)
    return True


#: the newest position of a compacted stream's first event (the target held no stream:
#: every stream is the image's; a deleted agent's older rows of the same id are below)
_FIRST_OF_COMPACTED = """
SELECT max(f.position) FROM main.sk_feed f
JOIN (SELECT agent_id, min(seq) AS first FROM main.sk_events GROUP BY agent_id) c
  ON c.agent_id = f.agent_id AND c.first = f.seq
WHERE c.first > 1
"""


def _floor_over_bases(conn: sqlite3.Connection) -> None:
    """Raise the feed's floor through the first event of each stream written from its
    base (:meth:`~statekeeper.backends.base.Backend.append_from_base` with
    ``raise_floor``, for all of them at once): in the copy's own transaction, so no
    subscriber reads their kept events without the floor over them (the restore's
    trim after the copy left a window where one folded them onto nothing)."""
    (through,) = conn.execute(_FIRST_OF_COMPACTED).fetchone()
    if through is not None:
        trim_feed(conn, int(through))


def stray_row(conn: sqlite3.Connection, table: str, schema: str = "main") -> tuple[str, str] | None:
    """The first row of ``table`` (``sk_events`` or ``sk_snapshots``) of the store file
    ``schema`` outside every stream — its agent without a head (no ``sk_agents`` row,
    or head seq 0), or its seq past its stream's head — as ``(what, reason)`` for
    :class:`~statekeeper.errors.BackupCorrupt`, or None. A consistent store (and so a
    backup's image) holds none: every write of a record moves its head in the same
    transaction, a delete removes every row of the stream. One scan of the table, a
    head looked up per row: a restore runs it when the counts say there is one."""
    row = conn.execute(
        f"SELECT r.agent_id, r.seq, a.head_seq FROM {schema}.{table} r"
        f" LEFT JOIN {schema}.sk_agents a ON a.agent_id = r.agent_id"
        " WHERE a.head_seq IS NULL OR r.seq > a.head_seq ORDER BY r.agent_id, r.seq LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    agent_id, seq, head = row
    return stray_reason("event" if table == "sk_events" else "snapshot", agent_id, seq, head)


def stray_key(conn: sqlite3.Connection, schema: str = "main") -> tuple[str, str] | None:
    """The first idempotency record of the store file ``schema`` outside every stream
    — of an agent without a head, or ending past its head — as ``(what, reason)`` (see
    :func:`stray_row`), or None. A consistent store holds none: every engine's delete
    removes the stream's records with it, and an append's record is written with its
    events. One scan of the table in SQLite, a head looked up per row."""
    row = conn.execute(
        f"SELECT k.agent_id, k.first_seq, a.head_seq FROM {schema}.sk_idempotency k"
        f" LEFT JOIN {schema}.sk_agents a ON a.agent_id = k.agent_id"
        " WHERE a.head_seq IS NULL OR k.last_seq > a.head_seq"
        " ORDER BY k.agent_id, k.first_seq LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    agent_id, seq, head = row
    return stray_reason("idempotency record", agent_id, seq, head)


def stray_reason(
    record: str, agent_id: str, seq: int, head: int | None, after: str = ""
) -> tuple[str, str]:
    """``(what, reason)`` for :class:`~statekeeper.errors.BackupCorrupt` naming a
    ``record`` (``"event"``, ``"snapshot"``, ``"idempotency record"``: ``seq`` its
    first, or ``"head"``) of a backup's image outside every stream: past its
    ``head``, or (``head`` 0 or None) of an agent without one; or (``after``: what
    it came after, see :data:`.export.Stray`) out of order."""
    at = f"{record} seq {seq}" if record != "idempotency record" else f"{record} from seq {seq}"
    if after:
        where = (
            f"after {after}: the rows are out of order (each table in agent id order, then"
            " seq order: its place was before that)"
        )
    elif head:
        where = f"past its head seq {head}"
    else:
        where = "but no head for the agent (no stream)"
    return (
        f"agent {agent_id!r}",
        f"the image holds its {at} {where}: a consistent backup holds none"
        " (the image was edited or the backup is broken); nothing was restored",
    )


#: the change feed's trigger on the events table (:mod:`.feed`), which the events
#: copied whole are given feed rows as it would (see :func:`_copy_events`)
_FEED_TRIGGER = _FEED_SCHEMA[2]
_SAME_ROWS = (
    "SELECT count(*), coalesce(sum(typeof(payload) = 'blob' AND typeof(checksum) = 'blob'), 0)"
    " FROM image.sk_events"
)


def _whole_events(conn: sqlite3.Connection, events: int) -> str | None:
    """The events table's trigger (the change feed's) when the image's events can be
    copied whole (:func:`_copy_events`) and give the rows ``_WRITES`` would, else None:
    the image holds exactly the ``events`` rows the restore checked (no row of another
    stream or past a head: those are a subset of the image's rows, so as many is the
    same rows), every payload and checksum a BLOB (what ``CAST`` would make them), both
    tables declared alike, and the target's only trigger on the table the feed's."""
    if tuple(conn.execute(_SAME_ROWS).fetchone()) != (events, events):
        return None
    ours = conn.execute("PRAGMA main.table_xinfo(sk_events)").fetchall()
    if ours != conn.execute("PRAGMA image.table_xinfo(sk_events)").fetchall():
        return None
    triggers = conn.execute(
        "SELECT name, sql FROM main.sqlite_master WHERE type = 'trigger' AND tbl_name = 'sk_events'"
    ).fetchall()
    if triggers != [("sk_feed_append", _FEED_TRIGGER)]:
        return None
    return _FEED_TRIGGER


def _copy_events(conn: sqlite3.Connection, trigger: str) -> int:
    """The image's events copied whole: ``INSERT INTO t SELECT * FROM image.t`` is
    SQLite's transfer optimization (each row's record copied as it is stored, not
    decoded and encoded again), which a trigger on the table turns off: the feed's is
    dropped for the copy, its rows written after it in the order the trigger would
    have (the rows inserted in id and seq order: positions after the target's last),
    and made again, all in the caller's transaction. 1.36-1.55 against 0.68-0.71 CPU-s
    for 300,000 events (docs/benchmarks.md "restore2")."""
    conn.execute("DROP TRIGGER main.sk_feed_append")
    count: int = conn.execute("INSERT INTO main.sk_events SELECT * FROM image.sk_events").rowcount
    conn.execute(
        "INSERT INTO main.sk_feed (agent_id, seq)"
        " SELECT agent_id, seq FROM main.sk_events ORDER BY agent_id, seq"
    )
    conn.execute(trigger)
    return count
