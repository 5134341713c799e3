"""A governed compaction's commit (``append_together`` with a snapshot and a prune of a
stream) locks that stream's head row before its snapshot row, as a delete and a plain
prune do (head row, then the snapshots).

It stored the new base snapshot first (an upsert: the row of a snapshot already at that
seq locked) and locked the head row after, for the prune. A delete of the agent (or a
plain prune) holding the head row and then removing its snapshots waited on that
snapshot row while the compaction waited on the head row: PostgreSQL aborted one of the
two as a deadlock after ``deadlock_timeout`` — the compaction's commit is not retried
(``BackendError``: 'atomic append failed ... deadlock detected', retention's compaction
failed), a governed delete neither. The order is the same everywhere now: the other
writer finishes, then the compaction is made (or refused at its head identity).
"""

from __future__ import annotations

import asyncio

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.records import StreamChange
from statekeeper.testing import request, snapshot

from ._services import POSTGRES_DSN


async def _wait_blocked_by(admin: psycopg.AsyncConnection, pid: int) -> None:
    """Until another session waits on a lock ``pid`` holds (bounded)."""
    for _ in range(1200):  # (a condition polled, ~60 s at most)
        cur = await admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (pid,),
        )
        row = await cur.fetchone()
        if row is not None and row[0] > 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the compaction never waited on the head row's lock")


async def test_a_compaction_waits_for_a_delete_holding_the_head_row(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append(request("a", 0, 6, snap_at=3))  # (a snapshot stored at 3)
        head = (await backend.read("a", 5, 6))[0].checksum
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as admin,
        ):
            # another writer's delete (or plain prune): the head row first ...
            await other.execute(
                f'SELECT 1 FROM "{schema}".sk_agents WHERE agent_id = %s FOR UPDATE', ("a",)
            )
            change = StreamChange(
                "a", snapshot=snapshot(3, tag=b"whole"), prune_to=3, prune_head=6,
                prune_checksum=head,
            )  # fmt: skip
            compaction = asyncio.create_task(backend.append_together([request("log", 0)], [change]))
            await _wait_blocked_by(admin, other.info.backend_pid)
            # ... then its snapshots: not waiting on a row the compaction locked
            await other.execute(
                f'DELETE FROM "{schema}".sk_snapshots WHERE agent_id = %s AND seq = %s', ("a", 3)
            )
            await other.rollback()  # (it changed its mind: nothing of it stays)
        await asyncio.wait_for(compaction, timeout=60)
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6]
        assert await backend.latest_snapshot("a") == snapshot(3, tag=b"whole")
        assert await backend.head("log") == 1
    finally:
        await backend.close()
