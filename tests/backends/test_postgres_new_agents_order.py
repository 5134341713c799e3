"""PostgreSQL: a group-commit batch creating new agents claims their head rows in agent
order first (migration 20), so two batches creating the same agents in opposite orders
never deadlock.

A batch that is not set-based (a new stream among its requests: ``sk_append_batch``
calls ``sk_append`` per request, in the batch's order) locked its existing heads in
agent order (migration 17) but inserted its new agents' head rows as their requests
came: a batch ``[b, a]`` had inserted ``b`` (not committed) and waited on ``a``'s
insert while a batch ``[a, b]`` had inserted ``a`` and waited on ``b``'s: a deadlock,
PostgreSQL aborting one after ``deadlock_timeout`` (the library then settles its
requests one by one: a second lost). The interleaving is made deterministic here: a
third session holds an uncommitted event row ``(b, 1)``, which the first batch's insert
of ``b``'s events waits on after it inserted ``b``'s head row; the second batch then
inserts ``a`` and waits on the first's ``b``. Released, the first batch went on to its
``a``: a deadlock. Now each batch claims ``a`` then ``b`` before any write (a claim:
the head row inserted and removed again in the transaction, which a creation of the
agent by another transaction waits on until it ends): the second waits on ``a``
holding nothing, and finds both agents created once the first committed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from statekeeper.backends.postgres import PostgresBackend

from ._services import POSTGRES_DSN
from .test_postgres_batch_lock_order import _blocked_by, batch_call


def _creating(agents: list[str]) -> tuple[object, ...]:
    """``sk_append_batch``'s parameters: one event (seq 1) to each of ``agents``, new."""
    none = [None] * len(agents)
    ones = [1] * len(agents)
    return (
        agents, [0] * len(agents), ones, none, none, none, none, none,
        ones, ["e"] * len(agents), [1.0] * len(agents), [a.encode() for a in agents],
        [b"c"] * len(agents), none, [False] * len(agents), none, none, none,
    )  # fmt: skip


async def test_two_batches_creating_the_same_agents_in_opposite_orders(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        await backend.open()
    finally:
        await backend.close()
    s = '"' + schema.replace('"', '""') + '"'
    call = batch_call(schema)
    async with (
        await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as first,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as second,
    ):
        await other.execute(
            f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
            " VALUES ('b', 1, 'e', 1.0, 'x', 'c')"
        )
        creating = asyncio.ensure_future(first.execute(call, _creating(["b", "a"])))
        await _blocked_by(watch, first.info.backend_pid, other.info.backend_pid)
        again = asyncio.ensure_future(second.execute(call, _creating(["a", "b"])))
        await _blocked_by(watch, second.info.backend_pid, first.info.backend_pid)
        await other.rollback()  # the first batch goes on
        failed: list[BaseException] = []
        rows: dict[str, list[tuple[Any, ...]]] = {}
        for name, conn, running in (("first", first, creating), ("second", second, again)):
            try:
                cur = await asyncio.wait_for(running, timeout=60)
                rows[name] = await cur.fetchall()
                await conn.commit()
            except psycopg.errors.DeadlockDetected as exc:
                failed.append(exc)
                await conn.rollback()
        assert failed == []
        assert rows["first"] == [(1, 0, 1, 1), (2, 0, 1, 1)]
        # the second came after: both agents there (a conflict each, at head 1)
        assert rows["second"] == [(1, 2, 1, 0), (2, 2, 1, 0)]
        cur = await watch.execute(f"SELECT agent_id, head_seq FROM {s}.sk_agents ORDER BY agent_id")
        assert await cur.fetchall() == [("a", 1), ("b", 1)]
