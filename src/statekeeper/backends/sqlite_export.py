"""The SQLite backend's export for backups: the records of many streams as plain
tuples (:class:`~statekeeper.records.StreamRows`), a few statements per page of agents.

Whole streams (what a full backup reads) are one range scan per table over the page's
ids in key order, rows grouped as they come: no per-agent lookup, no object per record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..records import EventRow, SnapshotRow, StreamRows

__all__ = ["export_slices", "export_whole"]


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
