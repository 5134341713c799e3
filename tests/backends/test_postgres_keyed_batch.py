"""PostgreSQL: group-commit batches whose requests carry idempotency keys (migration 11).

A LangGraph saver's writes carry keys (3 of a chat turn's 5), so most of its batches
have some: since migration 11 they are written set-based like key-less ones. Each
request must still be settled on its own, exactly as ``sk_append`` settles it: a key
already stored is a duplicate (nothing written), a stale head a conflict (its key not
stored), the rest land with their keys — also when the key is committed by a concurrent
append while the batch waits for the head's row lock.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult
from statekeeper.testing import request

from ._services import POSTGRES_DSN


async def test_a_keyed_batch_settles_each_request(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request(x, 0) for x in "abcd"])
        assert await backend.append(request("a", 1, key="ka")) == AppendResult("a", 2, 2)
        results = await backend.append_batch(
            [
                request("a", 2, key="ka"),  # key stored: a duplicate, nothing written
                request("b", 1, 2, key="kb"),  # lands, its key stored
                request("c", 1),  # no key: lands
                request("d", 5, key="kd"),  # stale head: a conflict, its key not stored
                request("zz", 3, key="kz"),  # no such stream: a conflict
            ]
        )
        assert results[0] == AppendResult("a", 2, 2, duplicate=True)
        assert results[1] == AppendResult("b", 2, 3)
        assert results[2] == AppendResult("c", 2, 2)
        assert isinstance(results[3], ConflictError) and results[3].current_seq == 1
        assert isinstance(results[4], ConflictError) and results[4].current_seq == 0
        assert [await backend.head(x) for x in ("a", "b", "c", "d", "zz")] == [2, 3, 2, 1, 0]
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        assert [e.seq for e in await backend.read("b")] == [1, 2, 3]
        assert await backend.lookup_key("b", "kb") == AppendResult("b", 2, 3, True)
        assert await backend.lookup_key("d", "kd") is None
        assert await backend.lookup_key("zz", "kz") is None
        # the batch's keys are kept: sending it again lands nothing twice
        again = await backend.append_batch([request("b", 1, 2, key="kb"), request("c", 2)])
        assert again == [AppendResult("b", 2, 3, True), AppendResult("c", 3, 3)]
        assert [e.seq for e in await backend.read("b")] == [1, 2, 3]
    finally:
        await backend.close()


def _blocked_on_a_lock(application_name: str) -> bool:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application_name,),
        ).fetchone()
    return row is not None and int(row[0]) > 0


async def test_a_batch_that_loses_its_head_to_the_same_key_is_a_duplicate(
    schema: str,
) -> None:
    """Another writer appends with the same key and holds the head's row until after
    the batch reached it: the batch's compare-and-set fails, and the request is told
    it is a duplicate of that append (as ``sk_append`` tells it), not a conflict."""
    app = f"sk-kb-{schema[-8:]}"
    backend = PostgresBackend(f"{POSTGRES_DSN}?application_name={app}", schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request(x, 0) for x in "ab"])
        with psycopg.connect(POSTGRES_DSN) as other:  # a transaction, not autocommit
            other.execute(
                f'UPDATE "{schema}".sk_agents SET head_seq = 2 WHERE agent_id = %s', ("a",)
            )
            other.execute(
                f'INSERT INTO "{schema}".sk_events (agent_id, seq, kind, ts, payload, checksum)'
                " VALUES ('a', 2, 'e', 2.0, '\\x00', '\\x00')"
            )
            other.execute(
                f'INSERT INTO "{schema}".sk_idempotency (agent_id, key, first_seq, last_seq)'
                " VALUES ('a', 'k', 2, 2)"
            )
            batch = asyncio.ensure_future(
                backend.append_batch([request("a", 1, key="k"), request("b", 1, key="kb")])
            )
            while not await asyncio.to_thread(_blocked_on_a_lock, app):
                assert not batch.done(), batch.result()
                await asyncio.sleep(0)  # yield to the batch; the wait is on the lock
            other.commit()
        results = await batch
        assert results == [AppendResult("a", 2, 2, duplicate=True), AppendResult("b", 2, 2)]
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        assert await backend.lookup_key("b", "kb") == AppendResult("b", 2, 2, True)
    finally:
        await backend.close()
