"""What a write makes beside an append, in the caller's transaction: a stream change
(a conditional delete, prune or lease step: ``StreamChange``), a snapshot row, and a
stream started again from a base snapshot."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

from ...errors import ConflictError, ReadOnlyStore
from ...records import AppendRequest, AppendResult, RawSnapshot, StreamChange
from ..base import KeptKeys, check_prune_at, validate_from_base, validate_from_base_guard
from . import feed as sqlite_feed
from .appends import _bind
from .engine import SQLiteEngine, _Executes


class SQLiteChanges(SQLiteEngine):
    """Stream changes, snapshots and streams from a base."""

    @staticmethod
    def _put_snapshot(conn: _Executes, agent_id: str, snap: RawSnapshot) -> None:
        """Store ``snap`` (its BLOBs bound as ``bytearray``: see :meth:`_append_row`)."""
        conn.execute(
            "INSERT OR REPLACE INTO sk_snapshots(agent_id, seq, ts, payload, checksum)"
            " VALUES (?, ?, ?, ?, ?)",
            (agent_id, snap.seq, snap.timestamp, _bind(snap.payload), _bind(snap.checksum)),
        )

    def _change(self, conn: sqlite3.Connection, change: StreamChange) -> None:
        """Make ``change`` inside the caller's transaction (ConflictError: nothing of
        it written; the caller rolls back)."""
        agent_id = change.agent_id
        if change.lease is not None:
            self._lease_change(conn, agent_id, change.lease)
            return
        if change.rewrite is not None:
            if not self._rewrite_one(conn, change.rewrite):
                row = conn.execute(
                    "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
                ).fetchone()
                raise ConflictError(agent_id, change.rewrite.expected_seq, row[0] if row else 0)
            return
        row = conn.execute(
            "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        head = row[0] if row else 0
        if change.absent:  # (the writer's transaction: no append can come between)
            if head:
                raise ConflictError(agent_id, 0, head)
            return
        if change.delete_at is None:
            if change.prune_head is not None:  # the stream planned on (same transaction)
                check_prune_at(
                    agent_id,
                    head,
                    change.prune_head,
                    change.prune_checksum,
                    lambda: self._checksum_in(conn, agent_id, head),
                )
            if change.snapshot is not None:
                if not 0 < change.snapshot.seq <= head:
                    raise ConflictError(agent_id, change.snapshot.seq, head)
                self._put_snapshot(conn, agent_id, change.snapshot)
            if change.prune_to is not None:
                self._prune_rows(conn, agent_id, head, change.prune_to, change.drop_snapshots)
            return
        if head != change.delete_at:
            raise ConflictError(agent_id, change.delete_at, head)
        if (  # the head record's identity, same transaction
            change.delete_checksum is not None
            and self._checksum_in(conn, agent_id, head) != change.delete_checksum
        ):
            raise ConflictError(agent_id, head, head)
        self._delete_rows(conn, agent_id)

    @staticmethod
    def _checksum_in(conn: _Executes, agent_id: str, seq: int) -> bytes | None:
        """The stored checksum of ``agent_id``'s event at ``seq`` (None: no such event),
        read in the caller's transaction."""
        found = conn.execute(
            "SELECT checksum FROM sk_events WHERE agent_id = ? AND seq = ?", (agent_id, seq)
        ).fetchone()
        return bytes(found[0]) if found is not None else None

    @staticmethod
    def _delete_rows(conn: _Executes, agent_id: str) -> bool:
        """Delete the agent's rows in the caller's transaction; True if it had a head."""
        existed = conn.execute("DELETE FROM sk_agents WHERE agent_id = ?", (agent_id,)).rowcount > 0
        for table in ("sk_events", "sk_snapshots", "sk_idempotency"):
            conn.execute(f"DELETE FROM {table} WHERE agent_id = ?", (agent_id,))
        return existed

    def _save_snapshot_sync(self, agent_id: str, snapshot: RawSnapshot) -> None:
        with self._writing(agent_id) as conn:
            row = conn.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            head = row[0] if row else 0
            if not 0 < snapshot.seq <= head:
                raise ConflictError(agent_id, snapshot.seq, head)
            self._put_snapshot(conn, agent_id, snapshot)

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await self._write(self._save_snapshot_sync, agent_id, snapshot)

    def _from_base_sync(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys,
        raise_floor: bool,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        with self._writing(request.agent_id) as conn:
            if guard is not None:  # (ConflictError: the transaction rolled back)
                self._change(conn, guard)
            # a new stream's head claimed (refused if the agent exists), its events
            # from base + 1, then its base snapshot: one transaction
            result = self._append_one(conn, dataclasses.replace(request, expected_seq=0))
            self._put_snapshot(conn, request.agent_id, base)
            now = time.time()  # (kept records: stored now, their appends gone)
            conn.executemany(
                "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(request.agent_id, name, first, last, now) for name, first, last in kept_keys],
            )
            if raise_floor:  # in the same transaction (Backend.append_from_base)
                first = sqlite_feed.feed_position(conn, request.agent_id, base.seq + 1)
                if first is not None:
                    sqlite_feed.trim_feed(conn, first)
        return result

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        kept = tuple(kept_keys)
        result: AppendResult = await self._write(
            self._from_base_sync, request, base, kept, raise_floor, guard
        )
        return result
