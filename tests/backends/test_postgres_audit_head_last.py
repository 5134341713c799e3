"""PostgreSQL: a transaction locks the audit log's head after every other head it names
(the heads in agent order, the log's last: ``rw_many_lock``, ``sk_append_batch``,
migration 20), so a governed change waiting on one agent's row holds nothing every
other governed write needs.

A governed change (``append_together``: its changes, with its audit entry appended to
``\\x01sk-audit/log``) locks the heads of every agent it names first, in agent order
(``together_locks.py``), where the log's id comes first. A delete of ``b`` whose head row
another session held (a transaction idle with ``b``'s row locked: no ``lock_timeout``)
so held the log's head while it waited on ``b``, and every governed save of every other
agent (a batch ``[log, c]``) waited on it in turn: one stalled transaction of one agent
stalled all governed writes of the store. Now the delete waits on ``b`` holding nothing
of the log; the save of ``c`` commits, and the delete, released, finds the log moved
(the ConflictError the governance layer answers by writing its entry again).
"""

from __future__ import annotations

import asyncio

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult, StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_together_lock_order import _waiting_on

LOG = "\x01sk-audit/log"


async def _waits_on(watch: psycopg.AsyncConnection, holder: int) -> bool:
    """Whether some session waits on a lock session ``holder`` holds, now."""
    cur = await watch.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder,)
    )
    row = await cur.fetchone()
    return row is not None and bool(row[0])


async def test_a_governed_change_waiting_on_one_agent_stalls_no_other_save(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append_batch([request(LOG, 0), request("b", 0), request("c", 0)])
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as stalled,
        ):
            # a transaction of b's, idle with its head row locked
            await stalled.execute(f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = 'b' FOR UPDATE")
            deleting = asyncio.ensure_future(
                backend.append_together([request(LOG, 1)], [StreamChange("b", delete_at=1)])
            )
            deleter = await _waiting_on(watch, stalled.info.backend_pid)
            saving = asyncio.ensure_future(
                backend.append_together([request(LOG, 1), request("c", 1)])
            )
            # the save either commits or waits on the delete (then it would wait as long
            # as b's transaction stays open): polled until one of the two, bounded
            stalled_save = False
            for _ in range(6000):
                if saving.done():
                    break
                if await _waits_on(watch, deleter):
                    stalled_save = True
                    break
                await asyncio.sleep(0.01)  # (polled: the condition, not a duration)
            else:
                raise AssertionError("the save neither committed nor waited")
            await stalled.rollback()
            outcomes = await asyncio.wait_for(
                asyncio.gather(saving, deleting, return_exceptions=True), timeout=60
            )
        assert not stalled_save, "the save of c waited on the delete of b (the log's head)"
        assert outcomes[0] == [AppendResult(LOG, 2, 2), AppendResult("c", 2, 2)]
        assert isinstance(outcomes[1], ConflictError), outcomes[1]
        assert outcomes[1].agent_id == LOG
        assert await backend.head("b") == 1
    finally:
        await backend.close()
