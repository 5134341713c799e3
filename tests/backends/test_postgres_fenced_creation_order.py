"""PostgreSQL: a fenced append creating a stream (``sk_append``) claims its head row
before it reads its lease, the order of every write since migration 20 (claims, then
leases, then heads), so it never deadlocks with an ``append_together`` that claims the
same new agent and then locks its lease.

``sk_append`` read the fence's lease ``FOR SHARE`` first and inserted the head row
after; an ``append_together`` with a change (two agents: its locks, ``together_locks``)
creating the same agent under the same lease claims the head row first, then locks the
lease ``FOR NO KEY UPDATE``: the append held the lease and waited on the claim, the
together held the claim and waited on the lease, a deadlock (PostgreSQL aborting one
after ``deadlock_timeout``). The interleaving is made deterministic with a third session
holding the lease row (as a lease renewal does) that the append waits on first; never a
sleep, and the library's runs again are turned off so a deadlock is seen.
"""

from __future__ import annotations

import asyncio
import dataclasses

import psycopg
import pytest

import statekeeper.backends.postgres.appends as appends
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult, StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_together_lock_order import _waiting_on


async def _another_waits(watch: psycopg.AsyncConnection, first: int, *holders: int) -> None:
    """Until a session other than ``first`` waits on a lock one of ``holders`` (or
    ``first``) holds (polled: the condition, not a duration; bounded)."""
    for _ in range(6000):
        cur = await watch.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid <> %s AND pg_blocking_pids(pid) && %s::int[]",
            (first, [first, *holders]),
        )
        if await cur.fetchone() is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no other session waited on session {first} or {holders}")


async def test_a_fenced_creation_claims_before_its_lease(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced creation of ``x`` (waiting on ``x``'s lease row, a renewal holding it)
    and a delete of ``y`` creating ``x`` under the same fence: the delete claimed ``x``,
    then waited on the lease; released, the append read the lease first, then waited on
    the claim: a deadlock. Now the append claims ``x`` first: the delete waits on that
    claim holding nothing, then finds ``x`` created (its ConflictError)."""
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append(request("y", 0))
        token = (await backend.acquire_lease("x", "h", 600)).token
        fenced = dataclasses.replace(request("x", 0), fence=("h", token))
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as renewal,
        ):
            await renewal.execute(
                f"SELECT 1 FROM {s}.sk_leases WHERE agent_id = 'x' FOR NO KEY UPDATE"
            )
            held = renewal.info.backend_pid
            appending = asyncio.ensure_future(backend.append(fenced))
            appender = await _waiting_on(watch, held)
            deleting = asyncio.ensure_future(
                backend.append_together([fenced], [StreamChange("y", delete_at=1)])
            )
            await _another_waits(watch, appender, held)
            await renewal.rollback()  # the lease row free: the append goes on
            outcomes = await asyncio.wait_for(
                asyncio.gather(appending, deleting, return_exceptions=True), timeout=60
            )
        assert outcomes[0] == AppendResult("x", 1, 1), outcomes[0]
        assert isinstance(outcomes[1], ConflictError), outcomes[1]
        assert (outcomes[1].agent_id, outcomes[1].current_seq) == ("x", 1)
        assert await backend.head("y") == 1
        assert [e.seq for e in await backend.read("x")] == [1]
    finally:
        await backend.close()
