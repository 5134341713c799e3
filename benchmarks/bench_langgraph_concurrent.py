"""16 LangGraph threads at once: statekeeper's saver vs LangGraph's own, side by side.

The issue-12 goals for concurrent graphs: on one SQLite file, >= 5x ``SqliteSaver``;
on PostgreSQL, >= 2x ``AsyncPostgresSaver`` run the way its docs recommend and >= 1.5x
its fastest setting (one saver per thread).

Workload: ``--threads`` (default 16) LangGraph threads run concurrently, each a
``MessagesState`` chat of ``--turns`` turns (default 10; one ``invoke`` per turn with a
~300-character ``HumanMessage``, the node answers with a ~300-character ``AIMessage``),
``durability="sync"`` (every checkpoint stored before the next step), both savers'
defaults otherwise (statekeeper: ``fork_protection`` on, so every run also claims and
releases its thread). Reported: saver writes per second (``put``/``aput`` +
``put_writes``/``aput_writes`` calls over wall time) and the process's CPU seconds.
Rounds interleave the savers, alternating which goes first; every round uses a fresh
file / fresh thread ids. Ratios are statekeeper over the peer (> 1: statekeeper
faster), medians with the min–max of the per-round ratios.

* ``sqlite`` (``--mode threads``, default): 16 OS threads each ``invoke`` their chat,
  one saver for all. Sides (``--kinds``, all by default, in rotating order a round):
  ``sk`` (``StatekeeperSaver.from_url("sqlite:///…?synchronous=S")``, durability
  ``sync``), ``sk-group`` (the same, ``durability="group"``), ``peer`` (``SqliteSaver``
  on one ``check_same_thread=False`` connection, its documented multi-thread setup,
  same ``synchronous``), ``peer-async`` (``AsyncSqliteSaver``: 16 ``ainvoke`` tasks on
  one loop, its own setup), and the **ceiling**, two savers with no disk:
  ``memory`` (LangGraph's ``InMemorySaver``, which still serialises every channel
  version) and ``noop`` (``bench_langgraph_floor.KeepsReferences``: keeps the latest
  checkpoint object by reference, serialises nothing — the graph runtime alone). A
  ceiling's ratio to the faster of the two peers in each round (``the faster peer``)
  bounds every saver's. Any side ending ``-async`` runs as ``ainvoke`` tasks whatever
  ``--mode`` says; ``--mode async`` runs them all so (``peer``: ``AsyncSqliteSaver``).
  A third table says where each side's wall went (:class:`Probe`): the share of the
  wall the point every write passes was held (statekeeper's saver loop, whose holder
  commits inline; ``SqliteSaver``'s lock), refused takes of that loop a take, the CPU
  share of the long-lived threads (``main``: an async side's loop;
  ``sk-writer``/``sk-commit``: statekeeper's SQLite writer and commit threads;
  ``aiosqlite``: ``AsyncSqliteSaver``'s connection thread), and statekeeper's commits
  a second and writes a commit.
* ``postgres``: 16 ``ainvoke`` tasks on one event loop. statekeeper:
  ``StatekeeperSaver.from_url("postgresql://…?schema=…", durability=D)`` (D = ``sync``:
  each write its own transaction, and ``group``: writes in flight share one; both
  return after the commit), and ``sk-group-loop``: ``await
  StatekeeperSaver.afrom_url(…, durability="group")``, the saver's work on the
  benchmark's own loop (no hop to a loop thread of the saver's). Peers:
  ``AsyncPostgresSaver.from_conn_string`` (one connection, the docs' first example),
  ``AsyncPostgresSaver(pool)`` on an ``AsyncConnectionPool`` (the docs' production
  setup), and one ``AsyncPostgresSaver`` per thread sharing the pool (not documented;
  sidesteps the saver-wide lock: the fastest setting). ``memory``: LangGraph's
  ``InMemorySaver`` in the same rounds (no server, no SQL: the **ceiling**, what the
  graph runtime allows 16 ``ainvoke`` tasks on one loop; its ratio to one
  ``AsyncPostgresSaver`` per thread bounds every saver's). A statekeeper side named with
  ``/N`` (``sk-group-loop/1``) commits with at most N group batches in flight
  (``GroupCommitter.in_flight``; PostgreSQL's default is 4), ``/N,M`` also starts a
  batch beside one in flight only with at least M appends (``min_beside``). A side
  ending ``+warm`` (``sk-group-loop+warm``) runs with ``pool_min_size=10`` (the
  default pool is 1..10 connections and grows on demand, during the measured run),
  opened and grown by concurrent reads before the clock starts, as the peers' pool is
  (``AsyncConnectionPool.wait()``).

Usage::

    .venv/bin/python benchmarks/bench_langgraph_concurrent.py sqlite   # NORMAL and FULL
    .venv/bin/python benchmarks/bench_langgraph_concurrent.py sqlite --synchronous FULL --rounds 7
    .venv/bin/python benchmarks/bench_langgraph_concurrent.py sqlite --mode async
    .venv/bin/python benchmarks/bench_langgraph_concurrent.py postgres --dsn postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from _common import machine, median, table
from bench_langgraph import text  # type: ignore[import-not-found]
from bench_langgraph_floor import KeepsReferences  # type: ignore[import-not-found]
from bench_langgraph_goals import Counting, chat_graph  # type: ignore[import-not-found]
from statekeeper.integrations.langgraph import StatekeeperSaver

DEFAULT_DSN = os.environ.get(
    "STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def inputs(args: argparse.Namespace) -> list[HumanMessage]:
    return [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(args.turns)]


def measure(
    run: Callable[[], None], counting: Counting, probe: Probe | None = None
) -> dict[str, float]:
    probe = probe or Probe()
    probe.start()
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {"writes_s": counting.writes / wall, "cpu_s": cpu, "writes": counting.writes}
    return out | probe.stop(wall)


def threaded(
    saver: Any, args: argparse.Namespace, tag: str, probe: Probe | None = None
) -> dict[str, float]:
    """``args.threads`` OS threads, each invoking its own chat on ``saver``."""
    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    msgs = inputs(args)

    def chat(t: int) -> None:
        cfg = {"configurable": {"thread_id": f"{tag}-{t}"}}
        for message in msgs:
            graph.invoke({"messages": [message]}, cfg, durability="sync")

    def run() -> None:
        with ThreadPoolExecutor(args.threads) as pool:
            for f in [pool.submit(chat, t) for t in range(args.threads)]:
                f.result()

    return measure(run, counting, probe)


async def concurrent(
    saver: Any, args: argparse.Namespace, tag: str, probe: Probe | None = None
) -> dict[str, float]:
    """``args.threads`` tasks on one loop, each ``ainvoke``-ing its own chat."""
    counting = AsyncCounting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    msgs = inputs(args)

    async def chat(t: int) -> None:
        cfg = {"configurable": {"thread_id": f"{tag}-{t}"}}
        for message in msgs:
            await graph.ainvoke({"messages": [message]}, cfg, durability="sync")

    probe = probe or Probe()
    probe.start()
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(chat(t) for t in range(args.threads)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {"writes_s": counting.writes / wall, "cpu_s": cpu, "writes": counting.writes}
    return out | probe.stop(wall)


async def per_thread(savers: list[Any], args: argparse.Namespace, tag: str) -> dict[str, float]:
    """One saver (and one compiled graph) per LangGraph thread."""
    counts = [AsyncCounting(s) for s in savers]
    graphs = [chat_graph().compile(checkpointer=s) for s in savers]
    msgs = inputs(args)

    async def chat(t: int) -> None:
        cfg = {"configurable": {"thread_id": f"{tag}-{t}"}}
        for message in msgs:
            await graphs[t].ainvoke({"messages": [message]}, cfg, durability="sync")

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(chat(t) for t in range(args.threads)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    writes = sum(c.writes for c in counts)
    return {"writes_s": writes / wall, "cpu_s": cpu, "writes": writes}


class AsyncCounting:
    """Wraps a saver's async write methods to count calls."""

    def __init__(self, saver: Any) -> None:
        self.writes = 0
        aput, aput_writes = saver.aput, saver.aput_writes

        async def counted_aput(*a: Any, **k: Any) -> Any:
            self.writes += 1
            return await aput(*a, **k)

        async def counted_aput_writes(*a: Any, **k: Any) -> Any:
            self.writes += 1
            return await aput_writes(*a, **k)

        saver.aput, saver.aput_writes = counted_aput, counted_aput_writes


