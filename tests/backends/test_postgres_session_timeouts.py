"""A session the server ended on its own timers — ``idle_session_timeout`` (57P05) or
``idle_in_transaction_session_timeout`` (25P03) — is a lost connection: the operation
is retried on another, as after a restart or ``pg_terminate_backend`` (57P01).

Before, both were taken for a refused statement: ``BackendRejected`` at once, not
retried, when the server ended the session between the pool's check of a connection
and its use (the check finds a session ended earlier: a FATAL waiting on the socket).
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from statekeeper.backends import PostgresBackend
from statekeeper.backends.postgres import backend as backend_module
from statekeeper.backends.postgres.connection import transient
from statekeeper.testing import request

from ._services import private_postgres


@pytest.mark.parametrize(
    "error", [psycopg.errors.IdleSessionTimeout, psycopg.errors.IdleInTransactionSessionTimeout]
)
def test_a_session_ended_by_a_server_timeout_is_a_lost_connection(
    error: type[psycopg.Error],
) -> None:
    assert transient(error("terminating connection due to idle-session timeout"))


async def _sessions(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


@pytest.mark.slow
async def test_an_operation_on_a_session_the_server_just_ended_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with private_postgres({"idle_session_timeout": 300}) as server:
        backend = PostgresBackend(server.dsn, min_size=1, max_size=1, retry_timeout=30)
        try:
            await backend.append(request("a", 0))

            async def ended_after_the_check(conn: object) -> None:
                return None  # the race: the session ends right after the pool's check

            monkeypatch.setattr(backend_module, "check_connection", ended_after_the_check)
            for _ in range(600):  # the server ends the pool's idle session
                if await _sessions(server.dsn) == 0:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the idle session was never ended")
            assert await backend.head("a") == 1
        finally:
            await backend.close()
