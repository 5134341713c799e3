"""The PostgreSQL backend's writes that remove records: ``prune`` (history below a
snapshot) and the deletes of an agent (:mod:`.deletes` does the work). A mixin of
:class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import ConfigurationError
from .deletes import delete, delete_at
from .part import PostgresPart

__all__ = ["Removals"]


class Removals(PostgresPart):
    """Prunes and deletes of :class:`~.backend.PostgresBackend`."""

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history below a snapshot in one transaction (the head row locked
        ``FOR UPDATE``, the head event's checksum compared under that lock); a retry
        after a lost commit finds nothing left to remove."""
        self._check_can_write()

        async def op() -> None:
            async with self._connection() as conn, conn.transaction():
                await self._prune_in(conn, agent_id, base_seq, drop_snapshots, head, checksum)

        await self._retrying("prune", op)
        self._wrote()

    async def delete_agent(self, agent_id: str) -> bool:
        self._check_writable()

        try:  # (its answer exact when sent again after a lost reply: see .deletes)
            return await delete(self, agent_id)
        finally:
            self._wrote()

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """The delete conditional on the head (:meth:`Backend.delete_agent_at`): the
        head's row deleted only at ``head`` (and, with ``checksum``, only while the head
        event's stored checksum is that one: the same statement), then the rest, in one
        transaction."""
        self._check_writable()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")

        try:  # (exact when sent again after a lost reply: see .deletes)
            return await delete_at(self, agent_id, head, checksum)
        finally:
            self._wrote()
