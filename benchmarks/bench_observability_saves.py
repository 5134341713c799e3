"""N saves of one agent, plain or instrumented: run under callgrind for instruction counts.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python benchmarks/bench_observability_saves.py {plain|inst} N [URL]

Instructions per save = (count at N=900 - count at N=300) / 600 (setup cancels out).
"""

from __future__ import annotations

import asyncio
import sys

from prometheus_client import CollectorRegistry

import _common  # noqa: F401 - puts src/ on the path
from statekeeper import StateStore
from statekeeper.observability import instrument


async def main(mode: str, n: int, url: str) -> None:
    async with StateStore(url, witness=False) as store:
        if mode == "inst":
            instrument(store, registry=CollectorRegistry(), tracing=False)
        await store.save("agent", {"step": 0})
        for i in range(n):
            await store.save("agent", {"step": i + 1, "note": "x" * 200})


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "memory://")
    )