# -- where a side's wall goes: its threads' CPU, the point every write passes --------


def thread_cpu() -> dict[int, tuple[str, int]]:
    """Each live thread's CPU so far (ns on a CPU, the kernel's ``schedstat``) and the
    group it is reported in, by native id (Linux; empty elsewhere)."""
    out: dict[int, tuple[str, int]] = {}
    for thread in threading.enumerate():
        name = thread.name
        group = (
            "main"
            if thread is threading.main_thread()
            else "sk-writer"
            if name.startswith("sk-sqlite-w")
            else "sk-commit"
            if name.startswith("sk-sqlite-c")
            else "sk-loop-thread"
            if name == "statekeeper-langgraph"
            else "aiosqlite"
            if "_connection_worker_thread" in name
            else ""
        )
        if not group:  # (the graph's own short-lived threads: gone before the clock stops)
            continue
        try:
            with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
                out[thread.native_id or 0] = (group, int(f.read().split()[0]))
        except (OSError, ValueError):
            continue
    return out


class Held:
    """A lock (``SqliteSaver.lock``) that adds up the wall time it is held."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.held, self.since = lock, 0.0, 0.0

    def __enter__(self) -> bool:
        got: bool = self.lock.__enter__()
        self.since = time.perf_counter()
        return got

    def __exit__(self, *exc: object) -> None:
        self.held += time.perf_counter() - self.since
        self.lock.__exit__(*exc)


class Probe:
    """What a run's wall went to, besides the writes: the CPU of the side's long-lived
    threads over the run (``main``: the event loop of an async side; ``sk-writer`` /
    ``sk-commit``: statekeeper's SQLite writer and commit threads; ``sk-loop-thread``:
    its saver's background thread; ``aiosqlite``: ``AsyncSqliteSaver``'s connection
    thread), each as a share of the wall (busy); the share of the wall the point every
    write of the side passes was held (``held``: statekeeper's saver loop, taken by
    one calling thread at a time, each commit made inline by its holder; SqliteSaver's
    lock); how often a call found that loop taken (``refused_per_take``: refused takes a
    successful one);
    and statekeeper's engine commits (``commits``)."""

    def __init__(self, saver: Any = None) -> None:
        self.saver = saver
        self.backend: Any = None
        self.hold: list[float] = [0.0, 0, 0]  # seconds held, takes, takes refused
        self.lock: Held | None = None
        if saver is None:
            return
        if isinstance(getattr(saver, "lock", None), type(threading.Lock())):
            self.lock = saver.lock = Held(saver.lock)  # SqliteSaver: one lock, every call
        portal = getattr(saver, "_portal", None)
        if portal is None or not hasattr(portal, "_take"):
            return
        self.backend = saver.store.backend
        take, release, since = portal._take, portal._release, {}
        hold = self.hold

        def timed_take() -> bool:
            got: bool = take()
            if got:
                since[threading.get_ident()] = time.perf_counter()
                hold[1] += 1
            else:
                hold[2] += 1
            return got

        def timed_release(me: int) -> None:
            start = since.pop(me, None)
            if start is not None:
                hold[0] += time.perf_counter() - start
            release(me)

        portal._take, portal._release = timed_take, timed_release

    def start(self) -> None:
        self.threads = thread_cpu()
        self.hold[:] = [0.0, 0, 0]
        if self.lock is not None:
            self.lock.held = 0.0
        self.commits = getattr(self.backend, "append_commits", 0)

    def stop(self, wall: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for tid, (group, ns) in thread_cpu().items():
            before = self.threads.get(tid, (group, 0))[1]
            key = f"busy_{group}"
            out[key] = out.get(key, 0.0) + (ns - before) / 1e9 / wall
        if self.lock is not None:
            out["held"] = self.lock.held / wall
        if self.backend is not None:
            held, takes, refused = self.hold
            out |= {"held": held / wall, "refused_per_take": refused / max(takes, 1)}
            out["commits"] = self.backend.append_commits - self.commits
        return out


# -- SQLite ------------------------------------------------------------------------


def sqlite_round(kind: str, path: Path, args: argparse.Namespace, sync: str) -> dict[str, float]:
    """One side: ``kind`` is ``sk`` (statekeeper, default durability ``sync``),
    ``sk-group`` (``durability="group"``), ``peer`` (``SqliteSaver``; in async mode
    ``AsyncSqliteSaver``), ``memory`` (``InMemorySaver``) or ``noop`` (a saver that
    stores nothing, ``bench_langgraph_floor.KeepsReferences``); a ``-async`` suffix runs
    it as ``ainvoke`` tasks on one loop whatever ``--mode`` says (``peer-async``:
    ``AsyncSqliteSaver``)."""
    tag = uuid.uuid4().hex[:8]
    mode = "async" if kind.endswith("-async") else args.mode
    kind = kind.removesuffix("-async")
    if kind in ("memory", "noop"):  # the ceiling: the graph runtime, a saver with no disk
        nothing: Any = InMemorySaver() if kind == "memory" else KeepsReferences()
        if mode == "threads":
            return threaded(nothing, args, tag)
        return asyncio.run(concurrent(nothing, args, tag))
    if mode == "async":
        return asyncio.run(sqlite_async(kind, path, args, sync, tag))
    if kind.startswith("sk"):
        saver = sk_sqlite(kind, path, sync)
        try:
            return threaded(saver, args, tag, Probe(saver))
        finally:
            saver.close()
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        peer = SqliteSaver(conn)
        peer.setup()
        conn.execute(f"PRAGMA synchronous={sync}")
        return threaded(peer, args, tag, Probe(peer))
    finally:
        conn.close()


def sk_sqlite(kind: str, path: Path, sync: str) -> StatekeeperSaver:
    durability = {"sk": "sync", "sk-group": "group"}[kind]
    return StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}", durability=durability)


