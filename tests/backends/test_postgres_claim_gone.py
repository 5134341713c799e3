"""PostgreSQL: a creation that finds a committed head row at 0 (a claim a failed write
left, no stream) and takes it over creates the stream even when that row is deleted
between its insert and its take-over.

``sk_append`` creating a stream inserts its head row (``ON CONFLICT DO NOTHING``: no
lock on the row found) and, finding one, takes a row at 0 over with an ``UPDATE``. A
delete of that row (a role's own claim removed: row security lets a role delete the
head rows at 0 of what it may write, migration 22, the audit log's and its namespace's
tombstone stream's too) committing between the two left the ``UPDATE`` nothing: the
creation failed with ``ConflictError`` "expected head seq 0, stored head is 0" for a
stream that was never there. Now it inserts the row again (migration 23).

Deterministic: a session holds the row at 0 ``FOR UPDATE`` (a lock the insert does not
wait on, the take-over does), deletes it once the creation waits on it, and commits.
"""

from __future__ import annotations

import asyncio
import dataclasses

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.records import AppendResult
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_together_lock_order import _waiting_on


@pytest.mark.parametrize("fenced", [False, True], ids=["plain", "fenced"])
async def test_a_creation_whose_head_row_at_0_is_deleted_meanwhile_creates(
    schema: str, fenced: bool
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        new = request("x", 0)
        if fenced:
            lease = await backend.acquire_lease("x", "me", 60.0)
            assert lease is not None
            new = dataclasses.replace(new, fence=("me", lease.token))
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            await watch.execute(  # a claim a failed write left: committed, at 0
                f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
                " VALUES ('x', 0, 0, 0)"
            )
            await other.execute(f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = 'x' FOR UPDATE")
            creation = asyncio.ensure_future(backend.append(new))
            await _waiting_on(watch, other.info.backend_pid)  # (its take-over waits)
            await other.execute(f"DELETE FROM {s}.sk_agents WHERE agent_id = 'x'")
            await other.commit()
            result = await asyncio.wait_for(creation, timeout=60)
        assert result == AppendResult("x", 1, 1)  # (was: ConflictError, stored head 0)
        assert await backend.head("x") == 1
        assert [e.seq for e in await backend.read("x")] == [1]
    finally:
        await backend.close()
