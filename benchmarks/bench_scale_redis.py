"""Throughput at scale on Redis: N worker processes over M agents, saves/s as N grows.

Side by side in one run, rounds interleaved:

* ``single``   one plain ``redis-server`` (the plain key layout) — the peer;
* ``cluster``  a local Redis Cluster of 3 masters + 3 replicas (sharded layout,
  16 shards), through redis-py's ``RedisCluster``;
* ``cluster+wait``  the same cluster with ``wait_replicas=1`` (every save waits for a
  replica's acknowledgement: what survives a failover).

Each worker process opens its own ``StateStore`` and runs ``--concurrency`` tasks, each
saving its own agents (``store.save`` of a small document, ~200 bytes changed) in a loop
for ``--seconds``; the agents (``--agents`` in all) are created before the clock starts.
Reported: saves/s (sum over workers; median and range over rounds), the ratio to the
single server, and the CPU seconds the Redis servers and the workers spent per 1000
saves (``/proc/<pid>/stat``), from which the per-shard sizing follows: a master
saturates at ``1 / (master CPU seconds per save)`` saves/s.

    .venv/bin/python benchmarks/bench_scale_redis.py             # 1,2,4,8 workers, 3 rounds
    .venv/bin/python benchmarks/bench_scale_redis.py --quick     # 1,2,4 workers, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, table
from statekeeper import StateStore
from statekeeper.testing.redis_cluster import LocalRedisCluster, free_cluster_port

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a process (children excluded)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _worker(
    url: str,
    agents: list[str],
    concurrency: int,
    seconds: float,
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    async def run() -> None:
        async with StateStore(url) as store:
            for agent in agents:
                await store.save(agent, {"n": 0, "note": "x" * 200})
            ready.release()
            await asyncio.to_thread(go.wait)
            count = 0
            cpu0 = time.process_time()
            start = time.perf_counter()
            deadline = start + seconds

            async def loop(mine: list[str]) -> None:
                nonlocal count
                i = 0
                while time.perf_counter() < deadline:
                    await store.save(mine[i % len(mine)], {"n": i + 1, "note": "y" * 200})
                    i += 1
                    count += 1

            groups = [agents[k::concurrency] for k in range(concurrency)]
            await asyncio.gather(*(loop(g) for g in groups if g))
            out.put((count, time.perf_counter() - start, time.process_time() - cpu0))

    asyncio.run(run())


def _measure(
    url: str,
    pids: list[int],
    mpids: list[int],
    workers: int,
    agents: int,
    concurrency: int,
    seconds: float,
) -> dict[str, float]:
    """One run; CPU of the servers (all / masters) counted only while the clock runs."""
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    out = ctx.Queue()
    names = [f"w{w}-agent-{i}" for w in range(workers) for i in range(agents // workers)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(url, names[w::workers], concurrency, seconds, ready, go, out),
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    server_cpu = sum(_cpu(pid) for pid in pids)
    master_cpu = sum(_cpu(pid) for pid in mpids)
    go.set()
    results = [out.get() for _ in procs]
    server_cpu = sum(_cpu(pid) for pid in pids) - server_cpu
    master_cpu = sum(_cpu(pid) for pid in mpids) - master_cpu
    for p in procs:
        p.join()
    saves = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    client_cpu = sum(r[2] for r in results)
    return {
        "saves": saves,
        "rate": saves / wall,
        "server_cpu": server_cpu,
        "master_cpu": master_cpu,
        "client_cpu": client_cpu,
    }


def _single_server() -> tuple[subprocess.Popen[bytes], int, str]:
    port = free_cluster_port(set())
    d = tempfile.mkdtemp(prefix="sk-bench-redis-")
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
         "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ping = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True)
        if ping.stdout.strip() == b"PONG":
            break
    return proc, port, d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16, help="tasks per worker")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.workers, args.seconds = 1, "1,2,4", 2.0
    counts = [int(w) for w in args.workers.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the servers on a kill too

    print("machine:", machine("redis"))
    single, port, single_dir = _single_server()
    cluster = LocalRedisCluster(masters=3, replicas=1).start()
    try:
        masters = cluster.masters()
        all_pids = [p.pid for p in cluster.procs.values()]
        master_pids = [cluster.procs[m].pid for m in masters]
        setups = {
            "single": (f"redis://127.0.0.1:{port}/0?prefix=", [single.pid], [single.pid]),
            "cluster": (f"{cluster.url}?prefix=", all_pids, master_pids),
            "cluster+wait": (f"{cluster.url}?wait_replicas=1&prefix=", all_pids, master_pids),
        }
        rates: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for rnd in range(args.rounds):
            for n in counts:
                for name, (url, pids, mpids) in setups.items():
                    prefix = f"b{rnd}n{n}{name.replace('+', '')}:"
                    r = _measure(
                        url + prefix, pids, mpids, n, args.agents, args.concurrency, args.seconds
                    )
                    rates.setdefault((name, n), []).append(r["rate"])
                    cpu.setdefault((name, n), []).append(
                        (
                            r["server_cpu"] / r["saves"] * 1000,
                            r["master_cpu"] / r["saves"] * 1000,
                            r["client_cpu"] / r["saves"] * 1000,
                        )
                    )
                    print(
                        f"round {rnd + 1} workers {n} {name}: {r['rate']:.0f} saves/s", flush=True
                    )
        rows = []
        for n in counts:
            base = statistics.median(rates[("single", n)])
            for name in setups:
                xs = rates[(name, n)]
                med = statistics.median(xs)
                srv = statistics.median(c[0] for c in cpu[(name, n)])
                mst = statistics.median(c[1] for c in cpu[(name, n)])
                cli = statistics.median(c[2] for c in cpu[(name, n)])
                rows.append(
                    [n, name, f"{med:,.0f}", f"{min(xs):,.0f}-{max(xs):,.0f}",
                     f"{med / base:.2f}x", f"{srv:.3f}", f"{mst:.3f}", f"{cli:.3f}"]
                )  # fmt: skip
        print()
        print(
            table(
                ["workers", "setup", "saves/s (median)", "range", "vs single",
                 "all servers CPU ms/save", "masters CPU ms/save",
                 "clients CPU ms/save"],
                rows,
            )
        )  # fmt: skip
    finally:
        cluster.stop()
        single.send_signal(signal.SIGKILL)
        single.wait()
        shutil.rmtree(single_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