async def sqlite_async(
    kind: str, path: Path, args: argparse.Namespace, sync: str, tag: str
) -> dict[str, float]:
    if kind.startswith("sk"):
        saver = sk_sqlite(kind, path, sync)
        try:
            return await concurrent(saver, args, tag, Probe(saver))
        finally:
            await saver.aclose()
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with aiosqlite.connect(path) as conn:
        peer = AsyncSqliteSaver(conn)
        await peer.setup()
        await conn.execute(f"PRAGMA synchronous={sync}")
        return await concurrent(peer, args, tag, Probe())


SQLITE_KINDS = ["sk-group", "sk", "peer", "peer-async", "memory", "noop"]


def run_sqlite(args: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]]]]:
    out: list[tuple[str, list[dict[str, Any]]]] = []
    kinds = args.kinds or SQLITE_KINDS
    with tempfile.TemporaryDirectory(prefix="bench-lg-conc-") as tmp:
        for sync in args.synchronous:
            rounds: list[dict[str, Any]] = []
            for i in range(args.rounds):
                order = kinds[i % len(kinds) :] + kinds[: i % len(kinds)]  # rotating
                rnd: dict[str, Any] = {}
                for kind in order:
                    rnd[kind] = sqlite_round(kind, Path(tmp) / f"{sync}-{i}-{kind}.db", args, sync)
                rnd["load"] = {"loadavg_1m": os.getloadavg()[0]}
                rounds.append(rnd)
                print(f"synchronous={sync} round {i}: {rnd}", file=sys.stderr)
            out.append((f"synchronous={sync}", rounds))
    return out


