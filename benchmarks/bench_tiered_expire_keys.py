"""Wall time of a tiered store's ``expire_keys(None, count_only=True)`` with N demoted
agents (SQLite durable and SQLite cold tiers on /dev/shm): the cost of expiring only the
store's own demoted agents' records (a page of markers at a time: three batched head
reads, then one ``expire_keys`` per agent) instead of one call over the whole cold tier.

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.testing._contract import request


async def main(n: int, runs: int) -> None:
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        durable = SQLiteBackend(Path(tmp) / "durable.db")
        tiered = TieredBackend(durable, cold=SQLiteBackend(Path(tmp) / "cold.db"), idle_after=1)
        ids = [f"agent-{i:06d}" for i in range(n)]
        for i, agent_id in enumerate(ids):
            await tiered.append(request(agent_id, 0, 2, key=f"k{i}"))
        for agent_id in ids:
            assert await tiered.demote(agent_id)
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            counted = await tiered.expire_keys(None, 1e12, count_only=True)
            took.append((time.perf_counter() - started) * 1e3)
            assert counted == n, counted
        await tiered.close()
    print(
        f"n={n} expire_keys(None, count_only) ms: median {statistics.median(took):.1f}"
        f" min {min(took):.1f} max {max(took):.1f} ({runs} runs)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.agents, args.runs))
