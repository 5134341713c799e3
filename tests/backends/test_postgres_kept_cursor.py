"""PostgreSQL: a pooled connection keeps one cursor per hot append statement (its
parameters' dumpers made once, not per batch: docs/benchmarks.md, "pg:"). The kept
cursor must serve every later statement of its connection as a fresh one would: after a
batch the server refused, after a single append, and with the rows of its own batch."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("psycopg")

import psycopg
from psycopg import sql

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.connection import KeepsCursors, kept_cursor
from statekeeper.errors import BackendRejected
from statekeeper.records import AppendRequest, AppendResult
from statekeeper.testing import request

from ._services import POSTGRES_DSN


def _typed(req: AppendRequest, kind: str) -> AppendRequest:
    return dataclasses.replace(req, events=[dataclasses.replace(e, type=kind) for e in req.events])


async def test_one_connection_serves_batches_after_one_the_server_refused(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)  # one connection
    try:
        await backend.open()
        assert await backend.append_batch([request(x, 0) for x in "abc"]) == [
            AppendResult(x, 1, 1) for x in "abc"
        ]
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL(
                    "ALTER TABLE {}.sk_events ADD CONSTRAINT no_boom CHECK (kind <> 'boom')"
                ).format(sql.Identifier(schema))
            )
        # the batch statement fails as a whole; each request is then sent alone
        refused = await backend.append_batch(
            [request("a", 1), _typed(request("b", 1), "boom"), request("c", 1, 2)]
        )
        assert refused[0] == AppendResult("a", 2, 2)
        assert isinstance(refused[1], BackendRejected)
        assert refused[2] == AppendResult("c", 2, 3)
        # the same connection (and its kept cursors) answers the next ones in full
        assert await backend.append(request("b", 1)) == AppendResult("b", 2, 2)
        assert await backend.append_batch([request("a", 2), request("b", 2, 3)]) == [
            AppendResult("a", 3, 3),
            AppendResult("b", 3, 5),
        ]
        assert [await backend.head(x) for x in "abc"] == [3, 5, 3]
        assert [e.seq for e in await backend.read("b")] == [1, 2, 3, 4, 5]
    finally:
        await backend.close()


async def test_a_pooled_connection_keeps_one_cursor_per_statement(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        await backend.open()
        async with backend._connection() as conn:
            assert isinstance(conn, KeepsCursors)
            first = kept_cursor(conn, b"SELECT 1")
            assert kept_cursor(conn, b"SELECT 1") is first
            assert kept_cursor(conn, b"SELECT 2") is not first
            binary = kept_cursor(conn, b"SELECT 1", binary=True)
            assert binary is not first and kept_cursor(conn, b"SELECT 1", binary=True) is binary
            await binary.execute(b"SELECT 1")
            assert await binary.fetchall() == [(1,)]
            await first.execute(b"SELECT 1")
            assert await first.fetchall() == [(1,)]
    finally:
        await backend.close()
