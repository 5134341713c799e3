"""Wall time of a ``stop_at_head`` subscription replaying a feed full of tombstones:
what telling a late tombstone apart (``store/feed_late.py``) costs the reader. Each
tombstone handed out now reads its agent's head; one whose agent is stored again since
its delete also reads the agent's first event and that event's feed position (SQLite:
the feed read back from its head to it).

Load: ``--n`` agents of 2 events, each deleted (a tombstone each), then ``--recreated``
of them saved again (1 event), then the whole feed replayed by one subscriber.

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately; compare the medians."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper import StateStore


async def replay(url: str, n: int, recreated: int) -> tuple[float, int]:
    """Seconds to replay the feed, events handed out."""
    async with StateStore(url) as store:
        ids = [f"a{i}" for i in range(n)]
        for agent_id in ids:
            for k in range(2):
                await store.save(agent_id, {"k": k})
        for agent_id in ids:
            await store.delete(agent_id)
        for agent_id in ids[:recreated]:
            await store.save(agent_id, {"again": True})
        started = time.perf_counter()
        seen = 0
        async for _ in store.subscribe(stop_at_head=True):
            seen += 1
        return time.perf_counter() - started, seen


async def main(n: int, recreated: int, rounds: int) -> None:
    for engine in ("memory", "sqlite"):
        results = []
        seen = 0
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as folder:
                url = "memory://" if engine == "memory" else f"sqlite:///{Path(folder) / 'f.db'}"
                took, seen = await replay(url, n, recreated)
                results.append(took * 1e3)
        low, mid = min(results), statistics.median(results)
        print(
            f"{engine} n={n} recreated={recreated} events={seen}\tmin {low:.1f} median"
            f" {mid:.1f} ms\t{[round(r, 1) for r in results]}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="agents deleted")
    parser.add_argument("--recreated", type=int, default=0, help="of them saved again")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.recreated, args.rounds))
