"""A store in one of PostgreSQL's own schemas is refused when the backend is built.

Before, ``schema=information_schema`` (or ``pg_catalog``, ``pg_toast``, ``pg_temp_3``)
was accepted: the store's tables were created among the server's catalog, and its
``drop_all`` reached into it."""

from __future__ import annotations

import pytest

from statekeeper.backends import open_backend
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.row_security import install_row_security
from statekeeper.errors import ConfigurationError

SYSTEM = ["information_schema", "pg_catalog", "pg_toast", "pg_temp", "pg_temp_3", "pg_toast_temp_1"]


@pytest.mark.parametrize("schema", SYSTEM)
def test_a_system_schema_is_refused_at_construction(schema: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{schema}.*system schemas"):
        PostgresBackend("postgresql://127.0.0.1/db", schema=schema)
    with pytest.raises(ConfigurationError, match="system schemas"):
        open_backend(f"postgresql://127.0.0.1/db?schema={schema}")


@pytest.mark.parametrize("schema", SYSTEM)
async def test_row_security_refuses_a_system_schema(schema: str) -> None:
    with pytest.raises(ConfigurationError, match="system schemas"):
        await install_row_security("postgresql://127.0.0.1/db", schema, [], [])


@pytest.mark.parametrize("schema", ["public", "tenant_1", "PG_mine", "information_schema2"])
def test_an_application_schema_is_accepted(schema: str) -> None:
    assert PostgresBackend("postgresql://127.0.0.1/db", schema=schema).schema == schema
