"""Leases of :class:`~statekeeper.backends.sqlite.SQLiteBackend`.

Leases live in ``sk_leases`` (one row per agent, never deleted, so a fencing token
never goes back). Acquiring is one conditional upsert; a fenced append checks the lease
row inside its own ``BEGIN IMMEDIATE`` transaction (the engine's appends call
:meth:`SQLiteLeases._lease_row`; ``append_together`` :meth:`SQLiteLeases._lease_change`),
so the token check and the write are one atomic step. Expiry is measured on the
backend's ``clock``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import LeaseHeld, LeaseLost
from ...records import LeaseChange, LeaseInfo
from ..base import check_fence, check_lease_grant, released_with, validate_ttl
from .base import Executes, SQLitePart, translated

__all__ = ["SQLiteLeases"]


class SQLiteLeases(SQLitePart):
    """The leases of :class:`~statekeeper.backends.sqlite.SQLiteBackend` (a part of it)."""

    @staticmethod
    def _lease_row(conn: Executes, agent_id: str) -> LeaseInfo | None:
        row = conn.execute(
            "SELECT holder, token, expires_at FROM sk_leases WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2])) if row else None

    def _lease_sync(self, op: str, agent_id: str, holder: str, token: int, ttl: float) -> Any:
        with self._writing(agent_id) as conn:
            result = self._lease_op(conn, op, agent_id, holder, token, ttl)
        return result

    def _lease_op(
        self, conn: sqlite3.Connection, op: str, agent_id: str, holder: str, token: int, ttl: float
    ) -> Any:
        now = self.clock()
        if op == "acquire":
            # ONE conditional write: take the lease iff free, expired or already ours
            row = conn.execute(
                "INSERT INTO sk_leases(agent_id, holder, token, expires_at) VALUES (?, ?, 1, ?)"
                " ON CONFLICT(agent_id) DO UPDATE SET holder = excluded.holder,"
                " token = sk_leases.token + 1, expires_at = excluded.expires_at"
                " WHERE sk_leases.holder IS NULL OR sk_leases.expires_at <= ?"
                " OR sk_leases.holder = excluded.holder"
                " RETURNING token",
                (agent_id, holder, now + ttl, now),
            ).fetchone()
            if row is None:
                current = self._lease_row(conn, agent_id)
                assert current is not None and current.holder is not None
                raise LeaseHeld(agent_id, current.holder, current.expires_at)
            return LeaseInfo(agent_id, holder, int(row[0]), now + ttl)
        current = self._lease_row(conn, agent_id)
        if op in ("release", "release-again"):
            try:
                check_fence(agent_id, (holder, token), current)
            except LeaseLost:
                # sent again: the first try may have released it (see release_lease_again)
                return op == "release-again" and released_with(current, token)
            conn.execute(
                "UPDATE sk_leases SET holder = NULL, expires_at = 0 WHERE agent_id = ?",
                (agent_id,),
            )
            return True
        check_fence(agent_id, (holder, token), current)  # renew
        conn.execute(
            "UPDATE sk_leases SET expires_at = ? WHERE agent_id = ?", (now + ttl, agent_id)
        )
        return LeaseInfo(agent_id, holder, token, now + ttl)

    def _lease_change(self, conn: sqlite3.Connection, agent_id: str, lease: LeaseChange) -> None:
        """A lease grant or release of ``append_together`` in the caller's transaction
        (``BEGIN IMMEDIATE``: nobody writes the row between the check and the write)."""
        current = self._lease_row(conn, agent_id)
        if lease.ttl is None:
            check_fence(agent_id, (lease.holder, lease.token), current)
            conn.execute(
                "UPDATE sk_leases SET holder = NULL, expires_at = 0 WHERE agent_id = ?",
                (agent_id,),
            )
            return
        now = self.clock()
        check_lease_grant(agent_id, lease, current, now)
        conn.execute(
            "INSERT INTO sk_leases(agent_id, holder, token, expires_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(agent_id) DO UPDATE SET holder = excluded.holder,"
            " token = excluded.token, expires_at = excluded.expires_at",
            (agent_id, lease.holder, lease.token, now + lease.ttl),
        )

    def _carry_sync(self, tokens: Sequence[tuple[str, int]]) -> None:
        with self._writing() as conn:
            conn.executemany(
                "INSERT INTO sk_leases(agent_id, holder, token, expires_at) VALUES (?, NULL, ?, 0)"
                " ON CONFLICT(agent_id) DO UPDATE SET holder = NULL, token = excluded.token,"
                " expires_at = 0 WHERE sk_leases.token < excluded.token",
                list(tokens),
            )

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        if tokens:
            await self._write(self._carry_sync, list(tokens))

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        with translated(self.path):
            rows = (
                self._reader()
                .execute(
                    "SELECT agent_id, holder, token, expires_at FROM sk_leases"
                    " WHERE agent_id > ? ORDER BY agent_id LIMIT ?",
                    (after, max(limit, 0)),
                )
                .fetchall()
            )
        return [LeaseInfo(r[0], r[1], int(r[2]), float(r[3])) for r in rows]

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        ttl = validate_ttl(ttl)
        lease: LeaseInfo = await self._write(self._lease_sync, "acquire", agent_id, holder, 0, ttl)
        return lease

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        ttl = validate_ttl(ttl)
        lease: LeaseInfo = await self._write(
            self._lease_sync, "renew", agent_id, holder, token, ttl
        )
        return lease

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        released: bool = await self._write(
            self._lease_sync, "release", agent_id, holder, token, 0.0
        )
        return released

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        released: bool = await self._write(
            self._lease_sync, "release-again", agent_id, holder, token, 0.0
        )
        return released

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        with translated(self.path, agent_id):
            return self._lease_row(self._reader(), agent_id)
