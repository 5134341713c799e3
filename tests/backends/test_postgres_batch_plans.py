"""PostgreSQL: a set-based group-commit batch probes the heads and keys it names by
index, whatever the store holds (migration 14).

The batch of migration 12 listed its requests with ``generate_subscripts``, which the
planner counts as 1,000 rows: for 1,000 probes it hashed whole tables instead — every
idempotency record of the store (the key check ran as a hashed subplan) and every head
(the compare-and-set's hash join) — read at each batch, a batch's server CPU growing
with the store. The scans are counted from ``pg_stat_xact_user_tables`` in the batch's
own transaction (rolled back: the store is left as it was).
"""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.testing import request

from ._services import POSTGRES_DSN

#: others' agents and keys already stored: enough pages that probing two by index is
#: the plan for a batch of two, and hashing them all is for a batch of 1,000
OTHERS = 3000


def _batch_call(schema: str) -> str:
    s = '"' + schema.replace('"', '""') + '"'
    arrays = ", ".join(
        f"%s::{t}[]"
        for t in (
            "text", "bigint", "int", "text", "bigint", "float8", "bytea", "bytea", "bigint",
            "text", "float8", "bytea", "bytea", "bytea", "boolean", "bytea", "text", "bigint",
        )
    )  # fmt: skip
    return f"SELECT idx, status, a, b FROM {s}.sk_append_batch({arrays}) ORDER BY idx"


@pytest.mark.parametrize(
    ("keys", "expected", "settled"),
    [
        (["ka", None], [1, 1], [(1, 0, 2, 2), (2, 0, 2, 2)]),
        ([None, None], [1, 1], [(1, 0, 2, 2), (2, 0, 2, 2)]),
        # b's head is 1, not 5: a conflict, settled by the batch's second statement
        (["ka", "kb"], [1, 5], [(1, 0, 2, 2), (2, 2, 1, 0)]),
    ],
    ids=["keyed", "no-keys", "keyed-conflict"],
)
async def test_a_batch_reads_no_table_whole(
    schema: str, keys: list[str | None], expected: list[int], settled: list[tuple[int, ...]]
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
    finally:
        await backend.close()
    s = '"' + schema.replace('"', '""') + '"'
    with psycopg.connect(POSTGRES_DSN) as conn:  # one transaction, rolled back
        conn.execute(
            f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
            " SELECT 'other-' || g, 1, 0, 0 FROM generate_series(1, %s) g",
            (OTHERS,),
        )
        conn.execute(
            f"INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)"
            " SELECT 'other-' || g, 'k', 1, 1 FROM generate_series(1, %s) g",
            (OTHERS,),
        )
        before = _scans(conn, s)
        none = [None, None]
        params = (
            ["a", "b"], expected, [1, 1], keys, none, none, none, none, [2, 2], ["e", "e"],
            [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none, [False, False], none, none, none,
        )  # fmt: skip
        rows = conn.execute(_batch_call(schema), params).fetchall()
        assert rows == settled
        after = _scans(conn, s)
        conn.rollback()
    read_whole = {t: after[t] - before[t] for t in after if after[t] > before[t]}
    assert read_whole == {}, f"the batch scanned whole tables: {read_whole}"


async def test_a_connection_keeps_one_generic_plan_probing_by_index(schema: str) -> None:
    """Migration 15: on a pool connection's later calls (past PL/pgSQL's five custom
    plans) the batch's compare-and-set runs one generic plan (parameters, not the call's
    arrays as constants: with ``plan_cache_mode = auto`` it was re-planned on most calls,
    100-500 us each) and still probes the heads and keys by index, on a store never
    analyzed too (a generic plan counts ``unnest(p_agents)`` as 10 rows: hashing a whole
    small table looked cheaper, and the plan is kept for the connection's life)."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
    finally:
        await backend.close()
    s = '"' + schema.replace('"', '""') + '"'
    plans: list[str] = []
    with psycopg.connect(POSTGRES_DSN) as conn:  # one transaction, rolled back
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        conn.execute(
            f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
            " SELECT 'other-' || g, 1, 0, 0 FROM generate_series(1, %s) g",
            (OTHERS,),
        )
        conn.execute(
            f"INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)"
            " SELECT 'other-' || g, 'k', 1, 1 FROM generate_series(1, %s) g",
            (OTHERS,),
        )
        conn.execute("LOAD 'auto_explain'")  # the eighth call's plans, as notices
        before = _scans(conn, s)
        none = [None, None]
        for head in range(1, 9):  # eight calls on this connection
            if head == 8:
                conn.execute("SET LOCAL auto_explain.log_min_duration = 0")
                conn.execute("SET LOCAL auto_explain.log_nested_statements = on")
                conn.execute("SET LOCAL auto_explain.log_level = notice")
            params = (
                ["a", "b"], [head, head], [1, 1], [f"k{head}", None], none, none, none, none,
                [head + 1] * 2, ["e", "e"], [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none,
                [False, False], none, none, none,
            )  # fmt: skip
            rows = conn.execute(_batch_call(schema), params).fetchall()
            assert rows == [(1, 0, head + 1, head + 1), (2, 0, head + 1, head + 1)]
        after = _scans(conn, s)
        conn.rollback()
    read_whole = {t: after[t] - before[t] for t in after if after[t] > before[t]}
    assert read_whole == {}, f"the batches scanned whole tables: {read_whole}"
    update = [p.split("Update on sk_agents", 1)[1] for p in plans if "Update on sk_agents" in p]
    assert len(update) == 1, plans
    assert "Index Scan using sk_agents_pkey" in update[0], update[0]
    assert "Index Scan using sk_idempotency_pkey" in update[0], update[0]
    assert "::bigint[]" not in update[0], f"a custom plan (the call's arrays): {update[0]}"


def _scans(conn: psycopg.Connection, s: str) -> dict[str, int]:
    """Sequential scans of the store's head and key tables in this transaction."""
    rows = conn.execute(
        "SELECT relname, seq_scan FROM pg_stat_xact_user_tables"
        " WHERE relid IN (to_regclass(%s), to_regclass(%s))",
        (f"{s}.sk_agents", f"{s}.sk_idempotency"),
    ).fetchall()
    return {str(name): int(n) for name, n in rows}
