"""Load path of the tiered backend: Redis hot tier + durable tier vs the durable tier alone.

Every hot-tier read is checked against the durable tier's head and head tag (see
docs/backends.md, "Tiered"); this measures what that costs a ``store.load``.
20 agents x 40 saves of ~200-byte states (``snapshot_every=100``), then ``ROUNDS``
loads round-robin over the agents, timed one by one:

- *uncached*: ``cache_size=0``: head, latest snapshot and events after it, verified
  and folded;
- *cached*: the default cache: one ``read`` of the events after the cached seq.

Run::

    .venv/bin/python benchmarks/bench_tiered.py sqlite 1000
    .venv/bin/python benchmarks/bench_tiered.py postgres 1000

Servers: ``$STATEKEEPER_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) and
``$STATEKEEPER_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
everything goes under a fresh key prefix / schema, dropped at the end.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid

from statekeeper.backends import tiered_url
from statekeeper.store import StateStore

REDIS = os.environ.get("STATEKEEPER_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES = os.environ.get("STATEKEEPER_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def timed(url: str, cache: int, rounds: int) -> tuple[float, float]:
    async with StateStore(url, cache_size=cache, snapshot_every=100) as store:
        for a in range(20):
            for n in range(40):
                await store.save(f"a{a}", {"n": n, "pad": "x" * 200})
        for a in range(20):
            await store.load(f"a{a}")  # fills the hot tier
        latencies = []
        for r in range(rounds):
            start = time.perf_counter()
            await store.load(f"a{r % 20}")
            latencies.append((time.perf_counter() - start) * 1e6)
        await store.backend.drop_all()
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.95)]


async def main(kind: str, rounds: int) -> None:
    tag = "skbench_" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        durable = f"sqlite:///{tmp}/d.db" if kind == "sqlite" else f"{POSTGRES}?schema={tag}"
        hot = f"{REDIS}?prefix={tag}:"
        for label, url in (
            ("durable only", durable),
            ("tiered", tiered_url(hot=hot, durable=durable)),
        ):
            for cache, what in ((0, "uncached load"), (1024, "cached load")):
                p50, p95 = await timed(url, cache, rounds)
                print(f"{kind:8s} {label:13s} {what:14s} p50 {p50:7.0f} us  p95 {p95:7.0f} us")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000))
