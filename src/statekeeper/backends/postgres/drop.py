"""Dropping a PostgreSQL store: only what it owns.

A schema may hold other applications' tables too (a store in ``public``, or in a schema
shared with the application): ``drop_all`` drops, without ``CASCADE``, the tables (their
partitions, indexes, triggers and policies go with them), the sequence and the functions
the migrations and the row-level security scripts create — the names read from those
scripts, so a new migration's objects are dropped too — and then the schema itself only
when the store created it and it is empty (``DROP SCHEMA`` without ``CASCADE``: anything
else left in it keeps it). The store created it when it carries the store's comment
(:func:`mark_created`), or — a store made before that comment — when its catalog row
(``pg_namespace``) was written by the transaction that created the store's first table
(the migration ran ``CREATE SCHEMA IF NOT EXISTS`` and ``CREATE TABLE sk_migrations``
in one transaction: the same ``xmin`` as the first column's ``pg_attribute`` row, kept
when a ``VACUUM FREEZE`` freezes them). Being empty is no evidence: a schema a DBA
created for the store (its grants, its default privileges, another owner) would go
with them. A schema created earlier has another ``xmin`` and stays; so does one whose
row was changed since (a ``GRANT`` on it, an ``ALTER SCHEMA``: a new ``xmin``), on the
safe side. An object of
another application that depends on a table of the store (a view, a foreign key) is
refused with a :class:`~statekeeper.errors.ConfigurationError` naming it, nothing dropped.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from ...errors import ConfigurationError
from ..scripts import read_script

if TYPE_CHECKING:
    from .part import PostgresPart

__all__ = ["CREATED_BY", "drop_store", "mark_created", "owned"]

_PACKAGE = "statekeeper.backends.postgres"

#: the comment a schema statekeeper created carries (only such a schema is dropped)
CREATED_BY = "created by statekeeper"


def _scripts() -> str:
    from .schema import MIGRATIONS

    texts = [body for _, _, body in MIGRATIONS]
    for name in (
        "partitioned.sql", "row_security.sql", "row_security_feed.sql", "row_security_runlock.sql",
    ):  # fmt: skip
        texts.append(read_script(_PACKAGE, f"sql/{name}"))
    return "\n".join(texts)


def _names(keyword: str, text: str) -> tuple[str, ...]:
    pattern = (
        rf"\b(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?{keyword}\s+"
        r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?\{s\}\.(sk_\w+)"
    )
    return tuple(sorted(set(re.findall(pattern, text, flags=re.IGNORECASE))))


@cache
def owned() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The store's tables, sequences and functions (by name, in its schema)."""
    text = _scripts()
    tables = tuple(sorted({*_names("TABLE", text), "sk_migrations"}))  # (schema.py's)
    return tables, _names("SEQUENCE", text), _names("FUNCTION", text)


async def mark_created(conn: Any, schema: str) -> None:
    """Inside the migration's transaction, before ``CREATE SCHEMA IF NOT EXISTS``: a
    schema that does not exist yet is created here and marked as the store's."""
    cur = await conn.execute("SELECT to_regnamespace(%s)", (_quoted(schema),))
    row = await cur.fetchone()
    if row is not None and row[0] is not None:
        return  # somebody else's (or an older statekeeper's): never dropped
    ident = sql.Identifier(schema)
    await conn.execute(sql.SQL("CREATE SCHEMA {s}").format(s=ident))
    await conn.execute(
        sql.SQL("COMMENT ON SCHEMA {s} IS {c}").format(s=ident, c=sql.Literal(CREATED_BY))
    )


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


async def drop_store(backend: PostgresPart) -> None:
    """Drop the store's own objects from its schema (one transaction), then the schema
    when the store created it and nothing else is left in it."""
    schema = backend.schema
    ident = sql.Identifier(schema)
    async with backend._connection() as conn, conn.transaction():
        cur = await conn.execute(
            "SELECT n.oid IS NOT NULL, obj_description(n.oid, 'pg_namespace') = %s,"
            " (SELECT s.xmin::text FROM pg_namespace s WHERE s.oid = n.oid)"
            " = (SELECT a.xmin::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relnamespace = n.oid AND c.relname = 'sk_migrations' AND a.attnum = 1)"
            " FROM (SELECT to_regnamespace(%s) AS oid) n",
            (CREATED_BY, _quoted(schema)),
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            return  # no schema: nothing stored
        ours = bool(row[1]) or bool(row[2])  # marked, or made with the store (see docs)
        owned_tables, sequences, functions = owned()
        tables = sql.SQL(", ").join(
            sql.SQL("{s}.{t}").format(s=ident, t=sql.Identifier(t)) for t in owned_tables
        )
        try:
            async with conn.transaction():
                await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(tables))
        except psycopg.errors.DependentObjectsStillExist as exc:
            detail = (exc.diag.message_detail or "").splitlines()
            raise ConfigurationError(
                f"schema {schema!r}: the store's tables are used by objects that are not the "
                f"store's ({'; '.join(detail[:5]) or exc.diag.message_primary}): drop or "
                "change those first; nothing was dropped"
            ) from None
        for seq in sequences:
            await conn.execute(
                sql.SQL("DROP SEQUENCE IF EXISTS {s}.{q}").format(s=ident, q=sql.Identifier(seq))
            )
        cur = await conn.execute(
            "SELECT format('%%I.%%I(%%s)', n.nspname, p.proname,"
            " pg_get_function_identity_arguments(p.oid))"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname = ANY(%s)",
            (schema, list(functions)),
        )
        for (signature,) in await cur.fetchall():
            await conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.SQL(signature)))
        if not ours:
            return
        try:
            async with conn.transaction():  # a savepoint: the store's objects stay dropped
                await conn.execute(sql.SQL("DROP SCHEMA {s}").format(s=ident))
        except psycopg.errors.DependentObjectsStillExist:
            pass  # something else lives in it: the schema stays
