"""Where one side of ``bench_langgraph_concurrent.py postgres`` waits and spends CPU.

Runs one side (``memory``, ``sk-group-loop``, ``lg-per-thread``, ``sk-group-loop/1``, …:
the names of ``bench_langgraph_concurrent.py``) once as a warm-up and once measured, in
one process, and reports per write:

* the process's CPU, and the statements sent (``bench_postgres_statements.py``'s count);
* ``--waits``: the event loop's idle time (its ``select`` calls), a pool connection's
  wait (``AsyncConnectionPool.getconn``), and for statekeeper's group commit the time from
  ``GroupCommitter.submit`` to the commit, of which inside the append's batch
  (``_commit_batch``: the batch's statements and commit), and the appends a batch;
* ``--profile``: cProfile's self time grouped by package (statekeeper by sub-package),
  and the ``--top`` functions by self time. cProfile inflates every call: read shares,
  not microseconds. With ``--waits`` and ``--profile`` together the waits include the
  profiler's slowdown.

Only for sides whose work is on the benchmark's loop (``memory``, ``sk-*-loop``, the
peers): the loop-thread sides (``sk-group``) run statekeeper's work on another thread,
which cProfile does not see (its waits are measured).

Usage::

    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py sk-group-loop --waits
    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py memory --profile --top 30
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import os
import pstats
import selectors
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from psycopg import sql

import bench_langgraph_concurrent as conc  # type: ignore[import-not-found]
import bench_postgres_statements as statements  # type: ignore[import-not-found]

WAITS: collections.Counter[str] = collections.Counter()

AREAS = (
    "langgraph/checkpoint/postgres",
    "langgraph/checkpoint/memory",
    "langgraph/checkpoint/serde",
    "langgraph/",
    "langchain_core/",
    "psycopg_pool/",
    "psycopg/",
    "asyncio/",
)


def area(func: tuple[str, int, str]) -> str:
    """The package a profiled function belongs to (statekeeper by sub-package)."""
    path = func[0]
    if "statekeeper/" in path:
        return "statekeeper/" + path.split("statekeeper/")[-1].split("/")[0]
    for key in AREAS:
        if key in path:
            return key
    if path == "~":
        return "builtin: " + func[2][:48]
    return "other: " + os.path.basename(path)


def timed(owner: Any, name: str, total: str, count: str) -> None:
    """Wrap the coroutine method ``owner.name`` to add its wall time to WAITS[total]."""
    method = getattr(owner, name)

    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await method(self, *args, **kwargs)
        finally:
            WAITS[total] += time.perf_counter() - start
            WAITS[count] += 1

    setattr(owner, name, wrapper)


def instrument() -> None:
    from psycopg_pool import AsyncConnectionPool

    from statekeeper.store.durability import GroupCommitter

    select = selectors.EpollSelector.select

    def idle(self: Any, timeout: float | None = None) -> Any:
        start = time.perf_counter()
        try:
            return select(self, timeout)
        finally:
            WAITS["loop idle s"] += time.perf_counter() - start

    selectors.EpollSelector.select = idle  # type: ignore[method-assign]
    timed(GroupCommitter, "submit", "submit s", "submits")
    timed(AsyncConnectionPool, "getconn", "getconn s", "getconns")
    commit_batch = GroupCommitter._commit_batch

    async def batch(self: Any, items: list[Any]) -> None:
        start = time.perf_counter()
        try:
            await commit_batch(self, items)
        finally:
            took = time.perf_counter() - start
            WAITS["batches"] += 1
            WAITS["batched appends"] += len(items)
            WAITS["in batch s"] += took * len(items)

    GroupCommitter._commit_batch = batch  # type: ignore[method-assign]


def report_waits(writes: int) -> None:
    w = WAITS
    print(f"  loop idle a write: {w['loop idle s'] / writes * 1e6:,.0f} µs")
    if w["getconns"]:
        print(
            f"  pool getconn: {w['getconn s'] / w['getconns'] * 1e6:,.0f} µs a call,"
            f" {w['getconns'] / writes:.2f} calls a write"
        )
    if w["submits"]:
        print(
            f"  group commit: submit to committed {w['submit s'] / w['submits'] * 1e6:,.0f} µs,"
            f" of which in its batch {w['in batch s'] / w['batched appends'] * 1e6:,.0f} µs;"
            f" {w['batched appends'] / w['batches']:.2f} appends a batch"
        )


def report_profile(profile: cProfile.Profile, writes: int, top: int) -> None:
    stats = pstats.Stats(profile)
    by_area: collections.Counter[str] = collections.Counter()
    for func, (_, _, self_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        by_area[area(func)] += self_time
    total = sum(by_area.values())
    print(f"  profiled self time: {total / writes * 1e6:,.0f} µs a write (profiler included)")
    for name, seconds in by_area.most_common(20):
        print(f"  {seconds / writes * 1e6:8,.0f} µs  {seconds / total:5.1%}  {name}")
    if top:
        stats.sort_stats("tottime").print_stats(top)


async def run(args: argparse.Namespace) -> None:
    schema = f"bench_pgw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        lg_dsn = f"{args.dsn}{'&' if '?' in args.dsn else '?'}options=-csearch_path%3D{schema}"
        async with AsyncPostgresSaver.from_conn_string(lg_dsn) as setup:
            await setup.setup()
        await conc.pg_side(args.side, args.dsn, schema, args)  # warm-up
        statements.COUNTS.clear()
        WAITS.clear()
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        result = await conc.pg_side(args.side, args.dsn, schema, args)
        if profile is not None:
            profile.disable()
        writes = result["writes"]
        print(
            f"{args.side}: {result['writes_s']:,.0f} writes/s,"
            f" CPU {result['cpu_s'] / writes * 1e6:,.0f} µs a write,"
            f" {sum(statements.COUNTS.values()) / writes:.3f} statements a write,"
            f" load {os.getloadavg()[0]:.1f}"
        )
        for text, n in statements.COUNTS.most_common(8):
            print(f"  {n / writes:.3f}  {text}")
        if args.waits:
            report_waits(writes)
        if profile is not None:
            report_profile(profile, writes, args.top)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("side")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--dsn", default=conc.DEFAULT_DSN)
    parser.add_argument("--waits", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    statements.count_statements()
    if args.waits:
        instrument()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
