"""PostgreSQL's expiry of idempotency records (``Backend.expire_keys``, retention's
``keys_ttl``): one ``DELETE`` of the records made before a time (``created_at``,
migration 12), an agent's on its partition or every agent's; a count for a dry run.
Under row-level security a record the role may not delete is filtered away, not
refused: an expiry that left records the role reads is AccessDenied (rolled back).
And their renaming by ``rekey`` (``Backend.rename_keys``): each record's ``UPDATE``
to its new form (``key_rename``) and the old form's ``DELETE`` (``key_drop``), all in
one transaction on the agent's partition; under row-level security a pair that changed
nothing (a role that reads the agent but may not write it: both statements filtered
away) is AccessDenied, rolled back, not a record silently left under its old form.
A mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...records import StreamChange
from ..base import check_expiry, validate_rename_guard
from .absence import absent_in
from .deletes import refusal, row_security_binds
from .part import PostgresPart
from .refusals import row_security_refusal

__all__ = ["KeyExpiry"]


class KeyExpiry(PostgresPart):
    """``expire_keys`` and ``rename_keys`` of :class:`~.backend.PostgresBackend`."""

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
                    if self.audit_links:  # row-level security installed on the schema
                        await self._refused_anywhere(conn, before)
                else:
                    cur = await conn.execute(self._sql["expire_agent_keys"], (agent_id, before))
                    # (nothing to expire is common: asked only where row-level
                    # security is installed, as the backend read when it opened)
                    if cur.rowcount == 0 and self.audit_links:
                        refused = await refusal(self, conn, agent_id, "expire_keys")
                        if refused is not None:
                            raise refused
                return int(cur.rowcount)

        try:
            return await self._retrying("expire_keys", op)
        finally:
            self._wrote()

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Store records under another form of their key, in one transaction (sent
        again after a lost reply, it renames what is left: the count is the second
        try's), the ``guard``'s check and change in it too (see
        :meth:`Backend.rename_keys`; a retry whose first try committed finds its
        fence made: ConflictError naming the guard's stream)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        pairs = list(renames)

        async def op() -> int:
            done, untouched = 0, False
            async with self._connection() as conn, conn.transaction():
                for old, new in pairs:
                    cur = await conn.execute(
                        self._sql["key_rename"], (new, agent_id, old, agent_id, new)
                    )
                    done += cur.rowcount
                    dropped = await conn.execute(self._sql["key_drop"], (agent_id, old))
                    untouched = untouched or cur.rowcount + dropped.rowcount == 0
                # (a pair that matched nothing is common on a rerun: asked only where
                # row-level security is installed, as the backend read when it opened)
                if untouched and self.audit_links:
                    refused = await refusal(self, conn, agent_id, "rekey")
                    if refused is not None:
                        raise refused
                # the guard's check last (ConflictError: rolled back): the agent's rows
                # locked before the other stream's, as a tiered demotion's last step
                # locks them — no deadlock between the two
                if guard is not None and guard.absent:
                    await absent_in(self._sql, conn, [guard.agent_id])
                elif guard is not None:
                    await self._change(conn, guard)
            return done

        try:
            return await self._retrying("rename_keys", op)
        finally:
            self._wrote()

    async def _refused_anywhere(self, conn: Any, before: float) -> None:
        """After expiring every agent's records in ``conn``'s transaction: raise the
        AccessDenied of an agent whose expired records the role reads but row-level
        security kept it from deleting (none are deleted: the transaction rolls back)."""
        if not await row_security_binds(self, conn):
            return
        cur = await conn.execute(self._sql["expired_key_left"], (before,))
        row = await cur.fetchone()
        if row is not None:
            raise row_security_refusal(self.dsn, "expire_keys", str(row[0]))
