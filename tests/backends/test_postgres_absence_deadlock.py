"""An import's absence check on PostgreSQL that deadlocks with a writer creating the
same agents in another order (a group commit of several new agents) is run again.

The check claims each agent's head row (a row of 0, removed again before the commit)
in id order; a writer's transaction creating ``b`` and then ``a`` holds ``b`` and waits
for the check's ``a`` while the check waits for its ``b``: PostgreSQL ends one of them
(``deadlock detected``). The transaction was rolled back whole, so running it again is
safe — and then it sees the agents created: the import's ConflictError naming one, as
when the creation came first. Before, the check's side failed with BackendError
("atomic append failed: deadlock detected"), which says nothing of the agents created.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError
from statekeeper.records import StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN


async def _waiting_on_a_lock(watch: psycopg.AsyncConnection, schema: str, not_pid: int) -> None:
    """Until a session other than ``not_pid`` waits on a lock in a statement of ``schema``."""
    while True:
        cur = await watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND pid <> %s AND position(%s in query) > 0",
            (not_pid, schema),
        )
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.01)  # (polled: the condition, not a duration)


async def test_a_check_deadlocked_with_a_writer_creating_its_agents_is_run_again(
    schema: str,
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        insert = (
            f'INSERT INTO "{schema}".sk_agents (agent_id, head_seq, created_at, updated_at)'
            " VALUES (%s, 1, 0, 0)"
        )
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as writer,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
        ):
            # the writer detects no deadlock itself: the check's side is the one ended
            await writer.execute("SET deadlock_timeout = '10min'")
            await writer.execute(insert, ("b",))  # b created, not committed yet
            checks = [StreamChange("a", absent=True), StreamChange("b", absent=True)]
            importing = asyncio.create_task(backend.append_together([request("t", 0)], checks))
            await _waiting_on_a_lock(watch, schema, writer.info.backend_pid)  # on b
            await writer.execute(insert, ("a",))  # waits for the check's a: a deadlock
            await writer.commit()
            with pytest.raises(ConflictError) as caught:
                await importing
            assert caught.value.agent_id in ("a", "b") and caught.value.current_seq == 1
        assert await backend.head("t") == 0  # nothing of the import's commit written
    finally:
        await backend.close()
