"""The PostgreSQL backend's schema: numbered migrations, hash partitioning by agent id,
the read-only check, and dropping it all.

Partitioning (``partitions=N``, applied when the schema is created): every table whose
rows belong to an agent (``sk_agents``, ``sk_events``, ``sk_snapshots``,
``sk_idempotency``, ``sk_leases``) is ``PARTITION BY HASH (agent_id)`` into N
partitions ``<table>_p0`` … ``<table>_p<N-1>``; every one of them has ``agent_id`` as
the first column of its primary key, so a statement about one agent touches one
partition of each table (the planner prunes the others; see docs/scale-postgres.md),
and the same layout distributes on Citus with ``agent_id`` as the distribution column.
The tables are created partitioned *before* migration 6 runs: its ``CREATE TABLE IF
NOT EXISTS`` statements then find them, and every later migration is written to work
on both layouts. The one difference is the feed's position index: a unique index of a
partitioned table must contain the partition key, so it is ``(position, agent_id)``
there (positions come from one sequence, so they are unique either way).

An existing schema keeps the layout it was created with; opening it with a different
``partitions=`` raises :class:`~statekeeper.errors.ConfigurationError` naming both.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ...errors import ConfigurationError, NotAStore, StoreSchemaOutdated
from ..scripts import named_blocks, read_script
from . import table_locks
from .connection import milliseconds
from .drop import drop_store, mark_created

if TYPE_CHECKING:
    from .part import PostgresPart

__all__ = [
    "MIGRATIONS",
    "PARTITIONED_TABLES",
    "SCHEMA_VERSION",
    "check_store",
    "drop_all",
    "migrate",
    "opened",
    "partition_count",
]

logger = logging.getLogger("statekeeper.backends.postgres")

PACKAGE = "statekeeper.backends.postgres"

# Numbered migrations: (version, name, SQL with ``{s}`` for the schema), in sql/.
# Never edit a released one; append a new number instead. Nothing has been released
# yet: the pre-release migrations 1-6 are squashed into one, numbered 6 (so a schema
# that has them all is current), written to also upgrade a schema that has 1-5.
MIGRATIONS: list[tuple[int, str, str]] = [
    (6, "tables, leases and the append functions", read_script(PACKAGE, "sql/schema.sql")),
    (7, "the change feed: event positions", read_script(PACKAGE, "sql/feed.sql")),
    (8, "the agents' last-write index", read_script(PACKAGE, "sql/written_index.sql")),
    (9, "store-level markers", read_script(PACKAGE, "sql/markers.sql")),
    (10, "group-commit batches written set-based", read_script(PACKAGE, "sql/batch.sql")),
    (11, "set-based batches with idempotency keys", read_script(PACKAGE, "sql/batch_keys.sql")),
    (12, "idempotency records' times", read_script(PACKAGE, "sql/key_times.sql")),
    (
        13,
        "the feed's trigger fires in every session; its frontier reads this database's locks",
        read_script(PACKAGE, "sql/feed_always.sql"),
    ),
    (
        14,
        "set-based batches probe heads and keys by index",
        read_script(PACKAGE, "sql/batch_plans.sql"),
    ),
    (
        15,
        "set-based batches keep one generic plan a connection",
        read_script(PACKAGE, "sql/batch_generic.sql"),
    ),
    (
        16,
        "set-based batches lock their heads in agent order, as rewrite pages do",
        read_script(PACKAGE, "sql/batch_lock_order.sql"),
    ),
    (
        17,
        "batches not set-based lock their fences' leases, then their heads, in agent order",
        read_script(PACKAGE, "sql/batch_fallback_order.sql"),
    ),
    (
        18,
        "row-security grants' prefixes: a run lock is read by the admins above or below it",
        read_script(PACKAGE, "sql/grant_prefix.sql")
        .replace(
            "@sk_grant_prefix@",
            named_blocks(read_script(PACKAGE, "sql/row_security.sql"))["grant_prefix"],
        )
        .replace(
            "@sk_run_lock@",
            named_blocks(read_script(PACKAGE, "sql/row_security_runlock.sql"))["function"],
        ),
    ),
    (
        19,
        "batches never JIT-compile (row security's checks cost as disabled seq scans)",
        read_script(PACKAGE, "sql/batch_no_jit.sql"),
    ),
    (
        20,
        "writes claim new agents first, then lock leases, then heads (the audit log's last)",
        read_script(PACKAGE, "sql/batch_claims.sql"),
    ),
    (
        21,
        "a fenced append creating a stream claims its head row before its lease",
        read_script(PACKAGE, "sql/fenced_claim.sql"),
    ),
    (
        22,
        "under row security a role deletes the head rows at 0 (claims) it may write",
        read_script(PACKAGE, "sql/claim_delete.sql"),
    ),
    (
        23,
        "a creation whose head row at 0 is deleted meanwhile inserts it again",
        read_script(PACKAGE, "sql/claim_gone.sql"),
    ),
    (
        24,
        "a write waits for the audit log's head a bounded time; claims left before 22 removed",
        read_script(PACKAGE, "sql/audit_head_lock.sql"),
    ),
    (
        25,
        "under row security a role updates some columns and deletes through functions:"
        " it cannot LOCK a table",
        table_locks.migration_sql(),
    ),
    (
        26,
        "under row security a role inserts the audit log's entries only up to the head it"
        " moved: it cannot hold the next one against every write",
        table_locks.audit_entries_sql(),
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]

#: the tables keyed by agent id, hash-partitioned on ``agent_id`` when asked
PARTITIONED_TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases")

#: the partitioned tables (sql/partitioned.sql): "tables", then "partition" per table
_PARTITIONED = named_blocks(read_script(PACKAGE, "sql/partitioned.sql"))

#: most partitions a schema may have (a plan over thousands of partitions is slow to
#: build; shard across servers beyond this)
MAX_PARTITIONS = 1024


def check_partitions(partitions: int | None) -> None:
    """Refuse a partition count that is not 1..MAX_PARTITIONS (None: not partitioned)."""
    if partitions is None:
        return
    if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigurationError(
            f"partitions must be a whole number from 1 to {MAX_PARTITIONS}, not {partitions!r}"
        )


async def partition_count(backend: PostgresPart) -> int:
    """How many hash partitions ``sk_events`` of the backend's schema has (0: a plain
    table)."""
    async with backend._connection() as conn:  # (also while opening: not _query)
        cur = await conn.execute(
            backend._sql["partitions"], (f"{_quoted(backend.schema)}.sk_events",)
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def opened(backend: PostgresPart) -> None:
    """Once the schema is in place, as the backend opens: its layout is checked
    (:func:`check_layout`) and whether row-level security is installed on it
    (:mod:`.row_security`) is read: its audit appends then carry their link
    (``Backend.audit_links``; ``Backend.reads_audit_log`` for a role of an admin of
    every namespace only), and its feed tombstones go to one stream per namespace
    when the policy installed knows them (``tombstones_by_namespace``: see
    :mod:`statekeeper.store.feed_deletes`), a forget's intent to one stream per
    namespace too when it knows those (``intents_by_namespace``: see
    :mod:`statekeeper.store.feed_intents`). A role bound by it deletes through the
    delete functions (:func:`.table_locks.bind_deletes`: it holds no DELETE), and under
    it the statements that wait on a lock any role may hold set their bound themselves
    (:func:`.table_locks.bind_lock_bounds`)."""
    await check_layout(backend)
    async with backend._connection() as conn:  # (while opening: not _query)
        schema = _quoted(backend.schema)
        await _check_home(backend, conn, schema)
        cur = await conn.execute(
            backend._sql["row_security"],
            (f"{schema}.sk_tombstones(text)", f"{schema}.sk_agents", f"{schema}.sk_feed_floor",
             f"{schema}.sk_feed_intents(text)", f"{schema}.sk_agents",
             f"{schema}.sk_del_agents(name,text[],bigint,bytea)", f"{schema}.sk_events"),
        )  # fmt: skip
        row = await cur.fetchone()
    if row and row[4]:  # (bound by row security: no DELETE privilege, migration 25)
        table_locks.bind_deletes(backend._sql, schema)
    if row and row[0]:  # (locks any tenant may hold: each transaction sets its bound)
        table_locks.bind_lock_bounds(backend._sql, milliseconds(backend.audit_lock_timeout))
    backend.audit_links = bool(row and row[0])
    backend.tombstones_by_namespace = bool(row and row[0] and row[1])
    backend.intents_by_namespace = bool(row and row[0] and row[1] and row[3])
    backend.reads_audit_log = not (row and row[0]) or bool(row[2])


async def _check_home(backend: PostgresPart, conn: Any, schema: str) -> None:
    """Refuse a schema whose functions name another schema's tables: it was renamed
    (``ALTER SCHEMA prod RENAME TO prod_old``), and its append functions still write
    to ``prod`` — acknowledged saves into whatever store now has that name, and the
    feed's frontier read from its events."""
    cur = await conn.execute(backend._sql["renamed"], (schema, f"{schema}.sk_"))
    row = await cur.fetchone()
    if row is None:
        return
    raise ConfigurationError(
        f"schema {backend.schema!r} was renamed: its function {row[0]} still writes to "
        f"the tables of schema {row[1]}, the name it was created with; rename it back "
        "(ALTER SCHEMA … RENAME TO …): to move a store, copy its agents to a new schema "
        "(`statekeeper export` / `import`)"
    )


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


