"""Saves per second as worker processes grow, on plain and hash-partitioned PostgreSQL.

N worker processes (1, 2, 4, 8) share M agents (each agent owned by one worker, as a
deployment routes an agent's turns to one process); each worker runs
``StateStore.save`` on its agents round-robin for ``--seconds``, all starting at once.
Two schemas on the same server, created fresh and dropped at the end: ``plain`` and
``partitioned`` (``partitions=--partitions``, hash on agent id). Layouts are
interleaved per worker count and the whole sweep repeated ``--rounds`` times, so the
partitioned / plain ratio is a same-run ratio (median and range over rounds).

Besides saves/s it measures where the CPU goes, per save: the workers' own CPU
(``time.process_time`` in each worker) and the server backends' CPU (``psutil`` on the
PostgreSQL processes serving the workers, found by ``application_name``). On a machine
with C cores, throughput cannot pass ``C / (client + server CPU per save)``: the table
prints that ceiling next to the measurement, which is where scaling stops and why.
The server's CPU per save is the number the sizing rule in docs/scale-postgres.md uses.

Run::

    .venv/bin/python benchmarks/bench_scale_postgres.py                 # ~4 min
    .venv/bin/python benchmarks/bench_scale_postgres.py --quick         # ~1 min
    .venv/bin/python benchmarks/bench_scale_postgres.py --dsn postgresql://u@host/db
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil

from _common import machine, table

DSN = os.environ.get("STATEKEEPER_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APP = "sk-bench-scale-pg"
LAYOUTS = {"plain": "sk_bench_scale_plain", "partitioned": "sk_bench_scale_part"}


def _url(dsn: str, schema: str, partitions: int | None) -> str:
    sep = "&" if "?" in dsn else "?"
    url = f"{dsn}{sep}schema={schema}&application_name={APP}&pool_max_size=2"
    return url + (f"&partitions={partitions}" if partitions else "")


def _worker(
    url: str,
    agents: list[str],
    seconds: float,
    ready: Any,
    start: Any,
    finish: Any,
    out: Any,
) -> None:
    from statekeeper import StateStore

    async def run() -> None:
        async with StateStore(url, cache_size=len(agents) + 1) as store:
            for agent in agents:  # warm: one save each (the agent exists, cache warm)
                await store.save(agent, {"step": 0, "note": "warm"})
            ready.set()
            start.wait()
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            deadline = t0 + seconds
            saves = 0
            step = 1
            while True:
                for agent in agents:
                    await store.save(agent, {"step": step, "note": f"turn {step}"})
                    saves += 1
                    if time.perf_counter() >= deadline:
                        break
                else:
                    step += 1
                    continue
                break
            out.put((saves, time.process_time() - cpu0, time.perf_counter() - t0))
            # keep the connections open until the parent has read the server's CPU
            await asyncio.get_running_loop().run_in_executor(None, finish.wait)

    asyncio.run(run())


def _server_cpu(dsn: str) -> dict[int, float]:
    """CPU seconds used so far by each server process serving this benchmark."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APP,)
            ).fetchall()
        ]
    used: dict[int, float] = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            used[pid] = t.user + t.system
        except psutil.Error:
            pass
    return used


def run_once(dsn: str, url: str, workers: int, agents: int, seconds: float) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    names = [f"team-{i % 16}/agent-{i}" for i in range(agents)]
    start = ctx.Event()
    finish = ctx.Event()
    out = ctx.Queue()
    readies = [ctx.Event() for _ in range(workers)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(url, names[w::workers], seconds, readies[w], start, finish, out),
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    for r in readies:
        if not r.wait(300):
            raise SystemExit("a worker did not get ready")
    server0 = _server_cpu(dsn)
    wall0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=seconds + 300) for _ in procs]
    wall = time.perf_counter() - wall0
    server1 = _server_cpu(dsn)
    finish.set()
    for p in procs:
        p.join()
    server = sum(used - server0.get(pid, 0.0) for pid, used in server1.items())
    saves = sum(r[0] for r in results)
    client = sum(r[1] for r in results)
    elapsed = max(r[2] for r in results)
    return {
        "saves_s": saves / elapsed,
        "client_us": client / saves * 1e6,
        "server_us": server / saves * 1e6,
        "wall": wall,
    }


def _drop(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in LAYOUTS.values():
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DSN, help="PostgreSQL server (a test database)")
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated")
    parser.add_argument("--agents", type=int, default=512, help="agents shared by the workers")
    parser.add_argument("--partitions", type=int, default=8, help="hash partitions")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of the sweep")
    parser.add_argument("--quick", action="store_true", help="1 round of 2 s, 128 agents")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.agents = 1, 2.0, 128
    counts = [int(w) for w in args.workers.split(",")]
    cores = os.cpu_count() or 1
    print(machine("psycopg"))
    print(
        f"{args.agents} agents, workers {counts}, {args.seconds:g} s per run, "
        f"{args.rounds} rounds, partitions={args.partitions}, {cores} cores, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    _drop(args.dsn)
    urls = {
        "plain": _url(args.dsn, LAYOUTS["plain"], None),
        "partitioned": _url(args.dsn, LAYOUTS["partitioned"], args.partitions),
    }
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for _ in range(args.rounds):
            for workers in counts:
                for layout, url in urls.items():
                    result = run_once(args.dsn, url, workers, args.agents, args.seconds)
                    runs.setdefault((layout, workers), []).append(result)
    finally:
        _drop(args.dsn)
    rows = []
    for workers in counts:
        for layout in urls:
            rs = runs[(layout, workers)]
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            ceiling = cores / ((med["client_us"] + med["server_us"]) / 1e6)
            ratio = ""
            if layout == "partitioned":
                per_round = [
                    p["saves_s"] / q["saves_s"]
                    for p, q in zip(rs, runs[("plain", workers)], strict=True)
                ]
                ratio = (
                    f"{statistics.median(per_round):.2f} "
                    f"({min(per_round):.2f}-{max(per_round):.2f})"
                )
            rows.append(
                [
                    workers,
                    layout,
                    f"{med['saves_s']:,.0f}",
                    f"{min(r['saves_s'] for r in rs):,.0f}-{max(r['saves_s'] for r in rs):,.0f}",
                    f"{med['client_us']:.0f}",
                    f"{med['server_us']:.0f}",
                    f"{ceiling:,.0f}",
                    ratio,
                ]
            )
    print(
        table(
            [
                "workers",
                "layout",
                "saves/s",
                "range",
                "client CPU us/save",
                "server CPU us/save",
                f"{cores}-core ceiling",
                "part/plain",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
