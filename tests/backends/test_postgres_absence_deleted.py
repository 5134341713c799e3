"""An absence check (``StreamChange(absent=True)``) on PostgreSQL whose agent is deleted
between its claim and its head read still holds the agent's head row.

The check inserts a head row of 0 (``absent_claim``, nothing when the agent's row is
there) and, when that inserted nothing, reads the head ``FOR UPDATE`` (``absent_heads``).
A delete of the agent committed between the two statements left no row to read: the
check passed holding nothing, so a creation of the agent committed before the check's
transaction did not wait — its events could take feed positions before the import's
tombstone, which then followed a live agent's events (every subscriber dropped it, no
error). The claim is made again when the row is gone.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.absence import CLAIMS, absent_in
from statekeeper.errors import BackendError
from statekeeper.testing import request

from ._services import POSTGRES_DSN


class _DeleteAfterClaim:
    """A connection that lets another session delete the agent right after the claim."""

    def __init__(self, conn: Any, claim: bytes, delete: Any) -> None:
        self._conn, self._claim, self._delete = conn, claim, delete

    async def execute(self, query: Any, params: Any = None) -> Any:
        cur = await self._conn.execute(query, params)
        if query == self._claim:
            await self._delete()
        return cur


async def test_a_check_still_holds_the_row_of_an_agent_deleted_after_its_claim(
    schema: str,
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append(request("a", 0, 2))
        sql = backend._sql
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as importer,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as other,
        ):

            async def delete() -> None:
                await backend.delete_agent("a")

            await absent_in(sql, _DeleteAfterClaim(importer, sql["absent_claim"], delete), ["a"])
            # the check's transaction is still open: a creation of "a" must wait for it
            await other.execute("SET lock_timeout = '200ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await other.execute(
                    f'INSERT INTO "{schema}".sk_agents (agent_id, head_seq, created_at,'
                    " updated_at) VALUES ('a', 1, 0, 0) ON CONFLICT (agent_id) DO NOTHING"
                )
            await importer.rollback()
        assert await backend.head("a") == 0
    finally:
        await backend.close()


class _Flapping:
    """A connection around which another session deletes the agent after each claim and
    creates it again after each head read: the check never finds it claimable nor there."""

    def __init__(self, conn: Any, sql: Any, delete: Any, create: Any) -> None:
        self._conn, self._sql, self._delete, self._create = conn, sql, delete, create
        self.claims = 0

    async def execute(self, query: Any, params: Any = None) -> Any:
        cur = await self._conn.execute(query, params)
        if query == self._sql["absent_claim"]:
            self.claims += 1
            await self._delete()
        elif query == self._sql["absent_heads"]:
            await self._create()
        return cur


@pytest.mark.timeout(120)  # (a safety net only: before the fix the check claimed for ever)
async def test_a_check_whose_agent_is_created_and_deleted_over_and_over_gives_up_typed(
    schema: str,
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append(request("a", 0, 2))
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN) as importer:

            async def create() -> None:
                await backend.append(request("a", 0, 2))

            async def delete() -> None:
                await backend.delete_agent("a")

            conn = _Flapping(importer, backend._sql, delete, create)
            with pytest.raises(BackendError, match=r"absence check of agent 'a' gave up") as err:
                await absent_in(backend._sql, conn, ["a"])
            assert not err.value.maybe_applied
            assert conn.claims == CLAIMS
            await importer.rollback()
        assert await backend.head("a") == 2  # the other writer's agent, untouched
    finally:
        await backend.close()
