"""Row-level security: an access policy enforced by PostgreSQL itself.

:func:`install_row_security` turns on row-level security for statekeeper's tables in a
schema and stores the grants of a policy (``statekeeper.governance.Policy.row_grants``:
database role, a POSIX regular expression over the namespace, a permission level). Each
principal then connects as its own database role (``postgresql://alice_role@host/db``):
every row it reads must be in a namespace it may read, every row it inserts, updates or
deletes in one it may write — checked by the server, so a compromised application
process holding that role's connection cannot go around the policy (it can still do
whatever the role may). The tables' owner and superusers are exempt (keep the owner for
migrations and administration, never for an application). The audit log's stream is
appendable by every role, deletable by none, and read and updated by none but the roles
of principals admin of every namespace (its head row moves forward with each append; a
trigger refuses renaming it or moving it back): another role reads only its head's seq,
tag and link (a snapshot record of the log at its head holding the head entry's chain
link sealed under the audit key: ``Backend.audit_links``, which a backend opened on a
schema under row-level security sets), all a writer needs to chain its entries on the
log. The store-level markers
(``sk_markers``; the "encrypted" marker of :mod:`statekeeper.store.keyguard`) are
readable by every role, cleared by none, and set only by the roles whose work sets
them (sql/row_security.sql, "markers": "encrypted" and the store's first id by a
writer; a renewed id, "legal-holds" and any other name by the admins of every
namespace alone: a marker is every tenant's). A role holds no table-level UPDATE,
DELETE or TRUNCATE, which would let it LOCK a table against every other tenant: UPDATE
of the columns statekeeper's writes update, deletes through the owner's functions
that apply the delete policies for the calling role (:mod:`.table_locks`).

Run it as the owner of the schema (the role that created the store), after the store
exists; run it again after a policy change (it replaces the grants) or after an upgrade
that adds tables. :func:`remove_row_security` revokes a role's privileges (before
``DROP ROLE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...errors import ConfigurationError, NotAStore
from ..scripts import named_blocks, read_script
from . import table_locks
from .connection import check_schema

__all__ = ["TABLES", "install_row_security", "remove_row_security"]

#: the tables whose rows belong to an agent (``agent_id``)
TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases")


def _check(schema: str, grants: Sequence[tuple[str, str, int]]) -> None:
    check_schema(schema)
    for role, pattern, perm in grants:
        if type(role) is not str or not role or len(role) > 63:
            raise ConfigurationError(f"a database role name must be 1-63 characters: {role!r}")
        if type(pattern) is not str or perm not in (1, 2, 3):
            raise ConfigurationError(f"a grant is (role, pattern, 1..3), not {pattern!r}, {perm!r}")


async def _up_to_date(dsn: str, schema: str) -> None:
    """The policies name every table of the current migration: a schema an older
    statekeeper created is first brought up to date, as opening it for writing would
    (a schema holding no store raises :class:`~statekeeper.errors.NotAStore`, one of a
    newer statekeeper a :class:`~statekeeper.errors.ConfigurationError`)."""
    from .backend import PostgresBackend

    reader = PostgresBackend(dsn, schema=schema, min_size=1, max_size=1, readonly=True)
    try:
        await reader.ensure_store()
        return
    except NotAStore:
        raise
    except ConfigurationError:  # at another migration: the writer's open says which
        pass
    finally:
        await reader.close()
    writer = PostgresBackend(dsn, schema=schema, min_size=1, max_size=1)
    try:
        await writer.ensure_store()
    finally:
        await writer.close()


async def _own_objects(conn: Any, schema: str) -> dict[str, Any]:
    """The store's own tables, sequences and functions in ``schema`` as SQL lists (the
    ``{tables}``, ``{sequences}``, ``{functions}`` of the ``role`` and ``revoke``
    blocks): those of the names its scripts create (:func:`.drop.owned`) that the
    catalog holds, never another application's objects in the same schema."""
    from psycopg import sql

    from .drop import owned

    tables, sequences, functions = owned()
    quoted = '"' + schema.replace('"', '""') + '"'
    cur = await conn.execute(
        "SELECT c.relname, c.relkind = 'S' FROM pg_class c WHERE c.relnamespace ="
        " to_regnamespace(%s) AND c.relname = ANY(%s) AND c.relkind IN ('r', 'p', 'S')"
        " ORDER BY 1",
        (quoted, [*tables, *sequences]),
    )
    found = await cur.fetchall()
    cur = await conn.execute(
        "SELECT format('%%I.%%I(%%s)', n.nspname, p.proname,"
        " pg_get_function_identity_arguments(p.oid))"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s AND p.proname = ANY(%s) ORDER BY 1",
        (schema, list(functions)),
    )
    signatures = [str(r[0]) for r in await cur.fetchall()]
    s = sql.Identifier(schema)

    def names(sequence: bool) -> sql.Composable:
        return sql.SQL(", ").join(
            sql.SQL("{s}.{t}").format(s=s, t=sql.Identifier(str(name)))
            for name, is_sequence in found
            if bool(is_sequence) is sequence
        )

    return {
        "tables": names(False),
        "sequences": names(True),
        "functions": sql.SQL(", ").join(sql.SQL(one) for one in signatures),  # (quoted: %I)
    }


