"""The claim "the same schema distributes on Citus with ``agent_id`` as the distribution
column", checked without Citus (none is installable here) on the PostgreSQL catalog of
a created schema, plain and hash-partitioned:

* Citus' rules for a distributed table hold: every primary key, unique constraint,
  unique index and exclusion constraint includes ``agent_id`` (on a partitioned
  schema; a plain one breaks it with exactly one index, ``sk_events_position``, as
  documented); every foreign key between distributed tables includes it on both
  sides; no reference table points at a distributed one; the distributed tables'
  ``agent_id`` columns have one type (co-location needs it); and every table of the
  schema is either distributed or a reference table.
* The ``create_distributed_table`` / ``create_reference_table`` /
  ``create_distributed_function`` block of ``docs/scale-postgres.md`` runs, against
  stand-ins with Citus' signatures that check what Citus checks first (the objects
  and columns it names exist, the function's distribution argument exists and has
  the column's type). It is not run on Citus itself; the docs say so.
* The statements that span agents are exactly the ones the docs' "What spans
  agents" table lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from statekeeper.backends.postgres import PostgresBackend

from ._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .test_postgres_partitioned import CROSS_AGENT

DOC = Path(__file__).parents[2] / "docs" / "scale-postgres.md"
DISTRIBUTED = {"sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases"}


@pytest.fixture(params=[None, 4], ids=["plain", "partitioned"])
def schema(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int | None]]:
    require_postgres()
    name = namespace(tmp_path, "sk_tc_")
    drop_schema(name)
    drop_schema(name + "_citus")
    yield name, request.param
    drop_schema(name)
    drop_schema(name + "_citus")


async def _create(name: str, partitions: int | None) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=name, max_size=2, partitions=partitions)
    await backend.open()
    await backend.close()


def _rows(query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        return conn.execute(query, params or None).fetchall()


def _doc_section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def _doc_citus_sql() -> list[str]:
    block = re.search(r"```sql\n(.*?)```", _doc_section("### On a sharded PostgreSQL"), re.S)
    assert block is not None, "docs/scale-postgres.md lost its Citus SQL block"
    return [s.strip() for s in block.group(1).split(";") if s.strip()]


def _doc_reference_tables() -> set[str]:
    return {
        m.group(1)
        for s in _doc_citus_sql()
        if (m := re.search(r"create_reference_table\('prod\.(\w+)'\)", s))
    }


async def test_the_schema_follows_citus_rules_for_distributed_tables(
    schema: tuple[str, int | None],
) -> None:
    name, partitions = schema
    await _create(name, partitions)
    tables = {
        r[0]: r[1]
        for r in _rows(
            "SELECT c.relname, c.oid FROM pg_class c JOIN pg_namespace n ON n.oid ="
            " c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition",
            name,
        )
    }
    reference = _doc_reference_tables()
    # every table is classified: distributed on agent_id, or a (small) reference table
    assert set(tables) == DISTRIBUTED | reference, "a table is neither distributed nor reference"
    agent_col = {
        r[0]: (r[1], r[2])
        for r in _rows(
            "SELECT c.relname, a.attnum, format_type(a.atttypid, a.atttypmod) FROM pg_class c"
            " JOIN pg_attribute a ON a.attrelid = c.oid JOIN pg_namespace n ON n.oid ="
            " c.relnamespace WHERE n.nspname = %s AND a.attname = 'agent_id'"
            " AND NOT a.attisdropped AND NOT c.relispartition AND c.relkind IN ('r', 'p')",
            name,
        )
    }
    assert set(agent_col) >= DISTRIBUTED
    assert {agent_col[t][1] for t in DISTRIBUTED} == {"text"}  # co-location: one type

    constraints = _rows(
        "SELECT conrelid::regclass::text, conname, contype, conkey, confrelid::regclass::text,"
        " confkey FROM pg_constraint WHERE connamespace = %s::regnamespace"
        " AND contype IN ('p', 'u', 'x', 'f') AND conparentid = 0",
        name,
    )
    checked = 0
    for table, con, kind, keys, ref_table, ref_keys in constraints:
        table = table.split(".")[-1]
        ref = ref_table.split(".")[-1] if ref_table != "-" else None
        if table not in DISTRIBUTED:
            assert kind != "f" or ref not in DISTRIBUTED, f"{table}.{con}: reference -> distributed"
            continue
        attnum = agent_col[table][0]
        if kind in ("p", "u", "x"):
            assert attnum in keys, f"{table}.{con} ({kind}) does not include agent_id"
        elif ref in DISTRIBUTED:  # a foreign key between distributed tables
            pairs = dict(zip(keys, ref_keys, strict=True))
            assert pairs.get(attnum) == agent_col[ref][0], f"{table}.{con} not on agent_id"
        checked += 1
    assert checked >= len(DISTRIBUTED)  # at least each primary key was looked at
    # unique indexes (those of the constraints too) obey the same rule
    violations: list[str] = []
    for table, index, keys in _rows(
        "SELECT t.relname, i.relname, x.indkey::int2[] FROM pg_index x JOIN pg_class i ON"
        " i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON"
        " n.oid = t.relnamespace WHERE n.nspname = %s AND x.indisunique AND NOT"
        " t.relispartition",
        name,
    ):
        if table in DISTRIBUTED and agent_col[table][0] not in keys:
            violations.append(f"unique index {index}")
    # the plain layout's feed index is unique on (position) alone, which Citus refuses:
    # the docs say to distribute a schema created with partitions=N
    assert violations == ([] if partitions else ["unique index sk_events_position"])


_STUBS = """
CREATE TABLE {s}.calls (fn text, target text, arg text, colocate text);
CREATE FUNCTION {s}.create_distributed_table(
    table_name regclass, distribution_column text, distribution_type text DEFAULT 'hash',
    colocate_with text DEFAULT 'default', shard_count int DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE t regtype; c regtype;
BEGIN
  SELECT atttypid INTO t FROM pg_attribute WHERE attrelid = table_name
    AND attname = distribution_column AND NOT attisdropped;
  IF t IS NULL THEN RAISE EXCEPTION 'column % of % does not exist', distribution_column,
    table_name; END IF;
  IF colocate_with <> 'default' THEN
    SELECT atttypid INTO c FROM pg_attribute WHERE attrelid = colocate_with::regclass
      AND attname = distribution_column;
    IF c IS DISTINCT FROM t THEN RAISE EXCEPTION 'cannot colocate % with %', table_name,
      colocate_with; END IF;
  END IF;
  INSERT INTO {s}.calls VALUES ('table', table_name::text, distribution_column,
    colocate_with);
END $$;
CREATE FUNCTION {s}.create_reference_table(table_name regclass) RETURNS void
LANGUAGE sql AS $$ INSERT INTO {s}.calls VALUES ('reference', table_name::text, NULL, NULL) $$;
CREATE FUNCTION {s}.create_distributed_function(
    function_name regprocedure, distribution_arg_name text DEFAULT NULL,
    colocate_with text DEFAULT 'default', force_delegation bool DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE i int; ty regtype;
BEGIN
  SELECT array_position(proargnames, distribution_arg_name) INTO i FROM pg_proc
    WHERE oid = function_name;
  IF i IS NULL THEN RAISE EXCEPTION '% has no argument %', function_name,
    distribution_arg_name; END IF;
  SELECT proargtypes[i - 1] INTO ty FROM pg_proc WHERE oid = function_name;
  IF ty <> 'text'::regtype THEN RAISE EXCEPTION 'argument % is %', distribution_arg_name, ty;
  END IF;
  INSERT INTO {s}.calls VALUES ('function', function_name::text, distribution_arg_name,
    colocate_with);
END $$;
"""


async def test_the_documented_citus_sql_names_what_the_schema_has(
    schema: tuple[str, int | None],
) -> None:
    name, partitions = schema
    await _create(name, partitions)
    stubs = name + "_citus"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(stubs)))
        conn.execute(_STUBS.format(s=stubs).encode())
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(stubs)))
        for statement in _doc_citus_sql():
            conn.execute(statement.replace("'prod.", f"'{name}.").encode())
        calls = conn.execute(
            sql.SQL("SELECT fn, target, arg, colocate FROM {}.calls").format(sql.Identifier(stubs))
        ).fetchall()
    tables = {t.split(".")[-1]: (arg, co) for fn, t, arg, co in calls if fn == "table"}
    assert set(tables) == DISTRIBUTED
    assert {arg for arg, _ in tables.values()} == {"agent_id"}
    assert {co.split(".")[-1] for t, (_, co) in tables.items() if t != "sk_agents"} == {"sk_agents"}
    functions = [(t, arg) for fn, t, arg, _ in calls if fn == "function"]
    assert [t.split("(")[0].split(".")[-1] for t, _ in functions] == ["sk_append"]


def test_the_statements_that_span_agents_are_the_documented_ones() -> None:
    table = _doc_section("### What spans agents")
    listed: list[str] = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("operation", "---"):
            listed += re.findall(r"`(\w+)`", cells[3])
    assert len(listed) == len(set(listed)), "a statement is listed twice"
    assert set(listed) == CROSS_AGENT
