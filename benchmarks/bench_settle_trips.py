"""A settle's statements and round trips on PostgreSQL and Redis (h/settleall): the
settle that replaces the row before it (``snapshot_every=10``: 12 saves, a settle at 12,
two saves, the measured settle at 14 removing the row at 12), per agent.

Counted by patching the drivers in this process: PostgreSQL statements
(``psycopg.AsyncCursor.execute``/``executemany``) and transactions
(``AsyncConnection.transaction``: its BEGIN and COMMIT, two round trips more each);
Redis commands (``redis.asyncio`` ``execute_command``: a script is one EVALSHA).
Wall time per settle: median [min..max] over the agents. Run it on both sides:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_settle_trips.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from typing import Any

import psycopg
import redis.asyncio.client as redis_client

from statekeeper import StateStore

PG = os.environ.get("STATEKEEPER_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("STATEKEEPER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AGENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 30

counts: Counter[str] = Counter()


def _patch() -> None:
    cur_exec = psycopg.AsyncCursor.execute
    cur_many = psycopg.AsyncCursor.executemany
    transaction = psycopg.AsyncConnection.transaction
    command = redis_client.Redis.execute_command

    async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["pg statements"] += 1
        return await cur_exec(self, *args, **kwargs)

    async def executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["pg statements"] += 1
        return await cur_many(self, *args, **kwargs)

    def tx(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["pg transactions"] += 1
        return transaction(self, *args, **kwargs)

    async def cmd(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["redis commands"] += 1
        if os.environ.get("SK_TRIPS_DETAIL"):
            counts[f"redis {args[0]}"] += 1
        return await command(self, *args, **kwargs)

    psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = executemany  # type: ignore[method-assign]
    psycopg.AsyncConnection.transaction = tx  # type: ignore[method-assign]
    redis_client.Redis.execute_command = cmd  # type: ignore[method-assign]


async def run(engine: str) -> None:
    ns = "sk_bench_" + uuid.uuid4().hex[:12]
    url = f"{PG}?schema={ns}" if engine == "postgresql" else f"{REDIS}?prefix={ns}:"
    per: list[Counter[str]] = []
    walls: list[float] = []
    try:
        async with StateStore(url, snapshot_every=10, settle_after=None) as store:
            for i in range(AGENTS):
                agent = f"a{i}"
                for n in range(1, 13):
                    await store.save(agent, {"n": n, "text": "x" * 300})
                assert await store.settle(agent) == 12
                for n in range(13, 15):
                    await store.save(agent, {"n": n, "text": "x" * 300})
                before = counts.copy()
                t0 = time.perf_counter()
                assert await store.settle(agent) == 14
                walls.append((time.perf_counter() - t0) * 1e6)
                per.append(counts - before)
                assert (await store.backend.latest_snapshot(agent, 13)).seq == 10  # type: ignore[union-attr]
    finally:
        if engine == "postgresql":
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{ns}" CASCADE')  # type: ignore[arg-type]
        else:
            import redis

            r = redis.Redis.from_url(REDIS)
            keys = list(r.scan_iter(f"{ns}:*"))
            if keys:
                r.delete(*keys)
    keys = sorted({k for c in per for k in c})
    shown = ", ".join(f"{k}: {statistics.median(c[k] for c in per):g}" for k in keys)
    print(
        f"{engine}: a settle {shown}; wall µs {statistics.median(walls):,.0f}"
        f" [{min(walls):,.0f}..{max(walls):,.0f}] ({AGENTS} agents)"
    )


async def main() -> None:
    _patch()
    for engine in ("postgresql", "redis"):
        await run(engine)


if __name__ == "__main__":
    asyncio.run(main())
