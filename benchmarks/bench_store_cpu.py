"""CPU and latency of the store's hot path, in process, for side-by-side runs.

Runs whatever ``statekeeper`` is importable, so two versions compare by PYTHONPATH::

    python benchmarks/bench_store_cpu.py                       # this checkout
    PYTHONPATH=/path/to/other/src python benchmarks/bench_store_cpu.py
    python benchmarks/bench_store_cpu.py --only history group  # some parts only

Parts (``--only``):

- ``saves``: sequential ``StateStore.save`` calls of a growing chat state (one
  ~300-character message more per save) on memory://, SQLite WAL ``synchronous=NORMAL``
  and ``FULL``: CPU per save (``time.process_time``, all threads) and wall time per save.
- ``history``: CPU per save once the history is long: each agent is first grown to
  ``H`` messages (for each ``H`` of ``--history``), then ``--saves`` more saves are
  measured, on memory:// (the store's own CPU, no storage engine) — flat CPU as ``H``
  grows is what O(size of the change) means; both ``StateStore.save`` of a plain dict
  and a :class:`DurableAgent` appending to ``agent.data``.
- ``group``: N agents saving concurrently (``asyncio.gather``) under
  ``durability="group"`` on SQLite WAL (``synchronous=OFF``: the disk taken out, CPU
  only): CPU per batched save.
- ``load``: p50 latency of a cold ``load`` (a fresh store, no cache) of agents with
  ``--events`` events since their start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import statekeeper
from statekeeper import StateStore

MESSAGE = "x" * 300
PARTS = ("saves", "history", "group", "load")


def message(i: int) -> dict[str, object]:
    return {"role": "user" if i % 2 else "ai", "content": f"{i} {MESSAGE}"}


def state(n: int) -> dict[str, object]:
    return {"messages": [message(i) for i in range(n)], "step": n}


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


async def history_saves(history: int, measured: int) -> dict[str, float]:
    """CPU us per save at a history of ``history`` messages (memory://)."""
    out: dict[str, float] = {}
    async with StateStore("memory://", snapshot_every=10**9, snapshot_bytes=None) as store:
        # a plain dict, the caller appending to its own list (as a chat loop does)
        doc: dict[str, Any] = {"messages": [message(i) for i in range(history)], "step": 0}
        await store.save("plain", doc)
        await store.save("plain", doc)  # the first save after a create is the full diff
        cpu0 = time.process_time()
        for i in range(measured):
            doc["messages"].append(message(history + i))
            doc["step"] = i
            await store.save("plain", doc)
        out["store.save(dict)"] = (time.process_time() - cpu0) / measured * 1e6
        agent = await store.agent(
            "durable", initial_data={"messages": [message(i) for i in range(history)]}
        )
        agent.data["messages"].append(message(history))
        await agent.save()
        cpu0 = time.process_time()
        for i in range(measured):
            agent.data["messages"].append(message(history + i + 1))
            agent.data["step"] = i
            await agent.save()
        out["DurableAgent.save()"] = (time.process_time() - cpu0) / measured * 1e6
    return out


async def group_saves(path: Path, agents: int, per_agent: int) -> float:
    """CPU us per save of ``agents`` agents saving concurrently under group commit."""
    url = f"sqlite:///{path}?synchronous=OFF"
    async with StateStore(url, durability="group") as store:
        docs = [{"messages": [message(0)], "step": 0} for _ in range(agents)]

        async def one(a: int, n: int) -> None:
            docs[a]["messages"].append(message(n))  # type: ignore[attr-defined]
            docs[a]["step"] = n
            await store.save(f"agent-{a}", docs[a])

        await asyncio.gather(*(one(a, 1) for a in range(agents)))  # create them
        cpu0 = time.process_time()
        for n in range(2, per_agent + 2):
            await asyncio.gather(*(one(a, n) for a in range(agents)))
        cpu = time.process_time() - cpu0
    return cpu / (agents * per_agent) * 1e6


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
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--saves", type=int, default=150)
    parser.add_argument("--events", type=int, default=60)
    parser.add_argument("--history", type=int, nargs="+", default=[300, 3000])
    parser.add_argument("--group", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    out: dict[str, object] = {"statekeeper": str(Path(statekeeper.__file__).parent)}
    with tempfile.TemporaryDirectory() as tmp:
        if "saves" in args.only:
            for name, url in (
                ("memory", "memory://"),
                ("sqlite NORMAL", f"sqlite:///{tmp}/n.db?synchronous=NORMAL"),
                ("sqlite FULL", f"sqlite:///{tmp}/f.db?synchronous=FULL"),
            ):
                cpu, wall = await saves(url, args.agents, args.saves)
                out[f"save {name}: cpu us"] = round(cpu)
                out[f"save {name}: wall us"] = round(wall)
        if "history" in args.only:
            for h in args.history:
                for what, cpu in (await history_saves(h, args.saves)).items():
                    out[f"{what} at {h} messages: cpu us"] = round(cpu, 1)
        if "group" in args.only:
            for n in args.group:
                cpu = await group_saves(Path(tmp) / f"g{n}.db", n, max(10, args.saves // 5))
                out[f"group {n} agents (sync OFF): cpu us/save"] = round(cpu, 1)
        if "load" in args.only:
            out[f"cold load p50 us ({args.events} events)"] = round(
                await cold_loads(Path(tmp) / "load.db", 20, args.events)
            )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