# -- PostgreSQL --------------------------------------------------------------------


async def pg_side(kind: str, dsn: str, schema: str, args: argparse.Namespace) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    if kind == "memory":  # the ceiling: the graph runtime with a saver that stores nothing
        from langgraph.checkpoint.memory import InMemorySaver

        return await concurrent(InMemorySaver(), args, tag)
    if kind.startswith("sk-"):
        sep = "&" if "?" in dsn else "?"
        url = f"{dsn}{sep}schema={schema}"
        kind, warm, _ = kind.partition("+warm")  # "sk-group+warm": a filled pool, as the peer's
        if warm:
            url += "&pool_min_size=10"  # the default pool's max_size: kept open, all of it
        kind, _, in_flight = kind.partition("/")  # "sk-group/1": one batch in flight
        if kind.endswith("-loop"):  # afrom_url: the saver's work on this loop
            saver = await StatekeeperSaver.afrom_url(
                url, durability=kind.removeprefix("sk-").removesuffix("-loop")
            )
        else:
            saver = StatekeeperSaver.from_url(url, durability=kind.removeprefix("sk-"))
        group = saver.store._writes.group
        if in_flight and group is not None:  # A/B of the batches in flight, same build
            n, _, beside = in_flight.partition(",")  # "/4,1": 4 in flight, no minimum
            group.in_flight = int(n)
            if beside:
                group.min_beside = int(beside)
        try:
            if warm:  # the pool opened and grown before the clock starts (the peer's is)
                for _ in range(2):
                    await asyncio.gather(
                        *(
                            saver.aget_tuple({"configurable": {"thread_id": f"warm-{tag}-{t}"}})
                            for t in range(args.threads)
                        )
                    )
            return await concurrent(saver, args, tag)
        finally:
            await saver.aclose()
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    lg_dsn = f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    if kind == "lg-conn":
        async with AsyncPostgresSaver.from_conn_string(lg_dsn) as saver:
            return await concurrent(saver, args, tag)
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(
        lg_dsn, min_size=args.threads, max_size=args.threads, kwargs=kwargs, open=False
    ) as pool:
        await pool.wait()
        if kind == "lg-pool":
            return await concurrent(AsyncPostgresSaver(pool), args, tag)
        return await per_thread([AsyncPostgresSaver(pool) for _ in range(args.threads)], args, tag)


