"""What reading the feed's id with each page costs a subscription (branch h/feedlive).

A live subscription now checks the store's feed id with every page it reads (a restore
renews it: a page of the new numbering raises ``FeedChanged`` instead of being
delivered). The id comes with the page: one more column of the same statement (SQLite,
PostgreSQL ``feed_read_id``), one more ``HGET`` in the same pipeline (Redis), a field
read (memory). Per engine, same process, rounds alternating the order of the variants:

* ``page``: ``Backend.read_feed`` (what a subscription read per page before),
* ``page+id``: ``Backend.read_feed_page`` (what it reads now),
* ``page, then feed_id()``: the naive check, a second call (a second round trip),

each reading the same ``--pages`` pages of ``--size`` events of a store of
``pages * size`` events. Reported: the median time per page of each (µs), and the
median over rounds of the per-round ratio to ``page``.

    .venv/bin/python benchmarks/bench_feed_page_id.py                  # every engine
    .venv/bin/python benchmarks/bench_feed_page_id.py --engines sqlite --size 1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from _common import machine
from statekeeper import StateStore

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def _url(engine: str, folder: Path, tag: str) -> str:
    if engine == "sqlite":
        return f"sqlite:///{folder / 'bench.db'}"
    if engine == "postgresql":
        return f"{PG_DSN}?schema=bench_pageid_{tag}"
    if engine == "redis":
        return f"{REDIS}?prefix=bench-pageid-{tag}:"
    return "memory://"


async def _drop(engine: str, store: StateStore, tag: str) -> None:
    if engine == "postgresql":
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS bench_pageid_{tag} CASCADE")
    elif engine == "redis":
        client: Any = store.backend._client  # type: ignore[attr-defined]
        keys = [k async for k in client.scan_iter(match=f"bench-pageid-{tag}:*")]
        if keys:
            await client.delete(*keys)


async def _engine(engine: str, pages: int, size: int, rounds: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    with TemporaryDirectory() as folder:
        store = StateStore(_url(engine, Path(folder), tag), witness=False)
        await store.__aenter__()
        try:
            backend = store.backend
            for i in range(pages * size):
                await store.save(f"a{i % 8}", {"i": i})
            await backend.feed_id()

            async def page(after: int) -> Any:
                return await backend.read_feed(after, size)

            async def page_id(after: int) -> Any:
                return await backend.read_feed_page(after, size)

            async def naive(after: int) -> Any:
                found = await backend.read_feed(after, size)
                return found, await backend.feed_id()

            variants: dict[str, Callable[[int], Awaitable[Any]]] = {
                "page": page,
                "page+id": page_id,
                "page, then feed_id()": naive,
            }
            starts = [r.position - 1 for r in await backend.read_feed(0, pages * size)][::size]
            times: dict[str, list[float]] = {name: [] for name in variants}
            names = list(variants)
            for k in range(rounds + 1):  # (round 0 warms up, not counted)
                order = names[k % len(names) :] + names[: k % len(names)]
                for name in order:
                    read = variants[name]
                    began = time.perf_counter()
                    for after in starts:
                        await read(after)
                    if k:
                        times[name].append((time.perf_counter() - began) / len(starts))
            base = times["page"]
            return {
                name: {
                    "us_per_page": round(statistics.median(t) * 1e6, 1),
                    "ratio": round(
                        statistics.median(x / b for x, b in zip(t, base, strict=True)), 3
                    ),
                }
                for name, t in times.items()
            }
        finally:
            await _drop(engine, store, tag)
            await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="memory,sqlite,postgresql,redis")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--size", type=int, default=16, help="events a page")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(machine())
    for engine in args.engines.split(","):
        found = await _engine(engine, args.pages, args.size, args.rounds)
        for name, row in found.items():
            print(f"{engine:10} size={args.size:<4} {name:22} {row}")


if __name__ == "__main__":
    asyncio.run(main())
