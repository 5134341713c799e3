"""The PostgreSQL backend's leases: one row per agent in ``sk_leases``, expiry on the
server's clock, tokens that only grow. A mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import (
    LeaseHeld,
)
from ...records import (
    LeaseInfo,
)
from ..base import lease_lost, validate_ttl
from .deletes import refusal
from .part import PostgresPart

__all__ = ["Leases"]


class Leases(PostgresPart):
    """Leases of :class:`~.backend.PostgresBackend`."""

    #: the floor of the server's WAL timeline as last read (see next_lease_token)
    _lease_floor = 0

    # One row per agent in sk_leases, never deleted (tokens only grow, also across
    # delete_agent). Expiry is on the database server's clock. A fenced append locks
    # the row FOR SHARE while it checks the fence, so no grant slips in before it commits.

    async def _lease_row(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        query = self._sql[name]

        async def op() -> tuple[Any, ...] | None:
            async with self._connection() as conn:
                cur = await conn.execute(query, params)
                row: tuple[Any, ...] | None = await cur.fetchone()
                if row is None and name == "lease_renew":  # filtered by row-level security?
                    refused = await refusal(self, conn, params["agent"], "lease")
                    if refused is not None:
                        raise refused
            return row

        return await self._retrying(f"{name} of {params['agent']!r}", op)

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        params = {"agent": agent_id, "holder": holder, "ttl": ttl}
        row = await self._lease_row("lease_acquire", params)
        if row is not None:
            # the new holder reads the agent as the previous one left it: what was
            # committed before the grant, not a lagging replica's older state (its
            # loads then showed the agent from before the previous holder's work)
            self._wrote()
            return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))
        current = await self.get_lease(agent_id)
        if current is None or current.holder is None:  # released meanwhile: try again
            return await self.acquire_lease(agent_id, holder, ttl)
        raise LeaseHeld(agent_id, current.holder, current.expires_at)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        params = {"agent": agent_id, "holder": holder, "token": token, "ttl": ttl}
        row = await self._lease_row("lease_renew", params)
        if row is not None:
            return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))
        current = await self.get_lease(agent_id)
        raise lease_lost(agent_id, holder, token, current)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 0)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 1)

    async def _release_lease(self, agent_id: str, holder: str, token: int, tries: int) -> bool:
        """``tries``: 1 when an earlier call's try may have released the lease."""
        self._check_can_write()
        params = {"agent": agent_id, "holder": holder, "token": token}
        first, again = self._sql["lease_release"], self._sql["lease_release_again"]

        async def op() -> tuple[Any, ...] | None:
            # a try after a failed one may follow a release that committed but whose
            # reply was lost: it runs lease_release_again, which also answers the lease
            # released with this token (else: "not the current lease", for its own release)
            nonlocal tries
            tries += 1
            async with self._connection() as conn:
                cur = await conn.execute(first if tries == 1 else again, params)
                row: tuple[Any, ...] | None = await cur.fetchone()
                if row is None:  # not the current lease, or filtered by row-level security
                    refused = await refusal(self, conn, agent_id, "lease")
                    if refused is not None:
                        raise refused
            return row

        return await self._retrying("lease_release", op) is not None

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        self._check_can_write()
        if not tokens:
            return
        query = self._sql["lease_carry"]
        params = {"agents": [a for a, _ in tokens], "tokens": [t for _, t in tokens]}

        async def op() -> None:
            async with self._connection() as conn:
                await conn.execute(query, params)

        await self._retrying("lease_carry", op)

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        self._check_open()
        query = self._sql["lease_list"]
        params = {"after": after, "limit": max(limit, 0)}

        async def op() -> list[tuple[Any, ...]]:
            async with self._connection() as conn:
                cur = await conn.execute(query, params)
                rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

        rows = await self._retrying("lease_list", op)
        return [LeaseInfo(r[0], r[1], int(r[2]), float(r[3])) for r in rows]

    async def next_lease_token(self, agent_id: str, current: LeaseInfo | None) -> int:
        # the stored token plus one, at least the floor of the server's WAL timeline
        # (queries.sql lease_next): after a failover, past every token the old
        # timeline gave, also one whose grant the promoted standby never received. The
        # floor is the one last read: a grant naming a token below the server's is
        # refused (lease_put), which reads it again (Appends._lease_in), and the
        # caller looks again: no round trip per grant
        stored = current.token if current is not None else 0
        return max(stored + 1, self._lease_floor)

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        self._check_open()
        row = await self._lease_row("lease_get", {"agent": agent_id})
        if row is None:
            return None
        return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))