PG_KINDS = [
    "sk-sync",
    "sk-group",
    "sk-group-loop",
    "lg-conn",
    "lg-pool",
    "lg-per-thread",
    "memory",
]


async def run_postgres(args: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]]]]:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import sql

    schema = f"bench_lgc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        lg_dsn = f"{args.dsn}{'&' if '?' in args.dsn else '?'}options=-csearch_path%3D{schema}"
        async with AsyncPostgresSaver.from_conn_string(lg_dsn) as setup:
            await setup.setup()
        rounds: list[dict[str, Any]] = []
        kinds = args.kinds or PG_KINDS
        for i in range(args.rounds):
            order = kinds[i % len(kinds) :] + kinds[: i % len(kinds)]  # rotating
            rnd = {kind: await pg_side(kind, args.dsn, schema, args) for kind in order}
            rnd["load"] = {"loadavg_1m": os.getloadavg()[0]}
            rounds.append(rnd)
            print(f"postgres round {i}: {rnd}", file=sys.stderr)
        return [("postgres", rounds)]
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# -- report ------------------------------------------------------------------------


def ratio_row(label: str, rounds: list[dict[str, Any]], sk: str, peer: str) -> list[str]:
    ratios = [r[sk]["writes_s"] / r[peer]["writes_s"] for r in rounds]
    cpu = [r[peer]["cpu_s"] / r[sk]["cpu_s"] for r in rounds]
    spread = f"{min(ratios):.2f}–{max(ratios):.2f}" if len(ratios) > 1 else ""
    return [
        label,
        f"{median([r[sk]['writes_s'] for r in rounds]):,.0f}",
        f"{median([r[peer]['writes_s'] for r in rounds]):,.0f}",
        f"**{median(ratios):.2f}x**",
        spread,
        f"{median(cpu):.2f}x",
    ]