async def check_layout(backend: PostgresPart) -> None:
    """The schema's layout must be the one the backend was asked for (``partitions``);
    a backend that did not ask accepts either."""
    if backend.partitions is None:
        return
    found = await partition_count(backend)
    if found != backend.partitions:
        layout = f"{found} hash partitions" if found else "no partitions"
        raise ConfigurationError(
            f"schema {backend.schema!r} was created with {layout}, not partitions="
            f"{backend.partitions}: the layout is chosen when a schema is created (open it "
            "without partitions=, or create a new schema and copy the agents over)"
        )


async def check_store(backend: PostgresPart) -> None:
    """Read-only opening: the schema must hold statekeeper's tables at the current
    migration (nothing is created or upgraded)."""
    async with backend._connection() as conn:
        table = sql.Identifier(backend.schema).as_string(conn) + ".sk_migrations"
        cur = await conn.execute("SELECT to_regclass(%s)", (table,))
        row = await cur.fetchone()
        if row is None or row[0] is None:
            raise NotAStore(
                f"schema {backend.schema!r}",
                "it holds no statekeeper tables; run `statekeeper init URL` to create one",
            )
        cur = await conn.execute(backend._sql["migrations"])
        newest = max((int(r[0]) for r in await cur.fetchall()), default=0)
    if newest < SCHEMA_VERSION:
        raise StoreSchemaOutdated(f"schema {backend.schema!r}", newest, SCHEMA_VERSION)
    if newest != SCHEMA_VERSION:
        raise ConfigurationError(
            f"schema {backend.schema!r} is at migration {newest}; this statekeeper reads "
            f"migration {SCHEMA_VERSION}: upgrade statekeeper"
        )


