"""The SQL and Lua that live in their own files: every one is loaded by the server it is
for (PostgreSQL parses and plans every statement, Redis compiles every script), and
every file is used by its backend — none is stale, none missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from statekeeper.backends.scripts import named_blocks, read_script, script_names

from ._services import (
    POSTGRES_DSN,
    REDIS_URL,
    require_redis,
)

PG = "statekeeper.backends.postgres"
REDIS = "statekeeper.backends.redis"
SRC = Path(__file__).resolve().parents[2] / "src" / "statekeeper" / "backends"


def test_named_blocks_reads_a_file_of_statements() -> None:
    text = "-- header\n-- name: one\nSELECT 1\n  -- a comment\nFROM t\n\n-- name: two\nSELECT 2\n"
    assert named_blocks(text) == {"one": "SELECT 1 FROM t", "two": "SELECT 2"}
    with pytest.raises(ValueError, match="named twice"):
        named_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


def test_every_script_file_is_used() -> None:
    from statekeeper.backends.redis import SCRIPTS

    # the engine's modules (backend.py, feed.py, ...): every SQL file and every named
    # statement must be read by one of them
    backend = "".join(p.read_text() for p in sorted((SRC / "postgres").glob("*.py")))
    files = script_names(PG, "sql", ".sql")
    assert {"sql/queries.sql", "sql/schema.sql"} <= set(files)
    unread = [f for f in files if f'"{f}"' not in backend]
    assert not unread, f"SQL files that the PostgreSQL engine never reads: {unread}"
    names = named_blocks(read_script(PG, "sql/queries.sql"))
    unused = [n for n in names if f'"{n}"' not in backend]
    assert not unused, f"statements in queries.sql that the engine never runs: {unused}"
    lua = {
        name.removeprefix("lua/").removesuffix(".lua")
        for name in script_names(REDIS, "lua", ".lua")
    }
    included = {
        m
        for name in SCRIPTS
        for m in re.findall(
            r"^-- include: (\S+)\.lua$", read_script(REDIS, f"lua/{name}.lua"), re.M
        )
    }
    assert lua == set(SCRIPTS) | included, "a Lua file that no script runs or includes"


def _numbered(statement: str) -> str:
    """psycopg placeholders (``%s``, ``%b``, ``%(name)s``) as PostgreSQL's ``$1``, ``$2``…"""
    seen: dict[str, int] = {}
    count = 0

    def number(m: re.Match[str]) -> str:
        nonlocal count
        if m.group(1) is not None:
            if m.group(1) not in seen:
                count += 1
                seen[m.group(1)] = count
            return f"${seen[m.group(1)]}"
        count += 1
        return f"${count}"

    return re.sub(r"%(?:\((\w+)\))?[sb]", number, statement)


async def test_postgres_parses_and_plans_every_statement(schema: str) -> None:
    """The schema file is applied (a backend opening the schema), then every named
    statement is prepared: PostgreSQL parses it, resolves every table, column and
    function in it, and infers every parameter's type."""
    pytest.importorskip("psycopg")
    import psycopg
    from psycopg import sql

    from statekeeper.backends.postgres import PostgresBackend
    from statekeeper.backends.postgres.row_security import install_row_security

    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        await backend.open()
    finally:
        await backend.close()
    # (rls_may_write calls the policy's function, there once row-level security is)
    await install_row_security(POSTGRES_DSN, schema, [], [])
    statements = named_blocks(read_script(PG, "sql/queries.sql"))
    assert len(statements) > 20
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        for i, (name, text) in enumerate(statements.items()):
            query = sql.SQL(_numbered(text)).format(s=sql.Identifier(schema))
            try:
                conn.execute(
                    sql.SQL("PREPARE {} AS ").format(sql.Identifier(f"sk_check_{i}")) + query
                )
            except psycopg.Error as exc:
                pytest.fail(f"queries.sql statement {name!r} does not load: {exc}")
            conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(f"sk_check_{i}")))


async def test_redis_compiles_every_script() -> None:
    pytest.importorskip("redis")
    require_redis()
    import redis.asyncio as aioredis
    from redis.exceptions import ResponseError

    from statekeeper.backends.redis import SCRIPTS, lua

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        for name in SCRIPTS:
            text = lua(name)
            assert "-- include:" not in text
            try:
                await client.script_load(text)  # compiles it; runs nothing
            except ResponseError as exc:
                pytest.fail(f"lua/{name}.lua does not compile: {exc}")
    finally:
        await client.aclose()
