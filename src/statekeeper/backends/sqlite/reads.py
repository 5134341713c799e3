"""The read path of :class:`~statekeeper.backends.sqlite.SQLiteBackend`: every read
of streams, heads, snapshots, idempotency keys, agent listings and the change feed.

Reads use the engine's per-thread read connection (``_reader``) and run inline: WAL
readers never wait for the writer, and a point read costs microseconds. Each read is
one statement (or one read transaction), so one consistent view of the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ...arguments import check_stored_id
from ...errors import CapabilityUnsupported
from ...records import (
    AgentInfo,
    AppendResult,
    EventRow,
    FeedRecord,
    RawEvent,
    RawSnapshot,
    make_raw_snapshot,
)
from ..base import LatestRead, prefix_end
from . import feed as sqlite_feed
from .base import SQLitePart, translated

__all__ = ["SQLiteReads", "blob"]

#: the latest snapshot (its row first, kind NULL) and the events after it, one query;
#: CAST as in ``read``: a payload rewritten as TEXT still reads as its bytes
_READ_LATEST = """
WITH snap AS (
    SELECT seq, ts, payload, checksum FROM sk_snapshots
    WHERE agent_id = ? ORDER BY seq DESC LIMIT 1
)
SELECT seq, NULL, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM snap
UNION ALL
SELECT seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_events
WHERE agent_id = ? AND seq > coalesce((SELECT seq FROM snap), 0)
ORDER BY 1
"""
#: (the ORDER BY merges the two arms: the events stream in primary-key order, unsorted)

#: a cold load's one statement (one read transaction, so one consistent view): the
#: head row (seq -2**63, its head seq in the third column), the latest snapshot (kind
#: NULL) and the events after it, each arm a primary-key lookup or range; every row
#: ``(seq, kind, ts, payload, checksum)``, so the event rows are the fold's
#: :data:`EventRow` as the cursor returns them (no object built per event). No ORDER
#: BY: sorting the union costs a temporary B-tree per arm (~30 % of the statement);
#: the rows are put in order in Python (by seq: the head row first, no stored seq
#: below it). No common table for the snapshot either: one used by two arms is
#: materialised (its payload copied into a temporary table and read back), where a
#: subquery is a co-routine and the events' bound a lookup in the covering index
#: (callgrind: 115k instead of 176k instructions per statement for a 33 KB snapshot).
#: The snapshot arm is the row at ``max(seq)`` (two index lookups), not a sub-select
#: ``ORDER BY seq DESC LIMIT 1``: the sub-select's co-routine copied the snapshot's
#: payload once more (``sqlite3VdbeMemGrow``): 8.3 -> 7.4 us per statement (CPU).
_READ_STATE = """
SELECT -9223372036854775808, NULL, head_seq, head_tag, NULL FROM sk_agents WHERE agent_id = ?1
UNION ALL
SELECT seq, NULL, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots
WHERE agent_id = ?1 AND seq = (SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1)
UNION ALL
SELECT seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_events
WHERE agent_id = ?1
    AND seq > coalesce((SELECT max(seq) FROM sk_snapshots WHERE agent_id = ?1), 0)
