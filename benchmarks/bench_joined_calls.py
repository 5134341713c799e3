"""CPU and wall time of one ``run_joined`` call (a thread of its own) against one
``asyncio.to_thread`` call (the default executor), no-op work, 2,000 calls, 5 rounds
interleaved: the cost h/backupesc added per thread hop (docs/benchmarks.md, h/readesc).

    PYTHONPATH=src python benchmarks/bench_joined_calls.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

from statekeeper._joined import run_joined

N = 2000


def noop():
    return 1


async def new():
    for _ in range(N):
        await run_joined(lambda: None, noop)


async def old():
    for _ in range(N):
        await asyncio.to_thread(noop)


res = {"new": [], "old": []}
for _ in range(5):
    for name, fn in (("new", new), ("old", old)):
        c, w = time.process_time(), time.perf_counter()
        asyncio.run(fn())
        res[name].append(((time.process_time() - c) / N * 1e6, (time.perf_counter() - w) / N * 1e6))
for k, v in res.items():
    print(
        k,
        "cpu us/call median",
        round(statistics.median(x[0] for x in v), 1),
        [round(x[0]) for x in v],
        "wall us/call",
        round(statistics.median(x[1] for x in v), 1),
        [round(x[1]) for x in v],
    )