def spread(xs: list[float], fmt: str) -> str:
    """The median with the min–max, each as ``fmt``."""
    return f"{fmt.format(median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def cpu_table(
    results: list[tuple[str, list[dict[str, Any]]]],
) -> tuple[list[str], list[list[str]]]:
    """Per side: CPU per write; the share of the wall the process was on a CPU (busy);
    and on PostgreSQL the writes/s the side would reach if it never waited (one core,
    ``writes / cpu_s``) over the per-thread peer's measured writes/s, same round — the
    most it can reach on one core with its CPU per write (pinned runs: one core)."""
    headers = ["side", "CPU µs per write", "busy (CPU / wall)"]
    rows: list[list[str]] = []
    for label, rounds in results:
        peer = "lg-per-thread" if "lg-per-thread" in rounds[0] else None
        if peer:
            headers = [*headers[:3], "never idle / per-thread peer"]
        for kind in [k for k in rounds[0] if k != "load"]:
            row = [
                kind if len(results) == 1 else f"{label}: {kind}",
                spread([r[kind]["cpu_s"] / r[kind]["writes"] * 1e6 for r in rounds], "{:,.0f}"),
                spread(
                    [r[kind]["cpu_s"] * r[kind]["writes_s"] / r[kind]["writes"] for r in rounds],
                    "{:.2f}",
                ),
            ]
            if peer:
                bound = [r[kind]["writes"] / r[kind]["cpu_s"] / r[peer]["writes_s"] for r in rounds]
                row.append(spread(bound, "{:.2f}x"))
            rows.append(row)
        if peer:
            budget = [1e6 / (1.5 * r[peer]["writes_s"]) for r in rounds]
            rows.append(
                [
                    "CPU µs a write for 1.5x the peer on one core",
                    spread(budget, "{:,.0f}"),
                    "1.00",
                    "1.50x",
                ]
            )
    return headers, rows


def where_table(
    results: list[tuple[str, list[dict[str, Any]]]],
) -> tuple[list[str], list[list[str]]]:
    """Per side (those with a :class:`Probe`'s figures): the share of the wall the point
    every write passes was held (statekeeper: its saver loop; ``SqliteSaver``: its
    lock), refused takes of that loop a take, each long-lived thread's CPU over the
    wall, and statekeeper's engine commits a second and writes a commit."""
    groups = sorted(
        {
            k
            for _, rounds in results
            for r in rounds
            for s in r.values()
            for k in s
            if k.startswith("busy_")
        }
    )
    headers = ["side", "held / wall", "refused / take", *[g.removeprefix("busy_") for g in groups]]
    headers += ["commits/s", "writes/commit"]
    rows: list[list[str]] = []
    for label, rounds in results:
        for kind in [k for k in rounds[0] if k != "load"]:
            got = rounds[0][kind]

            def col(key: str, fmt: str, kind: str = kind, rounds: list[Any] = rounds) -> str:
                xs = [r[kind][key] for r in rounds if key in r[kind]]
                return spread(xs, fmt) if xs else ""

            row = [f"{label}: {kind}", col("held", "{:.2f}"), col("refused_per_take", "{:.2f}")]
            row += [col(g, "{:.2f}") for g in groups]
            if "commits" in got:
                row.append(
                    spread(
                        [
                            r[kind]["commits"] * r[kind]["writes_s"] / r[kind]["writes"]
                            for r in rounds
                        ],
                        "{:,.0f}",
                    )
                )
                row.append(
                    spread([r[kind]["writes"] / r[kind]["commits"] for r in rounds], "{:.2f}")
                )
            else:
                row += ["", ""]
            rows.append(row)
    return headers, rows