"""
_HEAD_ROW = -(2**63)
#: the snapshots at two seqs ``?2 <= ?3`` (:meth:`SQLiteReads.snapshots_at_now`), in
#: that order: two primary-key lookups (not ``IN (?2, ?3)``: its list is built into an
#: ephemeral index first, ~20k instructions more a load, callgrind)
_READ_SNAPSHOTS_AT = (
    "SELECT seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots"
    " WHERE agent_id = ?1 AND seq = ?2"
    " UNION ALL"
    " SELECT seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots"
    " WHERE agent_id = ?1 AND seq = ?3 AND ?3 > ?2"
)
#: the snapshots of a range of seqs (:meth:`SQLiteReads.snapshots_now`)
_READ_SNAPSHOTS_FROM = (
    "SELECT seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots"
    " WHERE agent_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq"
)


#: :meth:`SQLiteBackend.read_latest_many` for up to 500 agents in one statement (the
#: ids are ``?1..?N``, used by each arm): per agent its head row (arm 0), its latest
#: snapshot (arm 1) and the events after it (arm 2), each arm driven by the head rows
#: and a primary-key lookup or range. One statement instead of one per agent: measured
#: with benchmarks/bench_schema_callgrind.py (a migration reads its pages this way).
_READ_LATEST_MANY = """
SELECT a.agent_id, 0, a.head_seq, NULL, 0.0, a.head_tag, NULL FROM sk_agents a
WHERE a.agent_id IN ({ids}) AND a.head_seq > 0
UNION ALL
SELECT s.agent_id, 1, s.seq, NULL, s.ts, CAST(s.payload AS BLOB), CAST(s.checksum AS BLOB)
FROM sk_agents a JOIN sk_snapshots s ON s.agent_id = a.agent_id AND s.seq = (
    SELECT m.seq FROM sk_snapshots m WHERE m.agent_id = a.agent_id ORDER BY m.seq DESC LIMIT 1)
WHERE a.agent_id IN ({ids}) AND a.head_seq > 0
UNION ALL
SELECT e.agent_id, 2, e.seq, e.kind, e.ts, CAST(e.payload AS BLOB), CAST(e.checksum AS BLOB)
FROM sk_agents a JOIN sk_events e ON e.agent_id = a.agent_id AND e.seq > coalesce((
    SELECT m.seq FROM sk_snapshots m WHERE m.agent_id = a.agent_id ORDER BY m.seq DESC LIMIT 1), 0)
