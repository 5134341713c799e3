"""The server's CPU of one group-commit batch (``sk_append_batch``) by what the store holds.

Creates a store (the migrations of the ``statekeeper`` on ``PYTHONPATH``: run it once per
tree to compare two), fills it with ``--others`` agents of other threads, each with one
idempotency record (as a LangGraph saver leaves them), then sends ``--batches`` batches
of ``--size`` keyed one-event appends (300-byte payloads, distinct agents, each batch on
the heads the previous one left) on one connection and reports the CPU its server
backend spent a batch (``/proc/<pid>/stat``, user + system; the server must run on this
machine), after ``--warm`` batches not counted (the connection's start, PL/pgSQL
compiled, the first custom plans).

``--snapshots``: each append carries a snapshot at its event, so the batch is not
set-based and runs ``sk_append`` per request (its fallback). ``--reset-settings``: the
function settings of migration 15 (``plan_cache_mode``, ``enable_seqscan`` on
``sk_append_batch``, which the ``sk_append`` it calls plans under too) removed from the
store first (``ALTER FUNCTION ... RESET ALL``), to compare with them kept.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_pg_batch_server.py --others 0 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid

import psycopg
from psycopg import sql

from statekeeper.backends.postgres import PostgresBackend

DEFAULT_DSN = os.environ.get(
    "STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)

TYPES = (
    "text", "bigint", "int", "text", "bigint", "float8", "bytea", "bytea", "bigint",
    "text", "float8", "bytea", "bytea", "bytea", "boolean", "bytea", "text", "bigint",
)  # fmt: skip


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(dsn: str, others: int, args: argparse.Namespace) -> float:
    schema = f"bench_pgb_{uuid.uuid4().hex[:8]}"
    asyncio.run(_create(dsn, schema))
    ident = sql.Identifier(schema)
    try:
        agents = [f"t{i}" for i in range(args.size)]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.sk_agents SELECT x, 1, 0, 0, NULL FROM unnest(%s::text[]) x"
                ).format(s=ident),
                (agents,),
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.sk_agents SELECT 'other-' || g, 1, 0, 0, NULL"
                    " FROM generate_series(1, %s) g"
                ).format(s=ident),
                (others,),
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)"
                    " SELECT 'other-' || g, 'k', 1, 1 FROM generate_series(1, %s) g"
                ).format(s=ident),
                (others,),
            )
        arrays = sql.SQL(", ").join(sql.SQL(f"%s::{t}[]") for t in TYPES)
        if args.reset_settings:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER FUNCTION {s}.sk_append_batch({t}) RESET ALL").format(
                        s=ident, t=sql.SQL(", ").join(sql.SQL(f"{t}[]") for t in TYPES)
                    )
                )
        call = sql.SQL("SELECT idx, status FROM {s}.sk_append_batch({a}) ORDER BY idx").format(
            s=ident, a=arrays
        )
        m, spent = args.size, 0.0
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            for k in range(args.warm + args.batches):
                if k == args.warm:
                    spent = -backend_cpu(pid)
                head = k + 1
                snap = args.snapshots
                params = (
                    agents, [head] * m, [1] * m, [f"k{head}-{i}" for i in range(m)],
                    [head + 1 if snap else None] * m, [float(head) if snap else None] * m,
                    [b"s" * 300 if snap else None] * m, [b"c" * 32 if snap else None] * m,
                    [head + 1] * m,
                    ["w"] * m, [float(head)] * m, [os.urandom(300) for _ in range(m)],
                    [b"c" * 32] * m, [None] * m, [False] * m, [None] * m, [None] * m,
                    [None] * m,
                )  # fmt: skip
                rows = conn.execute(call, params).fetchall()
                assert all(r[1] == 0 for r in rows), rows
            spent += backend_cpu(pid)
        return spent / args.batches
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(ident))


async def _create(dsn: str, schema: str) -> None:
    backend = PostgresBackend(dsn, schema=schema, max_size=1)
    await backend.open()
    await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--others", type=int, nargs="+", default=[0, 1000, 100000])
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--snapshots", action="store_true", help="batches run sk_append each")
    parser.add_argument("--reset-settings", action="store_true", help="without migration 15's")
    args = parser.parse_args()
    for others in args.others:
        runs = [run(args.dsn, others, args) for _ in range(args.rounds)]
        print(
            f"others {others:>7,}: server CPU a batch of {args.size}"
            f"{' with snapshots' if args.snapshots else ''}"
            f"{', settings reset' if args.reset_settings else ''}:"
            f" {statistics.median(runs) * 1e6:,.0f} µs"
            f" ({min(runs) * 1e6:,.0f}–{max(runs) * 1e6:,.0f}), load {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
