"""CPU and latency of the store's hot path, in process, for side-by-side runs.

Runs whatever ``statekeeper`` is importable, so two versions compare by PYTHONPATH::

    python benchmarks/bench_store_cpu.py                       # this checkout
    PYTHONPATH=/path/to/other/src python benchmarks/bench_store_cpu.py

Per configuration (memory://, SQLite WAL synchronous=NORMAL and FULL) it makes
sequential ``StateStore.save`` calls of a growing chat state (one ~300-character
message more per save) and reports CPU per save (``time.process_time``, all threads)
and wall time per save; then the p50 latency of a cold ``load`` (a fresh store, no
cache) of agents with ``EVENTS`` events since their start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import statekeeper
from statekeeper import StateStore

MESSAGE = "x" * 300


def state(n: int) -> dict[str, object]:
    return {
        "messages": [
            {"role": "user" if i % 2 else "ai", "content": f"{i} {MESSAGE}"} for i in range(n)
        ],
        "step": n,
    }


async def saves(url: str, agents: int, per_agent: int) -> tuple[float, float]:
    """(CPU us per save, wall us per save) of sequential saves."""
    async with StateStore(url) as store:
        states = [state(n) for n in range(per_agent + 1)]
        for a in range(agents):  # warm up: create every agent
            await store.save(f"agent-{a}", states[0])
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for a in range(agents):
            for n in range(1, per_agent + 1):
                await store.save(f"agent-{a}", states[n])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    count = agents * per_agent
    return cpu / count * 1e6, wall / count * 1e6


async def cold_loads(path: Path, agents: int, events: int) -> float:
    """p50 latency (us) of loading the latest state of an agent not in the cache."""
    url = f"sqlite:///{path}?synchronous=NORMAL"
    async with StateStore(url) as store:
        for a in range(agents):
            for n in range(1, events + 1):
                await store.save(f"agent-{a}", state(n))
    times = []
    async with StateStore(url) as fresh:
        for a in range(agents):
            t0 = time.perf_counter()
            await fresh.load(f"agent-{a}")
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--saves", type=int, default=150)
    parser.add_argument("--events", type=int, default=60)
    args = parser.parse_args()
    out: dict[str, object] = {"statekeeper": str(Path(statekeeper.__file__).parent)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, url in (
            ("memory", "memory://"),
            ("sqlite NORMAL", f"sqlite:///{tmp}/n.db?synchronous=NORMAL"),
            ("sqlite FULL", f"sqlite:///{tmp}/f.db?synchronous=FULL"),
        ):
            cpu, wall = await saves(url, args.agents, args.saves)
            out[f"save {name}: cpu us"] = round(cpu)
            out[f"save {name}: wall us"] = round(wall)
        out[f"cold load p50 us ({args.events} events)"] = round(
            await cold_loads(Path(tmp) / "load.db", 20, args.events)
        )
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
