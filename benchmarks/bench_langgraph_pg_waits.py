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
* ``--server``: the CPU the server's backends of the measured run spent a write (their
  ``/proc/<pid>/stat`` user + system time, sampled every 50 ms by a monitor connection
  that finds them by a fresh ``application_name`` given in the side's DSN; a backend's
  last sample counts, so its last < 50 ms are missed; ticks of 10 ms). Counts each
  backend's start (fork, ``configure``, catalog caches, PL/pgSQL compiled on its first
  call), as a fresh saver of the benchmark's round pays it. Needs the server on this
  machine, its ``/proc`` readable.
* ``--waits`` also counts the appends submitted while their agent had one in a batch in
  flight (they wait for that commit before theirs can start).
* ``--batch``: no graph: the client CPU of ``PostgresBackend.append_batch`` of 1, 2, 4
  and 8 one-event appends (distinct agents, 300-byte payloads), of the batch's statement
  alone (``_batch_once``: its pool checkout, parameters, round trip, rows), and of a bare
  ``SELECT 1`` through the backend's pool and on one plain connection: the fixed cost
  of a group-commit batch against a round trip's floor.

Only for sides whose work is on the benchmark's loop (``memory``, ``sk-*-loop``, the
peers): the loop-thread sides (``sk-group``) run statekeeper's work on another thread,
which cProfile does not see (its waits are measured).

Usage::

    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py sk-group-loop --waits
    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py memory --profile --top 30
    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py lg-per-thread --server
    .venv/bin/python benchmarks/bench_langgraph_pg_waits.py - --batch
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import os
import pstats
import selectors
import statistics
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
    submit = GroupCommitter.submit

    async def behind(self: Any, request: Any) -> Any:
        # the agent has an append in a batch in flight: this one waits for that commit
        if request.agent_id in self._busy:
            WAITS["behind own"] += 1
            start = time.perf_counter()
            try:
                return await submit(self, request)
            finally:
                WAITS["behind own s"] += time.perf_counter() - start
        return await submit(self, request)

    GroupCommitter.submit = behind  # type: ignore[method-assign]
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
        waited = w["behind own s"] / max(1, w["behind own"]) * 1e6
        print(
            f"  behind the agent's own batch in flight: {w['behind own']:,.0f} appends"
            f" ({w['behind own'] / w['submits']:.1%}), submit to committed {waited:,.0f} µs"
        )


_TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float | None:
    """A server process's user + system CPU seconds (None: it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


async def watch_backends(dsn: str, app: str, seen: dict[int, float], stop: asyncio.Event) -> None:
    """Until ``stop``: the CPU of every backend named ``app``, by pid (its last sample)."""
    monitor = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        while not stop.is_set():
            cur = await monitor.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
            )
            for (pid,) in await cur.fetchall():
                cpu = backend_cpu(pid)
                if cpu is not None:
                    seen[pid] = cpu
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
    finally:
        await monitor.close()


async def batch_cpu(dsn: str, schema: str) -> None:
    """``--batch``: client CPU of one ``append_batch`` by its size, and of a round trip."""
    from statekeeper.backends.url import open_backend
    from statekeeper.records import AppendRequest, RawEvent

    backend: Any = open_backend(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
    single = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    heads: dict[str, int] = {}

    def requests(k: int) -> list[AppendRequest]:
        out = []
        for i in range(k):
            agent = f"a{i}"
            seq = heads.get(agent, 0) + 1
            heads[agent] = seq
            event = RawEvent(seq, "e", time.time(), b"x" * 300, seq.to_bytes(32, "big"))
            out.append(AppendRequest(agent, seq - 1, [event]))
        return out

    async def pooled() -> None:
        async with backend._connection() as conn:
            await conn.execute("SELECT 1")

    async def plain() -> None:
        await single.execute("SELECT 1")

    def sized(k: int) -> Any:
        async def run() -> None:
            results = await backend.append_batch(requests(k))
            assert not any(isinstance(r, BaseException) for r in results), results

        return run

    async def statement() -> None:  # the batch's statement alone (its pool checkout too)
        await backend._batch_once(requests(4))

    sides = [(f"append_batch of {k}", sized(k), k) for k in (1, 2, 4, 8)]
    sides.append(("its statement alone, of 4", statement, 4))
    sides += [("SELECT 1, pool checkout", pooled, 1), ("SELECT 1, one connection", plain, 1)]
    took: dict[str, list[float]] = collections.defaultdict(list)
    try:
        for _ in range(3):  # rounds, the sides interleaved
            for name, run, _ in sides:
                for _ in range(20):
                    await run()
                cpu = time.process_time()
                for _ in range(200):
                    await run()
                took[name].append((time.process_time() - cpu) / 200)
    finally:
        await single.close()
        await backend.close()
    print(f"client CPU, median of 3 rounds of 200 (min–max), load {os.getloadavg()[0]:.1f}")
    for name, _, k in sides:
        xs = [x * 1e6 for x in took[name]]
        print(
            f"  {name:26s} {statistics.median(xs):5,.0f} µs ({min(xs):,.0f}–{max(xs):,.0f}),"
            f" {statistics.median(xs) / k:4,.0f} µs an append"
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
        if args.batch:
            await batch_cpu(args.dsn, schema)
            return
        await conc.pg_side(args.side, args.dsn, schema, args)  # warm-up
        statements.COUNTS.clear()
        WAITS.clear()
        dsn, seen, stop = args.dsn, dict[int, float](), asyncio.Event()
        if args.server:
            app = f"pgw_{uuid.uuid4().hex[:8]}"
            dsn = f"{dsn}{'&' if '?' in dsn else '?'}application_name={app}"
            watching = asyncio.create_task(watch_backends(args.dsn, app, seen, stop))
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        result = await conc.pg_side(args.side, dsn, schema, args)
        if profile is not None:
            profile.disable()
        if args.server:
            stop.set()
            await watching
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
        if args.server:
            print(
                f"  server CPU a write: {sum(seen.values()) / writes * 1e6:,.0f} µs"
                f" ({len(seen)} backends)"
            )
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
    parser.add_argument("--server", action="store_true")
    parser.add_argument("--batch", action="store_true")
    args = parser.parse_args()
    statements.count_statements()
    if args.waits:
        instrument()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
