"""PostgreSQL hash-partitioned by agent id (``partitions=N``): the whole backend contract
on a partitioned schema, the layout itself, and that a statement about one agent touches
one partition of each table (EXPLAIN, with custom and generic plans, and the locks an
append takes). Each test outside the contract class creates its own schema on the shared
server and drops it after.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg
from psycopg import sql

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend, parse_postgres_url
from statekeeper.backends.postgres.backend import _QUERIES
from statekeeper.backends.postgres.schema import PARTITIONED_TABLES
from statekeeper.errors import ConfigurationError
from statekeeper.testing import BackendConformance, request

from ._services import (
    POSTGRES_DSN,
    ReusedPostgresSchema,
    drop_schema,
    namespace,
    require_postgres,
)

PARTITIONS = 4


@pytest.fixture
def schema(tmp_path: Path) -> Iterator[str]:
    require_postgres()
    name = namespace(tmp_path, "sk_tp_")
    drop_schema(name)
    yield name
    drop_schema(name)


class TestPartitionedPostgresConformance(ReusedPostgresSchema, BackendConformance):
    """Every test of the contract, on a schema created with 4 hash partitions (one per
    class, emptied before each test: see ReusedPostgresSchema)."""

    schema_prefix = "sk_tp_"

    def _backend(self, tmp_path: Path, **options: Any) -> PostgresBackend:
        return PostgresBackend(
            POSTGRES_DSN,
            schema=self.schema,
            max_size=4,
            partitions=PARTITIONS,
            **options,
        )

    async def make_backend(self, tmp_path: Path) -> PostgresBackend:
        return self._backend(tmp_path)

    async def open_peer(self, tmp_path: Path) -> PostgresBackend:
        return self._backend(tmp_path)

    async def open_readonly(self, tmp_path: Path) -> PostgresBackend:
        return self._backend(tmp_path, readonly=True)


def _rows(query: str | sql.Composed, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


async def _created(schema: str, partitions: int | None = PARTITIONS) -> PostgresBackend:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, partitions=partitions)
    await backend.open()
    return backend


async def test_every_agent_table_is_hash_partitioned_on_agent_id(schema: str) -> None:
    backend = await _created(schema)
    try:
        await backend.append(request("a", 0))
        assert (await backend.health()).detail["partitions"] == PARTITIONS
    finally:
        await backend.close()
    layout = _rows(
        "SELECT c.relname, p.partstrat, a.attname,"
        " (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid)"
        " FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]"
        " WHERE n.nspname = %s ORDER BY 1",
        schema,
    )
    assert layout == [(t, "h", "agent_id", PARTITIONS) for t in sorted(PARTITIONED_TABLES)]
    # every table with an agent_id column has it in its primary key
    keys = _rows(
        "SELECT c.relname, a.attname = ANY (SELECT k.attname FROM pg_attribute k"
        "  WHERE k.attrelid = c.oid AND k.attnum = ANY (con.conkey))"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'agent_id'"
        " JOIN pg_constraint con ON con.conrelid = c.oid AND con.contype = 'p'"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
        schema,
    )
    assert len(keys) == len(PARTITIONED_TABLES) * (PARTITIONS + 1)
    assert all(in_key for _, in_key in keys)


async def test_the_layout_is_kept_and_a_different_one_is_refused(schema: str) -> None:
    backend = await _created(schema)
    await backend.append(request("a", 0))
    await backend.close()
    # opened without partitions=: works on the partitioned schema
    plain = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        assert await plain.head("a") == 1
    finally:
        await plain.close()
    other = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, partitions=8)
    try:
        with pytest.raises(ConfigurationError, match="created with 4 hash partitions"):
            await other.open()
    finally:
        await other.close()


async def test_an_existing_plain_schema_keeps_working_and_is_not_repartitioned(
    schema: str,
) -> None:
    plain = await _created(schema, partitions=None)
    await plain.append(request("a", 0))
    await plain.close()
    again = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        assert await again.head("a") == 1
    finally:
        await again.close()
    asked = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2, partitions=4)
    try:
        with pytest.raises(ConfigurationError, match="created with no partitions"):
            await asked.open()
    finally:
        await asked.close()
    assert _rows(
        "SELECT count(*) FROM pg_partitioned_table p JOIN pg_class c"
        " ON c.oid = p.partrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s",
        schema,
    ) == [(0,)]


@pytest.mark.parametrize("bad", ["0", "-1", "two", "100000"])
def test_a_bad_partition_count_is_a_typed_error(bad: str) -> None:
    url = f"postgresql://u:secret@h/db?partitions={bad}"
    with pytest.raises(ConfigurationError, match="partitions") as info:
        dsn, kwargs = parse_postgres_url(url)
        PostgresBackend(dsn, **kwargs)
    assert "secret" not in str(info.value)


def test_partitions_and_replica_url_come_from_the_url() -> None:
    dsn, kwargs = parse_postgres_url(
        "postgresql://h/db?partitions=16&sslmode=disable"
        "&replica_url=postgresql%3A%2F%2Freplica%3A5433%2Fdb"
    )
    assert kwargs == {"partitions": 16, "replica_url": "postgresql://replica:5433/db"}
    assert "partitions" not in dsn and "replica" not in dsn and "sslmode=disable" in dsn


# -- routing: one agent, one partition ---------------------------------------------------

#: the statements about one agent (sql/queries.sql), with sample parameters; every
#: other statement is a listing, a count or the feed (across agents by definition)
SINGLE_AGENT: dict[str, tuple[object, ...]] = {
    "key": ("agent-7", "k"),
    "keys": ("agent-7",),
    "lease_get": ("agent-7",),
    "lease_next": ("agent-7",),
    "lease_renew": (5.0, "agent-7", "h", 1),
    "lease_release": ("agent-7", "h", 1),
    "lease_release_again": ("agent-7", "h", 1),
    "rw_lock": ("agent-7",),
    "rw_tag": (b"t", "agent-7"),
    "head": ("agent-7",),
    "head_tag": ("agent-7",),
    "read": ("agent-7", 0, 10, 10),
    "read_latest": ("agent-7", "agent-7"),
    "read_state": ("agent-7", "agent-7", "agent-7"),
    "seq_at": ("agent-7", 1.0),
    "snap_latest": ("agent-7", 10),
    "del_agent": ("agent-7",),
    "del_agent_at": ("agent-7", 3),
    "del_agent_at_sum": ("agent-7", 3, b"c"),
    "del_events": ("agent-7",),
    "del_snaps": ("agent-7",),
    "del_keys": ("agent-7",),
    "expire_agent_keys": ("agent-7", 1.0),
    "key_rename": ("n", "agent-7", "k", "agent-7", "n"),
    "key_drop": ("agent-7", "k"),
    "prune_lock": ("agent-7", 1, "agent-7"),
    "prune_head_sum": ("agent-7", 3),
    "prune_base": ("agent-7",),
    "prune_events": ("agent-7", 1),
    "prune_snaps_below": ("agent-7", 1),
    "prune_snaps": ("agent-7", [1, 2]),
    "rw_events": ([1], [b"p"], [b"c"], "agent-7"),
    "snap_save": ("agent-7", 1, 1.0, b"s", b"c", "agent-7", 1),
}

#: the inserts about one agent: PostgreSQL routes each row to its partition as it is
#: inserted (the plan names only the parent), so they are checked through their locks
ROUTED = {
    "append",
    "append1",
    "key_keep",
    "lease_acquire",
    "lease_put",
    "rw_snap",
}

#: the statements that span agents (documented in docs/scale-postgres.md)
CROSS_AGENT = {
    "absent_claim",
    "absent_heads",
    "absent_release",
    "append_batch",
    "rw_many",
    "rw_many_lock",
    "together_leases",
    "read_many",
    "head_many",
    "head_tag_many",
    "read_latest_many",
    "read_heads",
    "list",
    "list_all",
    "list_before",
    "list_last",
    "list_newest_written",
    "list_newest_written_after",
    "list_oldest_written",
    "list_oldest_written_after",
    "lease_list",
    "lease_carry",
    "count",
    "count_prefix",
    "orphaned_events",
    "migrations",
    "feed_frontier",
    "feed_frontier_lsn",
    "feed_read",
    "feed_read_id",
    "feed_floor",
    "feed_trim",
    "feed_floor_over",
    "feed_trimmed",
    "feed_handed_out",
    "feed_position",
    "partitions",
    "row_security",
    "in_recovery",
    "renamed",
    "marker_read",
    "marker_set",
    "feed_id_lock",
    "feed_id_read",
    "expire_keys",
    "count_expired_keys",
    "expired_key_left",
    "rls_applies",
    "rls_may_write",
    "rls_run_locks",
    "rls_may_lock",
}


def _numbered(query: str) -> str:
    """``%s`` / ``%(name)s`` placeholders as ``$1``, ``$2``… (for PREPARE)."""
    count = 0
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        nonlocal count
        name = match.group(1)
        if name is not None and name in names:
            return f"${names[name]}"
        count += 1
        if name is not None:
            names[name] = count
        return f"${count}"

    return re.sub(r"%(?:\((\w+)\))?s", number, query)


def _partitions_in(plan: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for table, part in re.findall(r"\b(sk_\w+?)_p(\d+)\b", plan):
        found.setdefault(table, set()).add(part)
    return found


def test_every_statement_is_classified() -> None:
    assert set(_QUERIES) == set(SINGLE_AGENT) | ROUTED | CROSS_AGENT
    assert len(SINGLE_AGENT) + len(ROUTED) + len(CROSS_AGENT) == len(_QUERIES)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_statement_about_one_agent_touches_one_partition(schema: str, mode: str) -> None:
    """EXPLAIN every single-agent statement: each table it reads or writes shows one
    partition (custom plans prune when planning; generic ones — prepared statements,
    and PL/pgSQL after five calls — when the executor starts: "Subplans Removed")."""
    backend = await _created(schema)
    await backend.close()
    ident = sql.Identifier(schema)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        cur = psycopg.ClientCursor(conn)
        cur.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.SQL(mode)))
        for name, params in SINGLE_AGENT.items():
            text = sql.SQL(_numbered(_QUERIES[name])).format(s=ident).as_string(cur)
            cur.execute(f"PREPARE q AS {text}")
            try:
                args = sql.SQL(", ").join(sql.Literal(p) for p in params)
                cur.execute(sql.SQL("EXPLAIN EXECUTE q({})").format(args))
                plan = "\n".join(str(r[0]) for r in cur.fetchall())
            finally:
                cur.execute("DEALLOCATE q")
            # the partitions scanned (a generic UPDATE / DELETE still lists every
            # partition as a result relation, but scans — and so touches — only those
            # left after pruning: "Subplans Removed")
            touched = _partitions_in("\n".join(ln for ln in plan.splitlines() if "Scan" in ln))
            assert touched, f"{name}: no partition in the plan:\n{plan}"
            assert all(len(parts) == 1 for parts in touched.values()), f"{name}:\n{plan}"
            assert len(set().union(*touched.values())) == 1, f"{name}:\n{plan}"


async def test_an_append_locks_one_partition_of_each_table(schema: str) -> None:
    """The append function (and a lease grant, and a snapshot write) inside one
    transaction: the relation locks it holds name one partition per table, the agent's."""
    backend = await _created(schema)
    await backend.close()
    store_sql = {name: _QUERIES[name] for name in ("append1", "lease_acquire", "rw_snap")}
    ident = sql.Identifier(schema)
    for agent in ("agent-7", "another-agent", "x"):
        with psycopg.connect(POSTGRES_DSN) as conn:  # a transaction, left open
            conn.execute(
                sql.SQL(store_sql["append1"]).format(s=ident),
                (agent, 0, 1, "patch", 1.0, b"p", b"c") + (None,) * 6 + (False, None, None, None),
            )
            conn.execute(
                sql.SQL(store_sql["lease_acquire"]).format(s=ident),
                {"agent": agent, "holder": "h", "ttl": 5.0},
            )
            conn.execute(
                sql.SQL(store_sql["rw_snap"]).format(s=ident),
                (agent, 1, 1.0, b"s", b"c"),
            )
            locks = conn.execute(
                "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE l.pid = pg_backend_pid() AND n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchall()
            conn.rollback()
        touched = _partitions_in(" ".join(r[0] for r in locks))
        assert set(touched) == {"sk_agents", "sk_events", "sk_snapshots", "sk_leases"}, locks
        assert all(len(parts) == 1 for parts in touched.values()), locks
        # the same remainder in every table: one agent, one shard
        assert len(set().union(*touched.values())) == 1, locks


async def test_a_store_on_a_partitioned_schema_saves_loads_and_follows_the_feed(
    schema: str,
) -> None:
    url = f"{POSTGRES_DSN}?schema={schema}&partitions={PARTITIONS}"
    async with StateStore(url) as store:
        for i in range(20):
            await store.save(f"team/agent-{i}", {"step": i})
        for i in range(20):
            assert (await store.load(f"team/agent-{i}")).data == {"step": i}
        changes = [c async for c in store.subscribe(stop_at_head=True)]
        assert sorted(c.agent_id for c in changes) == sorted(f"team/agent-{i}" for i in range(20))
        assert [c.position for c in changes] == sorted(c.position for c in changes)
    spread = _rows(
        sql.SQL("SELECT count(DISTINCT tableoid) FROM {s}.sk_agents").format(
            s=sql.Identifier(schema)
        )
    )
    assert spread == [(PARTITIONS,)]


async def test_a_partition_read_directly_shows_other_roles_nothing(schema: str) -> None:
    """Row-level security policies (governance's, on the parent tables) are not checked
    when a partition is queried directly; every partition has row security on with no
    policy, so a role that is not the owner sees rows only through the parent."""
    backend = await _created(schema)
    for i in range(8):
        await backend.append(request(f"agent-{i}", 0))
    await backend.close()
    role = f"{schema}_reader"
    ident, who = sql.Identifier(schema), sql.Identifier(role)
    _rows(sql.SQL("CREATE ROLE {}").format(who))
    try:
        _rows(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident, who))
        _rows(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ident, who))
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("SET ROLE {}").format(who))
            parent = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.sk_events").format(ident)
            ).fetchone()
            direct = [
                conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{}").format(
                        ident, sql.Identifier(f"sk_events_p{i}")
                    )
                ).fetchone()
                for i in range(PARTITIONS)
            ]
            conn.execute("RESET ROLE")
        assert parent == (8,)
        assert direct == [(0,)] * PARTITIONS
    finally:
        _rows(sql.SQL("DROP OWNED BY {}").format(who))
        _rows(sql.SQL("DROP ROLE {}").format(who))
