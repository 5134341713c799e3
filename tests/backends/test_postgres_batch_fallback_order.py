"""PostgreSQL: a group-commit batch that is not set-based (a fence, a snapshot, a new
stream: ``sk_append_batch`` calls ``sk_append`` per request) locks its fences' lease
rows, then its heads, in agent order first (migration 17), as a page of rewrites
(``rw_many_lock``) and a set-based batch (migration 16) lock heads, so none of them
deadlock with another.

Its per-request calls took each lock as they came, in the batch's order: a batch
``[b, a]`` holding ``b`` and waiting for ``a`` while a rewrite page ``[a, b]`` held ``a``
and waited for ``b`` was a deadlock (PostgreSQL aborted one after ``deadlock_timeout``);
so was a batch holding ``a``'s head and waiting for ``b``'s lease (its fence) while a
transaction changing that lease (``append_together``'s ``LeaseChange``) waited for ``a``'s
head. The interleavings are made deterministic as in ``test_postgres_batch_lock_order``.
The requests still run in the batch's order (their feed positions: testing/feed.py).
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_batch_lock_order import _blocked_by, batch_call, page_then_batch


@pytest.mark.parametrize("why", ["snapshot", "fence"])
async def test_a_batch_not_set_based_locks_heads_in_agent_order(schema: str, why: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        lock_page = backend._sql["rw_many_lock"]
        tokens = {}
        for agent in ("a", "b"):
            tokens[agent] = (await backend.acquire_lease(agent, "h", 600)).token
    finally:
        await backend.close()
    none = [None, None]
    snapshot = why == "snapshot"
    fence = why == "fence"
    params = (
        ["b", "a"], [1, 1], [1, 1], none,
        [2, None] if snapshot else none, [1.0, None] if snapshot else none,
        [b"s", None] if snapshot else none, [b"c", None] if snapshot else none,
        [2, 2], ["e", "e"], [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none, [False, False],
        none, ["h", "h"] if fence else none, [tokens["b"], tokens["a"]] if fence else none,
    )  # fmt: skip
    rows = await page_then_batch(schema, lock_page, params)
    assert rows == [(1, 0, 2, 2), (2, 0, 2, 2)]


async def test_a_batch_waiting_for_a_fences_lease_holds_no_head(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        token = (await backend.acquire_lease("b", "h", 600)).token
    finally:
        await backend.close()
    s = '"' + schema.replace('"', '""') + '"'
    call = batch_call(schema)
    none = [None, None]
    params = (
        ["a", "b"], [1, 1], [1, 1], none, none, none, none, none,
        [2, 2], ["e", "e"], [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none, [False, False],
        none, [None, "h"], [None, token],
    )  # fmt: skip
    async with (
        await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as change,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as batch,
    ):
        # a lease change of b (its row locked), then an append to a in its transaction
        await change.execute(
            f"UPDATE {s}.sk_leases SET expires_at = expires_at WHERE agent_id = 'b'"
        )
        batching = asyncio.ensure_future(batch.execute(call, params))
        await _blocked_by(watch, batch.info.backend_pid, change.info.backend_pid)
        failed: list[BaseException] = []
        try:
            await asyncio.wait_for(
                change.execute(f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = 'a' FOR UPDATE"),
                timeout=60,
            )
        except psycopg.errors.DeadlockDetected as exc:
            failed.append(exc)
        await change.rollback()
        try:
            cur = await asyncio.wait_for(batching, timeout=60)
            rows = await cur.fetchall()
            await batch.commit()
        except psycopg.errors.DeadlockDetected as exc:
            failed.append(exc)
        assert failed == []
        assert rows == [(1, 0, 2, 2), (2, 0, 2, 2)]


async def test_one_agents_requests_keep_the_batchs_order(schema: str) -> None:
    """Requests of one agent in a batch not set-based (a new stream, then its next
    append; another agent between them) run in the batch's order, and each answer is
    at its request's position."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        results = await backend.append_batch(
            [request("c", 0), request("b", 1, snap_at=2), request("a", 1), request("c", 1)]
        )
        assert [(r.agent_id, r.first_seq, r.last_seq) for r in results] == [  # type: ignore[union-attr]
            ("c", 1, 1), ("b", 2, 2), ("a", 2, 2), ("c", 2, 2),
        ]  # fmt: skip
        assert [e.seq for e in await backend.read("c")] == [1, 2]
    finally:
        await backend.close()
