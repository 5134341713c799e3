"""PostgreSQL's expiry of idempotency records (``Backend.expire_keys``, retention's
``keys_ttl``): one ``DELETE`` of the records made before a time (``created_at``,
migration 12), an agent's on its partition or every agent's; a count for a dry run.
A mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from ..base import check_expiry
from .part import PostgresPart

__all__ = ["KeyExpiry"]


class KeyExpiry(PostgresPart):
    """``expire_keys`` of :class:`~.backend.PostgresBackend`."""

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Forget the idempotency records made before ``before`` (one statement; sent
        again after a lost reply, it deletes what is still older: the count is then
        the second try's)."""
        before = check_expiry(agent_id, before)
        if count_only:
            name, args = "count_expired_keys", (agent_id, agent_id, before)
            async with self._connection() as conn:
                cur = await conn.execute(self._sql[name], args)
                row = await cur.fetchone()
            return int(row[0]) if row is not None else 0
        self._check_can_write()

        async def op() -> int:
            async with self._connection() as conn, conn.transaction():
                if agent_id is None:
                    cur = await conn.execute(self._sql["expire_keys"], (before,))
                else:
                    cur = await conn.execute(self._sql["expire_agent_keys"], (agent_id, before))
                return int(cur.rowcount)

        try:
            return await self._retrying("expire_keys", op)
        finally:
            self._wrote()
