"""CPU per ``store.delete`` on SQLite (a file): what the feed tombstone costs (its
append in the delete's commit: the tombstone stream's head and last record read, one
record sealed, ``append_together`` instead of ``delete_agent``).

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately; compare the medians (CPU time of this process: the SQLite work runs in
its threads, counted too)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper import StateStore


async def per_delete(n: int, url: str) -> float:
    """CPU microseconds per delete of ``n`` agents of 3 events each."""
    async with StateStore(url) as store:
        ids = [f"ns/a{i}" for i in range(n)]
        for agent_id in ids:
            for k in range(3):
                await store.save(agent_id, {"k": k})
        started = time.process_time()
        for agent_id in ids:
            await store.delete(agent_id)
        return (time.process_time() - started) / n * 1e6


async def main(n: int, rounds: int) -> None:
    for engine in ("memory", "sqlite"):
        results = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as folder:
                url = "memory://" if engine == "memory" else f"sqlite:///{Path(folder) / 'd.db'}"
                results.append(await per_delete(n, url))
        low, mid = min(results), statistics.median(results)
        print(
            f"{engine} delete\tmin {low:.0f} median {mid:.0f} us CPU\t{[round(r) for r in results]}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=400, help="agents deleted per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
