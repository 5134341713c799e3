"""Live latency of a change-feed subscriber: from the writer's append returning
(committed) to the subscriber holding the event, per engine, same run.

A writer *process* appends to a few agents at a steady pace (``--interval``) and sends
the monotonic time each append returned (``CLOCK_MONOTONIC`` is one clock for every
process of the machine); the subscriber, in this process, is live (caught up before
the writer starts) and stamps each event when ``async for`` hands it over. Latency =
delivered - returned; it can be slightly negative (the subscriber may see a commit
before the writer's call has returned). Rounds alternate the engines so a loaded
machine's drift hits all alike. Engines:

* ``sqlite``: polling the feed head every 20 ms (``FEED_POLL``), no cross-process wake-up;
* ``redis``: one server, ``XREAD BLOCK`` on the feed stream (a stream is its own wake-up);
* ``redis-sharded``: ``?shards=4``, the cluster layout: the shards' heads polled in one
  pipeline every 50 ms (``feed_poll_interval``);
* ``postgresql``: ``LISTEN``/``NOTIFY`` (coalesced to one per 10 ms per writer process).

    .venv/bin/python benchmarks/bench_feed_latency.py --rounds 3 --events 100
    .venv/bin/python benchmarks/bench_feed_latency.py --engines sqlite,redis --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import machine, table
from statekeeper import StateStore

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
AGENTS = 4


def _url(engine: str, folder: Path, tag: str) -> str:
    if engine == "sqlite":
        return f"sqlite:///{folder / (tag + '.db')}"
    if engine == "redis":
        return f"{REDIS}?prefix=bfl_{tag}:"
    if engine == "redis-sharded":
        return f"{REDIS}?prefix=bfl_{tag}:&shards=4"
    if engine == "postgresql":
        return f"{PG_DSN}?schema=bfl_{tag}"
    raise SystemExit(f"unknown engine {engine!r}")


def _writer(url: str, events: int, interval: float, out: Any) -> None:
    async def go() -> None:
        async with StateStore(url, witness=False) as store:
            next_at = time.monotonic()
            for i in range(events):
                agent = f"lat/agent-{i % AGENTS}"
                result = await store.save(agent, {"i": i})
                out.put((agent, result.last_seq, time.monotonic()))
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))  # pacing

    asyncio.run(go())
    out.put(None)


async def _cleanup(engine: str, url: str) -> None:
    if engine.startswith("redis"):
        import redis.asyncio as aioredis

        prefix = url.split("prefix=")[1].split("&")[0]
        client = aioredis.Redis.from_url(REDIS)
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    elif engine == "postgresql":
        import psycopg

        schema = url.split("schema=")[1]
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def one_round(engine: str, folder: Path, events: int, interval: float) -> list[float]:
    url = _url(engine, folder, uuid.uuid4().hex[:10])
    delivered: dict[tuple[str, int], float] = {}
    try:
        async with StateStore(url, witness=False) as store:
            await store.save("lat/warm", {})
            start = (await store.feed_cursor_bounds()).head
            sub = store.subscribe(start)
            first = asyncio.get_running_loop().create_future()

            async def follow() -> None:
                async for change in sub:
                    delivered[(change.agent_id, change.seq)] = time.monotonic()
                    if not first.done():
                        first.set_result(None)
                    if len(delivered) >= events:
                        return

            follower = asyncio.create_task(follow())
            await asyncio.sleep(0.2)  # let the subscription reach its live wait
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            proc = ctx.Process(target=_writer, args=(url, events, interval, queue))
            proc.start()
            returned: dict[tuple[str, int], float] = {}
            while (item := await asyncio.to_thread(queue.get)) is not None:
                returned[(item[0], item[1])] = item[2]
            await asyncio.to_thread(proc.join)
            await asyncio.wait_for(follower, 120)
        return [delivered[k] - t for k, t in returned.items()]
    finally:
        await _cleanup(engine, url)


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    engines = args.engines.split(",")
    samples: dict[str, list[float]] = {e: [] for e in engines}
    per_round: dict[str, list[float]] = {e: [] for e in engines}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = engines if r % 2 == 0 else engines[::-1]
            for engine in order:
                lat = await one_round(engine, Path(tmp), args.events, args.interval)
                samples[engine] += lat
                per_round[engine].append(statistics.median(lat))
    return {
        "machine": machine(),
        "load_before_after": args.load,
        "events_per_round": args.events,
        "interval_s": args.interval,
        "engines": {
            e: {
                "n": len(v),
                "p50_ms": _q(v, 0.50) * 1000,
                "p90_ms": _q(v, 0.90) * 1000,
                "p99_ms": _q(v, 0.99) * 1000,
                "max_ms": max(v) * 1000,
                "round_medians_ms": [round(x * 1000, 2) for x in per_round[e]],
            }
            for e, v in samples.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="sqlite,redis,redis-sharded,postgresql")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.03)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    before = os.getloadavg()
    args.load = None
    result = asyncio.run(main_async(args))
    result["load_before_after"] = [before, os.getloadavg()]
    if args.json:
        print(json.dumps(result, indent=2))
        return
    rows = [
        [
            e,
            r["n"],
            f"{r['p50_ms']:.1f}",
            f"{r['p90_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['max_ms']:.1f}",
            " / ".join(f"{x:.1f}" for x in r["round_medians_ms"]),
        ]
        for e, r in result["engines"].items()
    ]
    print(table(["engine", "events", "p50 ms", "p90 ms", "p99 ms", "max ms", "round p50s"], rows))
    print(f"load (1/5/15 min) before {before}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
