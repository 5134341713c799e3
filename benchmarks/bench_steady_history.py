"""A steady ``StateStore.save`` (one message appended to the caller's own list) over a
history of ``--messages`` messages of ``--chars`` characters: median wall and CPU µs
a save (issue 11, "perf-steady" in docs/benchmarks.md). Run it with each tree's
``PYTHONPATH`` in turn to compare them::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_steady_history.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from statekeeper import StateStore
from statekeeper.bench.workload import make_messages


async def run(messages: int, chars: int, saves: int, sync: str) -> tuple[float, float]:
    history = make_messages(messages + saves, seed=3, chars=chars)
    msgs = history[:messages]
    walls: list[float] = []
    cpus: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 's.db'}?synchronous={sync}"
        async with StateStore(url) as store:
            await store.save("a", {"messages": msgs})
            for item in history[messages:]:
                msgs.append(item)
                doc = {"messages": msgs}
                wall, cpu = time.perf_counter(), time.process_time()
                await store.save("a", doc)
                cpus.append(time.process_time() - cpu)
                walls.append(time.perf_counter() - wall)
    return statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--chars", type=int, default=4000)
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL", "OFF"])
    args = parser.parse_args()
    wall, cpu = asyncio.run(run(args.messages, args.chars, args.saves, args.sync))
    print(
        f"{args.messages} x {args.chars} chars, {args.saves} saves, {args.sync}: "
        f"wall {wall:,.1f} us, CPU {cpu:,.1f} us (medians)"
    )


if __name__ == "__main__":
    main()
