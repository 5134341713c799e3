"""A process with more than 1024 files and sockets open: its PostgreSQL connections'
descriptors are numbered 1024 or more, which ``select.select`` refuses
("filedescriptor out of range in select()").

Before, the check made on each pooled connection as it is taken used ``select``: in
such a process every checkout counted as a dead connection — closed, logged by
psycopg_pool as "discarding closed connection" and dialled again, operation after
operation (a long test run that had leaked descriptors logged ~50 of them in three
cases of tests/store/test_load_during_compaction.py, while the shared server closed
nothing). The check now uses ``poll``: a healthy connection is kept, a dead one is
still found dead."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import select
from collections.abc import Iterator

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.connection import check_connection
from statekeeper.testing import request

from ._services import POSTGRES_DSN

HIGH = 1024  # FD_SETSIZE: select() takes descriptors below it only


@contextlib.contextmanager
def descriptors_from_high() -> Iterator[None]:
    """Every descriptor below :data:`HIGH` (+ a margin) taken: what the process opens
    next is numbered :data:`HIGH` or more. The limit of open files is raised for it
    when the hard limit allows, and restored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = HIGH + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard limit of open files ({hard}) is below {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    held: list[int] = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= HIGH + 8:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _terminate(application_name: str) -> int:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


async def test_a_pool_whose_sockets_are_numbered_above_1024_keeps_its_connections(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Operations on connections numbered 1024 or more: each connection is made once
    and kept (before: each checkout closed one and dialled another), nothing logged."""
    with descriptors_from_high():
        backend = PostgresBackend(POSTGRES_DSN, schema=schema, min_size=1, max_size=2)
        try:
            await backend.open()
            async with backend._connection() as conn:
                assert conn.pgconn.socket >= HIGH  # (what this test is about)
            with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
                for seq in range(30):
                    await backend.append(request("a", seq))
                    assert await backend.head("a") == seq + 1
            assert [e.seq for e in await backend.read("a")] == list(range(1, 31))
            stats = backend._pool.get_stats()
            assert stats.get("returns_bad", 0) == 0, stats
            assert stats.get("connections_num", 0) <= 2, stats
            assert [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"] == []
        finally:
            await backend.close()


async def test_the_check_of_a_connection_numbered_above_1024_tells_alive_from_terminated(
    schema: str,
) -> None:
    """The check itself: a live connection numbered 1024 or more passes it (before:
    "connection socket is unusable: filedescriptor out of range in select()"), one
    the server terminated is refused."""
    app = f"sk-highfd-{schema[-8:]}"
    with descriptors_from_high():
        async with await psycopg.AsyncConnection.connect(
            POSTGRES_DSN, autocommit=True, application_name=app
        ) as conn:
            assert conn.pgconn.socket >= HIGH
            await check_connection(conn)
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
            assert _terminate(app) == 1
            waiting = select.poll()  # until the server's goodbye reached the socket
            waiting.register(conn.pgconn.socket, select.POLLIN)
            assert waiting.poll(120_000), "the server never closed the connection"
            with pytest.raises(psycopg.OperationalError):
                await check_connection(conn)
