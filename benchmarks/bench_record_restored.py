"""Wall seconds of ``feed_deletes.record_restored`` (an import's / a tenant admin's
restore's seq-0 tombstones, each page's commit with an absence check of every agent)
for ``--n`` agents on PostgreSQL (a private schema, dropped after).

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately; compare the medians (wall time: the check's cost is statements, so the
server's round trips, not this process's CPU)."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time

import psycopg

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.store import feed_deletes

DSN = "postgresql://postgres@127.0.0.1:5432/test"


async def once(n: int) -> float:
    schema = f"bench_restored_{secrets.token_hex(4)}"
    try:
        async with StateStore(PostgresBackend(DSN, schema=schema), witness=False) as store:
            ids = [f"ns/a{i:05d}" for i in range(n)]
            started = time.perf_counter()
            await feed_deletes.record_restored(store.backend, store.codec, ids)
            return time.perf_counter() - started
    finally:
        async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def main(n: int, rounds: int) -> None:
    results = [await once(n) for _ in range(rounds)]
    low, mid = min(results), statistics.median(results)
    print(
        f"record_restored {n}\tmin {low:.3f} median {mid:.3f} s\t{[round(r, 3) for r in results]}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="agents")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