async def _only_the_store(conn: Any, schema: str) -> bool:
    """Whether ``schema`` holds no relation but the store's (and their partitions)."""
    from .drop import owned

    tables, sequences, _ = owned()
    cur = await conn.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace ="
        " to_regnamespace(%s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')"
        " AND NOT c.relispartition AND NOT (c.relname = ANY(%s)))",
        ('"' + schema.replace('"', '""') + '"', [*tables, *sequences]),
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def install_row_security(
    dsn: str,
    schema: str,
    grants: Sequence[tuple[str, str, int]],
    roles: Iterable[str],
    trimmers: Iterable[str] = (),
) -> None:
    """Enforce ``grants`` (``(database role, namespace regex, 1 read / 2 write / 3
    admin)``) on the store in ``schema``, in one transaction, connected with ``dsn``
    (the schema's owner); ``roles`` are given the table privileges the store needs.
    The change feed (``sql/row_security_feed.sql``): its events are ``sk_events`` rows
    (covered by the grants); only ``trimmers`` (the roles of principals that are admin
    of every namespace) may trim it, i.e. change its floor. The store's run locks
    (``sql/row_security_runlock.sql``): a namespace's by the roles admin of it and all
    below it, the whole store's by those admin of every namespace; each lock is read by
    the roles admin above, at or below its namespace (``sk_grants.prefix``, migration
    18), the whole store's by every admin."""
    import psycopg
    from psycopg import sql

    _check(schema, grants)
    await _up_to_date(dsn, schema)
    roles = sorted(set(roles) | {role for role, _, _ in grants} | set(trimmers))
    blocks = named_blocks(read_script("statekeeper.backends.postgres", "sql/row_security.sql"))
    s = sql.Identifier(schema)
    connection = await psycopg.AsyncConnection.connect(
        dsn, autocommit=False, client_encoding="UTF8"
    )
    async with connection as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"statekeeper:{schema}",))
        cur = await conn.execute(
            "SELECT r FROM unnest(%s::text[]) r WHERE NOT EXISTS"
            " (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) ORDER BY r",
            (roles,),
        )
        missing = [str(row[0]) for row in await cur.fetchall()]
        if missing:  # before any change: a grant to no one would fail half-way
            raise ConfigurationError(
                f"database role {missing[0]!r} does not exist (of {len(missing)} missing):"
                " create each principal's role (CREATE ROLE ... LOGIN) before enforcing"
            )
        await conn.execute(sql.SQL(blocks["grant_prefix"]).format(s=s))
        await conn.execute(sql.SQL(blocks["setup"]).format(s=s))
        for table in TABLES:
            await conn.execute(sql.SQL(blocks["table"]).format(s=s, t=sql.Identifier(table)))
        await conn.execute(sql.SQL(blocks["audit_head"]).format(s=s))
        await conn.execute(sql.SQL(blocks["audit_entries"]).format(s=s))
        runlock = named_blocks(
            read_script("statekeeper.backends.postgres", "sql/row_security_runlock.sql")
        )
        await conn.execute(sql.SQL(runlock["function"]).format(s=s))
        await conn.execute(sql.SQL(runlock["setup"]).format(s=s))
        await conn.execute(sql.SQL("DELETE FROM {s}.sk_grants").format(s=s))
        async with conn.cursor() as cur:
            await cur.executemany(
                sql.SQL(
                    "INSERT INTO {s}.sk_grants (db_role, pattern, perm) VALUES (%s, %s, %s)"
                ).format(s=s),
                list(grants),
            )
        await conn.execute(sql.SQL(blocks["markers"]).format(s=s))
        await conn.execute(sql.SQL(table_locks.deletes_sql()).format(s=s))
        await conn.execute(sql.SQL(table_locks.appends_sql()).format(s=s))
        own = await _own_objects(conn, schema)
        for role in roles:
            r = sql.Identifier(role)
            await conn.execute(sql.SQL(blocks["role"]).format(s=s, r=r, **own))
            await conn.execute(sql.SQL(blocks["marker_role"]).format(s=s, r=r))
            await conn.execute(sql.SQL(table_locks.role_sql()).format(s=s, r=r, **own))
        feed = named_blocks(
            read_script("statekeeper.backends.postgres", "sql/row_security_feed.sql")
        )
        await conn.execute(sql.SQL(feed["mark"]).format(s=s))
        await conn.execute(sql.SQL(feed["setup"]).format(s=s))
        admins = set(trimmers)
        for role in roles:
            block = feed["trimmer" if role in admins else "reader"]
            await conn.execute(sql.SQL(block).format(s=s, r=sql.Identifier(role)))


async def remove_row_security(dsn: str, schema: str, roles: Iterable[str]) -> None:
    """Revoke what :func:`install_row_security` granted ``roles`` on ``schema`` (their
    grants are deleted too); the tables keep row-level security on."""
    import psycopg
    from psycopg import sql

    _check(schema, [])
    blocks = named_blocks(read_script("statekeeper.backends.postgres", "sql/row_security.sql"))
    s = sql.Identifier(schema)
    connection = await psycopg.AsyncConnection.connect(
        dsn, autocommit=False, client_encoding="UTF8"
    )
    async with connection as conn, conn.transaction():
        own = await _own_objects(conn, schema)
        alone = await _only_the_store(conn, schema)
        for role in roles:
            r = sql.Identifier(role)
            await conn.execute(
                sql.SQL("DELETE FROM {s}.sk_grants WHERE db_role = %s").format(s=s), (role,)
            )
            await conn.execute(sql.SQL(blocks["revoke"]).format(s=s, r=r, **own))
            if alone:  # (another application's objects: the role may need the schema)
                await conn.execute(sql.SQL("REVOKE USAGE ON SCHEMA {s} FROM {r}").format(s=s, r=r))
