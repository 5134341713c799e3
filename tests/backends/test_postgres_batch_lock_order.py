"""PostgreSQL: a set-based group-commit batch (``sk_append_batch``) takes its head rows'
locks in agent order, as a page of rewrites does (``rw_many_lock``), so the two never
deadlock.

The batch's compare-and-set (migrations 14/15) locked each head as its UPDATE reached
it, in the batch's order, while ``rewrite_many`` locks the page's heads ``ORDER BY
agent_id``. A batch ``[b, a]`` holding ``b`` and waiting for ``a``, while a page ``[a, b]``
held ``a`` and waited for ``b``: PostgreSQL aborted one of them after
``deadlock_timeout`` (a second lost, and the victim's work done again). The interleaving
is made deterministic here: a third session holds ``b`` in KEY SHARE (which the page's
FOR UPDATE waits on, and the batch's UPDATE, changing no key, does not), so the page
takes ``a`` and waits on ``b`` before the batch starts; the batch then meets ``a`` and
waits on the page. Released, the page goes on to ``b`` — which the batch had updated
before: a deadlock. Now the batch locks ``a`` first (agent order) and waits there
holding nothing; the page finishes, then the batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.testing import request

from ._services import POSTGRES_DSN

_TYPES = (
    "text", "bigint", "int", "text", "bigint", "float8", "bytea", "bytea", "bigint",
    "text", "float8", "bytea", "bytea", "bytea", "boolean", "bytea", "text", "bigint",
)  # fmt: skip


async def _blocked_by(watch: psycopg.AsyncConnection, waiter: int, holder: int) -> None:
    """Until session ``waiter`` waits on a lock session ``holder`` holds (polled: the
    condition, not a duration; bounded)."""
    for _ in range(6000):
        cur = await watch.execute("SELECT %s = ANY(pg_blocking_pids(%s))", (holder, waiter))
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"session {waiter} never waited on session {holder}")


def batch_call(schema: str) -> str:
    """``sk_append_batch`` called with one array a column, its rows in request order."""
    s = '"' + schema.replace('"', '""') + '"'
    return f"SELECT idx, status, a, b FROM {s}.sk_append_batch(" + ", ".join(
        f"%s::{t}[]" for t in _TYPES
    ) + ") ORDER BY idx"  # fmt: skip


async def page_then_batch(
    schema: str, lock_page: str, params: tuple[object, ...]
) -> list[tuple[Any, ...]]:
    """A rewrite page ``[a, b]`` holding ``a`` and waiting for ``b`` (held in KEY SHARE by
    a third session), then the batch ``params`` started and waiting on the page, then
    ``b`` released: neither may be a deadlock. The batch's rows."""
    s = '"' + schema.replace('"', '""') + '"'
    async with (
        await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as page,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as batch,
    ):
        await other.execute(f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = 'b' FOR KEY SHARE")
        locking = asyncio.ensure_future(page.execute(lock_page, {"agents": ["a", "b"]}))
        await _blocked_by(watch, page.info.backend_pid, other.info.backend_pid)  # (holds a)
        batching = asyncio.ensure_future(batch.execute(batch_call(schema), params))
        await _blocked_by(watch, batch.info.backend_pid, page.info.backend_pid)
        await other.rollback()  # the page goes on to b
        failed: list[BaseException] = []
        rows: list[tuple[Any, ...]] = []
        try:
            await asyncio.wait_for(locking, timeout=60)
        except psycopg.errors.DeadlockDetected as exc:
            failed.append(exc)
        await page.rollback()  # (its rewrite changes nothing the batch checks)
        try:
            cur = await asyncio.wait_for(batching, timeout=60)
            rows = await cur.fetchall()
            await batch.commit()
        except psycopg.errors.DeadlockDetected as exc:
            failed.append(exc)
        assert failed == []
        return rows


@pytest.mark.parametrize("keyed", [False, True], ids=["no-keys", "keyed"])
async def test_a_batch_and_a_rewrite_page_lock_heads_in_one_order(schema: str, keyed: bool) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        lock_page = backend._sql["rw_many_lock"]
    finally:
        await backend.close()
    none = [None, None]
    params = (
        ["b", "a"], [1, 1], [1, 1], ["kb", "ka"] if keyed else none, none, none, none, none,
        [2, 2], ["e", "e"], [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none, [False, False],
        none, none, none,
    )  # fmt: skip
    rows = await page_then_batch(schema, lock_page, params)
    assert rows == [(1, 0, 2, 2), (2, 0, 2, 2)]
