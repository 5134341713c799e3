"""Statements per write of 16 LangGraph threads on PostgreSQL, counted at the client
(issue 12: round trips per write; ``pg_stat_statements`` is not needed).

Runs sides of ``bench_langgraph_concurrent.py postgres`` (same workload: ``--threads``
chats of ``--turns`` turns, ``durability="sync"``) in one process, each after a warm-up
run of every side (the schema migrated, the pools filled), and counts every statement
the process sends through psycopg's ``AsyncCursor.execute`` (``AsyncConnection.execute``
goes through it), by its first words. Reported per side: writes/s, the process's CPU per
write, statements per write, and with ``--by-statement`` the count of each statement.
A statement sent in a psycopg pipeline or by ``executemany`` is not counted (the peer
sends some that way). Compare two trees by running it with each on ``PYTHONPATH``,
alternated: wall-clock figures on a shared machine are noise, the counts are not.

Usage::

    .venv/bin/python benchmarks/bench_postgres_statements.py
    .venv/bin/python benchmarks/bench_postgres_statements.py --sides sk-group-loop --by-statement
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from psycopg import sql

import bench_langgraph_concurrent as conc  # type: ignore[import-not-found]

COUNTS: collections.Counter[str] = collections.Counter()


def count_statements() -> None:
    """Wrap ``AsyncCursor.execute`` to count each statement by its first words."""
    execute = psycopg.AsyncCursor.execute

    async def counted(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query.as_string(None) if hasattr(query, "as_string") else query
        if isinstance(text, bytes):
            text = text.decode()
        COUNTS[" ".join(str(text).split())[:60]] += 1
        return await execute(self, query, params, **kw)

    psycopg.AsyncCursor.execute = counted  # type: ignore[method-assign]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    schema = f"bench_pgst_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    out: dict[str, Any] = {"load": round(os.getloadavg()[0], 1)}
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        lg_dsn = f"{args.dsn}{'&' if '?' in args.dsn else '?'}options=-csearch_path%3D{schema}"
        async with AsyncPostgresSaver.from_conn_string(lg_dsn) as setup:
            await setup.setup()
        for side in args.sides:
            await conc.pg_side(side, args.dsn, schema, args)  # warm-up
        for side in args.sides:
            COUNTS.clear()
            result = await conc.pg_side(side, args.dsn, schema, args)
            writes = result["writes"]
            row: dict[str, Any] = {
                "writes_s": round(result["writes_s"]),
                "cpu_us_per_write": round(result["cpu_s"] / writes * 1e6),
                "statements_per_write": round(sum(COUNTS.values()) / writes, 3),
            }
            if args.by_statement:
                row["by_statement"] = {q: round(n / writes, 3) for q, n in COUNTS.most_common()}
            out[side] = row
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument(
        "--sides", nargs="+", default=["sk-group-loop", "sk-group", "lg-per-thread"]
    )
    parser.add_argument("--by-statement", action="store_true")
    parser.add_argument("--dsn", default=conc.DEFAULT_DSN)
    args = parser.parse_args()
    count_statements()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