async def _current(backend: PostgresPart) -> bool:
    """True when the schema holds statekeeper's tables at the newest migration."""
    async with backend._connection() as conn:
        table = sql.Identifier(backend.schema).as_string(conn) + ".sk_migrations"
        cur = await conn.execute("SELECT to_regclass(%s)", (table,))
        row = await cur.fetchone()
        if row is None or row[0] is None:
            return False
        cur = await conn.execute(backend._sql["migrations"])
        return max((int(r[0]) for r in await cur.fetchall()), default=0) == SCHEMA_VERSION


async def migrate(backend: PostgresPart) -> None:
    """Create the schema (partitioned if asked) or bring it up to date, in one
    transaction under an advisory lock: concurrent starters in any number of processes
    serialise, and exactly one applies each migration."""
    schema = backend.schema
    ident = sql.Identifier(schema)
    if await _current(backend):
        return  # nothing to do (and a role without DDL rights may open the store)
    # unbounded: a migration of a big schema (or waiting for another starter's) may be long
    async with backend._connection(bounded=False) as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"statekeeper:{schema}",))
        await mark_created(conn, schema)  # a new schema: created, marked as the store's
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {s}").format(s=ident))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {s}.sk_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(s=ident)
        )
        cur = await conn.execute(backend._sql["migrations"])
        applied = {int(row[0]) for row in await cur.fetchall()}
        newest = max(applied, default=0)
        if newest > SCHEMA_VERSION:
            raise ConfigurationError(
                f"schema {schema!r} is at migration {newest}; this statekeeper "
                f"knows up to {SCHEMA_VERSION}: upgrade statekeeper"
            )
        if backend.partitions is not None and not applied:
            cur = await conn.execute(
                "SELECT to_regclass(%s)", (ident.as_string(conn) + ".sk_agents",)
            )
            row = await cur.fetchone()
            if row is None or row[0] is None:  # a new schema: create it partitioned
                logger.info("creating %s with %d hash partitions", schema, backend.partitions)
                # the tables and all their partitions in one round trip (a statement
                # each was 5 * N + 1 round trips, most of a new schema's set-up)
                partitions = [
                    sql.SQL(_PARTITIONED["partition"]).format(
                        s=ident,
                        t=sql.Identifier(table),
                        p=sql.Identifier(f"{table}_p{i}"),
                        n=sql.Literal(backend.partitions),
                        i=sql.Literal(i),
                    )
                    for table in PARTITIONED_TABLES
                    for i in range(backend.partitions)
                ]
                await conn.execute(
                    sql.SQL(" ").join(
                        [sql.SQL(_PARTITIONED["tables"]).format(s=ident), *partitions]
                    )
                )
        for version, label, body in MIGRATIONS:
            if version in applied:
                continue
            logger.info("applying migration %d (%s) to %s", version, label, schema)
            await conn.execute(sql.SQL(body).format(s=ident))
            await conn.execute(
                sql.SQL("INSERT INTO {s}.sk_migrations (version, name) VALUES (%s, %s)").format(
                    s=ident
                ),
                (version, label),
            )


async def drop_all(backend: PostgresPart) -> None:
    """Drop the store's tables (with their partitions), sequence and functions, and its
    schema only when the store created it and nothing else is in it (:mod:`.drop`)."""
    await drop_store(backend)
