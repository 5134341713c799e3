"""The PostgreSQL backend's store-level markers (``sk_markers``, migration 9; see
``Backend.read_marker``). A mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

from .part import PostgresPart

__all__ = ["Markers"]


class Markers(PostgresPart):
    """Store-level markers of :class:`~.backend.PostgresBackend`."""

    async def read_marker(self, name: str) -> bool | None:
        """Whether the marker ``name`` is set (read on the primary: a replica may lag
        behind the write that set it)."""
        self._check_open()
        return bool(await self._primary_query("marker_read", (name,)))

    async def set_marker(self, name: str) -> None:
        """Set the marker ``name`` (committed when this returns; setting it again is
        nothing). Under row-level security only the roles whose work sets it (a writer
        "encrypted", an admin of every namespace "legal-holds": sql/row_security.sql);
        another role's is refused (:class:`~statekeeper.errors.AccessDenied`)."""
        self._check_writable()
        self._check_open()
        query = self._sql["marker_set"]

        async def op() -> None:
            async with self._connection() as conn:
                await conn.execute(query, (name,))

        await self._retrying("set_marker", op)
        self._wrote()
