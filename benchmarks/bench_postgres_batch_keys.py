"""Server and client CPU per append of a PostgreSQL group-commit batch, with and without
idempotency keys (issue 12: a LangGraph saver's writes carry keys, 3 of a chat turn's 5).

Workload: ``--streams`` existing streams; ``--batches`` calls of
``PostgresBackend.append_batch`` with ``--size`` one-event appends to distinct streams
(600-byte payloads), the first ``--keys`` of each batch with a fresh idempotency key.
Reported per append: the server's CPU (user + system time of the server's live
processes, read from ``/proc``: the server must run on this machine, so give the
postmaster's pid with ``--postmaster``, e.g. ``head -1 $PGDATA/postmaster.pid``), the
client's ``process_time``, and the wall per batch. Compare two trees by running it
with each on ``PYTHONPATH``, alternated (each run makes a fresh schema, migrated by the
tree that runs).

Usage::

    .venv/bin/python benchmarks/bench_postgres_batch_keys.py --postmaster PID \\
        --dsn postgresql://postgres@127.0.0.1:5439/test --keys 4 --size 14
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.records import AppendRequest, RawEvent

DEFAULT_DSN = os.environ.get(
    "STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server's live processes (the postmaster's children)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster or int(entry.name) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / tick


async def run(args: argparse.Namespace) -> tuple[float, float, float]:
    schema = f"bench_bk_{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(args.dsn, schema=schema, max_size=2)
    payload = os.urandom(600)

    def event(seq: int) -> RawEvent:
        return RawEvent(seq, "put", float(seq), payload, os.urandom(32))

    try:
        await backend.open()
        agents = [f"a{i}" for i in range(args.streams)]
        await backend.append_batch([AppendRequest(a, 0, (event(1),)) for a in agents])
        heads = dict.fromkeys(agents, 1)
        cpu, server, wall = time.process_time(), server_cpu(args.postmaster), time.perf_counter()
        for b in range(args.batches):
            pick = [agents[(b * args.size + j) % args.streams] for j in range(args.size)]
            requests = [
                AppendRequest(
                    a,
                    heads[a],
                    (event(heads[a] + 1),),
                    None,
                    f"k{b}-{j}" if j < args.keys else None,
                )
                for j, a in enumerate(pick)
            ]
            results = await backend.append_batch(requests)
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise SystemExit(f"append_batch failed: {failed[0]!r}")
            for a in pick:
                heads[a] += 1
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        server = server_cpu(args.postmaster) - server
    finally:
        await backend.close()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    n = args.batches * args.size
    return server / n * 1e6, cpu / n * 1e6, wall / args.batches * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postmaster", type=int, required=True)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--size", type=int, default=7)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if not 2 <= args.size <= args.streams or not 0 <= args.keys <= args.size:
        parser.error("need 2 <= --size <= --streams and 0 <= --keys <= --size")
    for _ in range(args.runs):
        server, client, wall = asyncio.run(run(args))
        print(
            f"size {args.size} keys {args.keys}: server {server:.0f} us/append,"
            f" client {client:.0f} us/append, wall {wall:.2f} ms/batch"
            f" (load {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
