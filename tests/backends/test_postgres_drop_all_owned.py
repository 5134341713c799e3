"""``drop_all`` on PostgreSQL drops only what the store owns: its tables, sequence and
functions, and its schema only when the store created it and nothing else is left in it.

Before, it ran ``DROP SCHEMA … CASCADE``: another application's table in the same
schema went with the store."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConfigurationError

from ._services import POSTGRES_DSN


def _admin(query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description else []


def _objects(schema: str) -> set[str]:
    """Every table, sequence, view and function left in the schema."""
    rows = _admin(
        f"SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace('\"{schema}\"')"
        " AND relkind IN ('r', 'p', 'S', 'v') UNION ALL SELECT proname FROM pg_proc"
        f" WHERE pronamespace = to_regnamespace('\"{schema}\"')"
    )
    return {r[0] for r in rows}


def _exists(schema: str) -> bool:
    return bool(_admin(f"SELECT to_regnamespace('\"{schema}\"')")[0][0])


async def _stored(schema: str) -> PostgresBackend:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    await backend.set_marker("encrypted")  # opens (creates) the store
    return backend


async def test_another_applications_table_in_the_schema_survives(schema: str) -> None:
    backend = await _stored(schema)
    _admin(f'CREATE TABLE "{schema}".orders (id int PRIMARY KEY, total int)')
    _admin(f'INSERT INTO "{schema}".orders VALUES (1, 42)')
    try:
        await backend.drop_all()
        assert _admin(f'SELECT id, total FROM "{schema}".orders') == [(1, 42)]
        assert _objects(schema) == {"orders"}  # every object of the store gone
        # the store opens again, empty, next to the other table
        assert await backend.read_marker("encrypted") is False
        assert await backend.list_agents() == []
    finally:
        await backend.close()


async def test_a_schema_the_store_created_is_dropped_when_empty(schema: str) -> None:
    backend = await _stored(schema)
    try:
        await backend.drop_all()
        assert not _exists(schema)
    finally:
        await backend.close()


async def test_a_schema_the_store_did_not_create_is_kept(schema: str) -> None:
    _admin(f'CREATE SCHEMA "{schema}"')
    backend = await _stored(schema)
    try:
        await backend.drop_all()
        assert _exists(schema)
        assert _objects(schema) == set()
    finally:
        await backend.close()


async def test_a_store_used_by_another_object_is_refused_whole(schema: str) -> None:
    backend = await _stored(schema)
    _admin(f'CREATE VIEW "{schema}".agent_report AS SELECT agent_id FROM "{schema}".sk_agents')
    try:
        with pytest.raises(ConfigurationError, match="agent_report"):
            await backend.drop_all()
        assert {"sk_agents", "sk_events", "agent_report"} <= _objects(schema)
        assert await backend.read_marker("encrypted") is True  # nothing dropped
    finally:
        await backend.close()


async def test_a_schema_an_older_store_created_is_dropped_when_empty(schema: str) -> None:
    """A store made before the "created by statekeeper" comment: its migration created
    the schema and the store's first table in one transaction (the schema's catalog row
    has that transaction's xmin, kept by VACUUM FREEZE). Its empty schema was left
    behind by drop_all; one created before the store (another transaction) stays."""
    backend = await _stored(schema)
    _admin(f'COMMENT ON SCHEMA "{schema}" IS NULL')  # as such a store has it
    _admin("VACUUM FREEZE pg_catalog.pg_namespace")
    try:
        await backend.drop_all()
        assert not _exists(schema)
    finally:
        await backend.close()
    _admin(f'CREATE SCHEMA "{schema}"')  # a DBA's, empty, then the store in it
    backend = await _stored(schema)
    try:
        await backend.drop_all()
        assert _exists(schema) and _objects(schema) == set()
    finally:
        await backend.close()