def sqlite_rows(
    label: str, rounds: list[dict[str, Any]], args: argparse.Namespace
) -> list[list[str]]:
    """Every side against ``SqliteSaver`` (``peer``; async mode: ``AsyncSqliteSaver``)
    and ``AsyncSqliteSaver`` (``peer-async``); the ceiling (``memory``, ``noop``)
    against the better of the two in each round (``best peer``); statekeeper's sides
    against the ceiling."""
    kinds = [k for k in rounds[0] if k != "load"]
    names = {"peer": "SqliteSaver" if args.mode == "threads" else "AsyncSqliteSaver"}
    names["peer-async"] = "AsyncSqliteSaver"
    peers: list[str] = [k for k in ("peer", "peer-async") if k in kinds]
    if len(peers) == 2:  # per round, the faster of SqliteSaver and AsyncSqliteSaver
        for r in rounds:
            r["best peer"] = max((r[k] for k in peers), key=lambda x: x["writes_s"])
        names["best peer"] = "the faster peer"
        peers.append("best peer")
    rows = []
    for peer in peers:
        for kind in [k for k in kinds if k not in ("peer", "peer-async")]:
            rows.append(ratio_row(f"{label}: {kind} vs {names[peer]}", rounds, kind, peer))
    if "peer" in kinds and "peer-async" in kinds:
        rows.append(
            ratio_row(f"{label}: AsyncSqliteSaver vs SqliteSaver", rounds, "peer-async", "peer")
        )
    for ceiling in [k for k in ("memory", "noop") if k in kinds]:
        for kind in [k for k in kinds if k.startswith("sk")]:
            rows.append(ratio_row(f"{label}: {kind} vs {ceiling}", rounds, kind, ceiling))
    for r in rounds:
        r.pop("best peer", None)
    return rows


def report(results: list[tuple[str, list[dict[str, Any]]]], args: argparse.Namespace) -> None:
    headers = ["setting (A vs B)", "A writes/s", "B writes/s", "A/B", "spread", "CPU B/A"]
    rows: list[list[str]] = []
    for label, rounds in results:
        if label == "postgres":
            kinds = args.kinds or PG_KINDS
            peers = [("lg-conn", "one connection"), ("lg-pool", "pool")] if not args.kinds else []
            peers.append(("lg-per-thread", "one saver per thread"))
            for sk in [k for k in kinds if k.startswith("sk-")]:
                for peer, name in peers:
                    if peer in kinds:
                        label_ = f"{sk} vs AsyncPostgresSaver, {name}"
                        rows.append(ratio_row(label_, rounds, sk, peer))
                if "memory" in kinds:
                    rows.append(ratio_row(f"{sk} vs InMemorySaver", rounds, sk, "memory"))
            if "memory" in kinds and "lg-per-thread" in kinds:
                # the ceiling: no saver runs the graph faster than one that stores nothing
                label_ = "InMemorySaver vs AsyncPostgresSaver, one per thread (ceiling)"
                rows.append(ratio_row(label_, rounds, "memory", "lg-per-thread"))
        else:
            rows += sqlite_rows(label, rounds, args)
    print(
        f"\n### {args.threads} LangGraph threads x {args.turns} turns, {args.rounds} rounds,"
        f" {args.backend} ({args.mode})\n"
    )
    print(table(headers, rows))
    print()
    print(table(*cpu_table(results)))
    if args.backend == "sqlite":
        print()
        print(table(*where_table(results)))
    loads = [r["load"]["loadavg_1m"] for _, rounds in results for r in rounds if "load" in r]
    if loads:
        print(f"\nload average (1 min) after each round: {min(loads):.1f}–{max(loads):.1f}")
    info = {"machine": machine("langgraph", "langgraph-checkpoint-sqlite"), "args": vars(args)}
    print(json.dumps(info | {"results": results}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backend", choices=["sqlite", "postgres"])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", choices=["threads", "async"], default="threads")
    parser.add_argument("--synchronous", nargs="+", default=["NORMAL", "FULL"])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument(
        "--kinds", nargs="+", help="sides to run (default: all of the backend's; see above)"
    )
    args = parser.parse_args()
    if args.backend == "sqlite":
        results = run_sqlite(args)
    else:
        args.mode = "async"
        results = asyncio.run(run_postgres(args))
    report(results, args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