WHERE a.agent_id IN ({ids}) AND a.head_seq > 0
"""


def blob(value: Any) -> bytes | None:
    """A BLOB column as bytes (a value rewritten by hand as TEXT or a number is kept
    recognisably wrong rather than raising here)."""
    if value is None or type(value) is bytes:
        return value
    return str(value).encode("utf-8", "replace")


#: events of an agent with no head row, or above its head (verify names them)
ORPHANED_EVENTS = (
    "SELECT e.agent_id, min(e.seq), max(e.seq), count(*) FROM sk_events e"
    " LEFT JOIN sk_agents a ON a.agent_id = e.agent_id"
    " WHERE a.agent_id IS NULL OR e.seq > a.head_seq"
    " GROUP BY e.agent_id ORDER BY e.agent_id"
)


class SQLiteReads(SQLitePart):
    """The reads of :class:`~statekeeper.backends.sqlite.SQLiteBackend` (a part of it)."""

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        with translated(self.path, agent_id):
            row = (
                self._reader()
                .execute(
                    "SELECT first_seq, last_seq FROM sk_idempotency WHERE agent_id = ? AND key = ?",
                    (agent_id, key),
                )
                .fetchone()
            )
        return AppendResult(agent_id, row[0], row[1], duplicate=True) if row else None

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        with translated(self.path, agent_id):
            rows = (
                self._reader()
                .execute(
                    "SELECT key, first_seq, last_seq FROM sk_idempotency WHERE agent_id = ?"
                    " ORDER BY first_seq",
                    (agent_id,),
                )
                .fetchall()
            )
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        with translated(self.path):
            return sqlite_feed.read_feed(self._reader(), after, limit)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        with translated(self.path):
            return sqlite_feed.read_feed_page(self._reader(), after, limit)

    async def feed_bounds(self) -> tuple[int, int]:
        with translated(self.path):
            return sqlite_feed.feed_bounds(self._reader())

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        with translated(self.path):
            return sqlite_feed.feed_position(self._reader(), agent_id, seq)

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        with translated(self.path):
            return sqlite_feed.feed_positions(self._reader(), wanted)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        deadline = time.monotonic() + max_wait
        while (await self.feed_bounds())[1] <= after:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, self.feed_poll_interval))

    async def head(self, agent_id: str) -> int:
        with translated(self.path, agent_id):
            row = (
                self._reader()
                .execute("SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,))
                .fetchone()
            )
        return int(row[0]) if row is not None else 0

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        with translated(self.path, agent_id):
            row = (
                self._reader()
                .execute("SELECT head_seq, head_tag FROM sk_agents WHERE agent_id = ?", (agent_id,))
                .fetchone()
            )
        if row is None:
            return 0, None
        return int(row[0]), blob(row[1])

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        sql = (
            # CAST: a payload rewritten as TEXT (by hand, or by an attacker) still reads as
            # its bytes, and fails verification at its own seq instead of breaking the page
            "SELECT seq, kind, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_events"
            " WHERE agent_id = ? AND seq > ?"
        )
        args: list[Any] = [agent_id, after_seq]
        if to_seq is not None:
            sql += " AND seq <= ?"
            args.append(to_seq)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with translated(self.path, agent_id, after_seq + 1):
            rows = self._reader().execute(sql, args).fetchall()
        return [RawEvent(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        with translated(self.path, agent_id):
            row = (
                self._reader()
                .execute(
                    "SELECT max(seq) FROM sk_events WHERE agent_id = ? AND ts <= ?",
                    (agent_id, timestamp),
                )
                .fetchone()
            )
        return int(row[0]) if row and row[0] is not None else 0

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        if at_or_below is None:
            sql = (
                "SELECT seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots"
                " WHERE agent_id = ?"
                " ORDER BY seq DESC LIMIT 1"
            )
            args: tuple[Any, ...] = (agent_id,)
        else:
            sql = (
                "SELECT seq, ts, CAST(payload AS BLOB), CAST(checksum AS BLOB) FROM sk_snapshots"
                " WHERE agent_id = ?"
                " AND seq <= ? ORDER BY seq DESC LIMIT 1"
            )
            args = (agent_id, at_or_below)
        with translated(self.path, agent_id):
            row = self._reader().execute(sql, args).fetchone()
        return RawSnapshot(row[0], row[1], row[2], row[3]) if row is not None else None

    def snapshots_now(self, agent_id: str, first: int, below: int) -> list[RawSnapshot]:
        """The snapshots ``first <= seq < below``, in seq order, as a plain call (a cold
        load at a tail snapshot reads its whole one and the tails between with it:
        store/tails.py), for a caller that checked ``agent_id``."""
        try:
            # (fetchall: the kept cursor's statement is run to its end, no read left open)
            rows = (
                self._read_cursor()
                .execute(_READ_SNAPSHOTS_FROM, (agent_id, first, below))
                .fetchall()
            )
        except sqlite3.Error:
            with translated(self.path, agent_id):
                raise
        return [make_raw_snapshot(r[0], r[1], r[2], r[3]) for r in rows]

    def snapshots_at_now(self, agent_id: str, first: int, second: int) -> list[RawSnapshot]:
        """The snapshots at ``first`` and ``second >= first`` (those stored), in seq
        order, as a plain call: a cold load at a tail snapshot reads its whole one and its base with
        it (store/tails.py), for a caller that checked ``agent_id``."""
        try:
            rows = (
                self._read_cursor()
                .execute(_READ_SNAPSHOTS_AT, (agent_id, first, second))
                .fetchall()
            )
        except sqlite3.Error:
            with translated(self.path, agent_id):
                raise
        return [make_raw_snapshot(r[0], r[1], r[2], r[3]) for r in rows]

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        # One statement, so one consistent read: the newest snapshot (kind NULL marks
        # its row) and every event after it, through the two primary keys.
        with translated(self.path, agent_id):
            rows = self._reader().execute(_READ_LATEST, (agent_id, agent_id)).fetchall()
        snap: RawSnapshot | None = None
        if rows and rows[0][1] is None:
            first = rows.pop(0)
            snap = RawSnapshot(first[0], first[2], first[3], first[4])
        return snap, [RawEvent(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        head, tag, snap, rows = await self.read_state_rows(agent_id)
        return head, tag, snap, [RawEvent(*row) for row in rows]

    async def read_state_rows(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[EventRow]]:
        """:meth:`read_state` with the events as the cursor's rows (:data:`EventRow`)."""
        return self.state_rows_now(agent_id)

    def state_rows_now(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[EventRow]]:
        """:meth:`read_state_rows` as a plain call, for a caller that checked
        ``agent_id`` (``check_stored_id``) already: the store's read path on every cold
        load (a SQLite read runs inline, so the coroutine, the wrapper and the second
        check of the id were all the method added; docs/benchmarks.md, "cold0")."""
        # One statement: the head, the newest snapshot and the events after it, as one
        # consistent read (everything is at or below the head it returns).
        try:
            rows = self._rows(_READ_STATE, (agent_id,))
        except sqlite3.Error:
            with translated(self.path, agent_id):  # (no context manager on the way in)
                raise
        # (not contextlib.suppress: its object and two calls are ~3k instructions a load)
        try:  # noqa: SIM105
            rows.sort()  # (seq): a C pass over rows already in that order
        except TypeError:  # (a seq rewritten as text: the fold says so)
            pass
        if not rows:
            return 0, None, None, []  # no head row: no stream
        first = rows[0]
        if first[0] != _HEAD_ROW or not first[2]:
            return 0, None, None, []
        tag = first[3]
        if tag is not None and type(tag) is not bytes:
            tag = blob(tag)
        if len(rows) > 1 and rows[1][1] is None:
            r = rows[1]
            del rows[:2]
            return int(first[2]), tag, make_raw_snapshot(r[0], r[2], r[3], r[4]), rows
        del rows[0]
        return int(first[2]), tag, None, rows

    reads_latest_many = True

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        # one read transaction: every head and every latest state of the call come from
        # the same consistent read of the database (a concurrent append is in all or none)
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        found: dict[str, LatestRead] = {}
        heads: dict[str, tuple[int, bytes | None]] = {}
        snaps: dict[str, RawSnapshot] = {}
        events: dict[str, list[RawEvent]] = {}
        with translated(self.path):
            reader = self._reader()
            reader.execute("BEGIN")
            try:
                for start in range(0, len(agent_ids), 500):
                    chunk = list(agent_ids[start : start + 500])
                    marks = ",".join(f"?{i}" for i in range(1, len(chunk) + 1))
                    rows = reader.execute(_READ_LATEST_MANY.format(ids=marks), chunk).fetchall()
                    with contextlib.suppress(TypeError):  # (a seq rewritten as text)
                        rows.sort()  # (agent, arm, seq): the arms come out nearly in order
                    for r in rows:  # (grouped by agent id: the order only within one)
                        arm = r[1]
                        if arm == 0:
                            heads[r[0]] = (int(r[2]), blob(r[5]))
                        elif arm == 1:
                            snaps[r[0]] = RawSnapshot(r[2], r[4], r[5], r[6])
                        else:
                            events.setdefault(r[0], []).append(
                                RawEvent(r[2], r[3], r[4], r[5], r[6])
                            )
            finally:
                reader.execute("COMMIT")
        for agent_id, (head, tag) in heads.items():
            found[agent_id] = LatestRead(head, tag, snaps.get(agent_id), events.get(agent_id, []))
        return [found.get(agent_id) for agent_id in agent_ids]

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        with translated(self.path):
            rows = (
                self._reader()
                .execute(
                    "SELECT agent_id, head_seq, created_at, updated_at FROM sk_agents"
                    " WHERE agent_id > ? ORDER BY agent_id LIMIT ?",
                    (after if after is not None else "", limit),
                )
                .fetchall()
            )
        return [AgentInfo(r[0], r[1], r[2], r[3]) for r in rows]

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        found: dict[str, RawEvent] = {}
        with translated(self.path):
            for start in range(0, len(agent_ids), 500):
                chunk = list(agent_ids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._rows(
                    "SELECT e.agent_id, e.seq, e.kind, e.ts, CAST(e.payload AS BLOB),"
                    " CAST(e.checksum AS BLOB) FROM sk_agents a JOIN sk_events e"
                    " ON e.agent_id = a.agent_id AND e.seq = a.head_seq"
                    f" WHERE a.agent_id IN ({marks})",
                    chunk,
                )
                for r in rows:
                    found[r[0]] = RawEvent(r[1], r[2], r[3], r[4], r[5])
        return [found.get(agent_id) for agent_id in agent_ids]

    async def stream_bases(self, agent_ids: Sequence[str]) -> list[int]:
        """One statement per page of agents (the first seq of each, on the events'
        primary key)."""
        out: list[int] = []
        with translated(self.path):
            reader = self._reader()
            for start in range(0, len(agent_ids), 500):
                page = agent_ids[start : start + 500]
                for agent_id in page:
                    check_stored_id(agent_id)
                marks = ",".join("?" * len(page))
                firsts = dict(
                    reader.execute(
                        "SELECT agent_id, min(seq) FROM sk_events"
                        f" WHERE agent_id IN ({marks}) GROUP BY agent_id",
                        page,
                    ).fetchall()
                )
                out += [max(firsts.get(a, 1) - 1, 0) for a in page]
        return out

    @property
    def lists_by_write(self) -> bool:  # type: ignore[override]
        """True once the file has its last-write index (a file written by an older
        statekeeper gets it the next time it is opened for writing)."""
        known: bool | None = getattr(self, "_by_write", None)
        if known is None:
            with translated(self.path):
                rows = self._rows(
                    "SELECT 1 FROM sqlite_master WHERE type = 'index'"
                    " AND name = 'sk_agents_written'"
                )
            known = self._by_write = bool(rows)
        return known

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        if not self.lists_by_write:
            raise CapabilityUnsupported(
                self.name,
                "listing agents by last write",
                "this file has no last-write index yet: open it once for writing",
            )
        if self._as_created():  # (no agent in it, nothing committed since)
            return []
        order = "DESC" if newest_first else "ASC"
        sql = "SELECT agent_id, head_seq, created_at, updated_at FROM sk_agents"
        args: list[Any] = []
        if cursor is not None:
            sql += f" WHERE (updated_at, agent_id) {'<' if newest_first else '>'} (?, ?)"
            args += [float(cursor[0]), cursor[1]]
        sql += f" ORDER BY updated_at {order}, agent_id {order} LIMIT ?"
        args.append(limit)
        with translated(self.path):
            rows = self._rows(sql, args)
        return [AgentInfo(r[0], r[1], r[2], r[3]) for r in rows]

    lists_backwards = True

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        with translated(self.path):
            if before is None:
                cur = self._reader().execute(
                    "SELECT agent_id, head_seq, created_at, updated_at FROM sk_agents"
                    " ORDER BY agent_id DESC LIMIT ?",
                    (limit,),
                )
            else:
                cur = self._reader().execute(
                    "SELECT agent_id, head_seq, created_at, updated_at FROM sk_agents"
                    " WHERE agent_id < ? ORDER BY agent_id DESC LIMIT ?",
                    (before, limit),
                )
            rows = cur.fetchall()
        return [AgentInfo(r[0], r[1], r[2], r[3]) for r in rows]

    async def count_agents(self) -> int:
        with translated(self.path):
            row = self._reader().execute("SELECT count(*) FROM sk_agents").fetchone()
        return int(row[0])

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        with translated(self.path):
            rows = self._reader().execute(ORPHANED_EVENTS).fetchall()
        return [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def count_prefix(self, prefix: str) -> int:
        if not prefix:
            return await self.count_agents()
        # a range of the primary key (BINARY collation: byte order), not a scan
        with translated(self.path):
            row = (
                self._reader()
                .execute(
                    "SELECT count(*) FROM sk_agents WHERE agent_id >= ? AND agent_id < ?",
                    (prefix, prefix_end(prefix)),
                )
                .fetchone()
            )
        return int(row[0])
