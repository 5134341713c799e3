"""A PostgreSQL session that is read-only (a hot standby, or
``default_transaction_read_only`` set for the role, database or connection).

Before, a write refused by it (SQLSTATE 25006) was a BackendRejected carrying the
server's SQL text and the store's function signatures ("CONTEXT: SQL statement
"INSERT INTO …sk_agents…" PL/pgSQL function ….sk_append(text,bigint,…)"), and a store
that could not be created on it was reported as the operation that opened it
("read_state failed: cannot execute CREATE SCHEMA …")."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import BackendRejected

from ._services import POSTGRES_DSN

_READ_ONLY = "options=-c%20default_transaction_read_only%3Don"


def _read_only_dsn() -> str:
    return POSTGRES_DSN + ("&" if "?" in POSTGRES_DSN else "?") + _READ_ONLY


def _no_server_sql(message: str, schema: str) -> None:
    for leak in ("CONTEXT", "INSERT", "SQL statement", "PL/pgSQL", "sk_append", f"{schema}.sk_"):
        assert leak not in message, message


async def test_a_write_on_a_read_only_session_says_so_without_the_servers_sql(
    schema: str,
) -> None:
    async with StateStore(PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)) as store:
        await store.save("a", {"v": 1})
    backend = PostgresBackend(_read_only_dsn(), schema=schema, max_size=2, retry_timeout=2)
    async with StateStore(backend) as store:
        with pytest.raises(BackendRejected, match="session is read-only") as caught:
            await store.save("b", {"v": 1})
        assert caught.value.sqlstate == "25006"
        assert caught.value.maybe_applied is False
        _no_server_sql(str(caught.value), schema)
        assert (await store.load("a")).data == {"v": 1}  # reads go on


async def test_a_store_that_cannot_be_created_is_reported_as_its_opening(schema: str) -> None:
    backend = PostgresBackend(_read_only_dsn(), schema=schema, max_size=2, retry_timeout=2)
    async with StateStore(backend) as store:
        with pytest.raises(BackendRejected) as caught:
            await store.load("a")
    message = str(caught.value)
    assert message.startswith(f"cannot open PostgreSQL schema {schema!r}"), message
    assert "creating or upgrading" in message
    assert "read_state failed" not in message
    assert "session is read-only" in message
    _no_server_sql(message, schema)
