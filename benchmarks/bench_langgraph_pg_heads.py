"""PostgreSQL read statements of 16 concurrent LangGraph chats: how many head reads
(``head``/``head_tag`` alone, ``head_many``/``head_tag_many`` coalesced) the saver's
checked reads cost, and the writes per second.

Workload: ``bench_langgraph_concurrent``'s ``sk-group-loop`` side (16 ``ainvoke``
tasks on one loop, 10 turns each, ``durability="sync"`` graphs on a saver of
``afrom_url(..., durability="group")``), one fresh schema a round. Every statement the
backend's ``_query`` runs is counted by name (appends do not go through it). Run it
once per tree, alternating, for an A/B::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_pg_heads.py --rounds 1

``PYTHONPATH`` wins over this checkout (see ``_common``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from bench_langgraph_concurrent import concurrent

DEFAULT_DSN = os.environ.get(
    "STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


async def main() -> None:
    import psycopg

    from statekeeper.backends.postgres.backend import PostgresBackend
    from statekeeper.integrations.langgraph import StatekeeperSaver

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    query = PostgresBackend._query

    async def counted(
        self: PostgresBackend, name: str, params: Sequence[Any], *, lsn: int = 0
    ) -> list[tuple[Any, ...]]:
        counts[name] += 1
        return await query(self, name, params, lsn=lsn)

    PostgresBackend._query = counted  # type: ignore[method-assign]
    for n in range(args.rounds):
        schema = f"bench_heads_{uuid.uuid4().hex[:8]}"
        counts.clear()
        saver = await StatekeeperSaver.afrom_url(f"{args.dsn}?schema={schema}", durability="group")
        try:
            done = await concurrent(saver, args, uuid.uuid4().hex[:8])
        finally:
            await saver.aclose()
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
        heads = {k: v for k, v in sorted(counts.items()) if k.startswith("head")}
        print(
            f"round {n}: writes/s {done['writes_s']:.0f} head reads"
            f" {sum(heads.values())} {heads} all reads {sum(counts.values())}",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
