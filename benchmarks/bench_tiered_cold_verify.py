"""What checking a demoted agent's cold copy against its marker costs where it is read
in place, in CPU time of this process (SQLite runs in it): ``store.verify()`` of a
tiered store (SQLite durable and cold tiers) whose agents are all demoted, and a
read-only store's load of a demoted agent.

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately (compare medians of several runs)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import _common  # (puts the measured tree's src/ on the path)
from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend


def _tiered(where: Path, readonly: bool = False) -> TieredBackend:
    durable = SQLiteBackend(where / "durable.db", readonly=readonly)
    cold = SQLiteBackend(where / "cold.db", readonly=readonly)
    if readonly:
        return TieredBackend(durable, cold=cold, readonly=True)
    return TieredBackend(durable, cold=cold, idle_after=3600)


async def main(agents: int, events: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        backend = _tiered(where)
        async with StateStore(backend) as store:
            for a in range(agents):
                for n in range(events):
                    await store.save(f"agent-{a:05d}", {"n": n, "text": "x" * 200})
            for a in range(agents):
                assert await backend.demote(f"agent-{a:05d}")
            verify = []
            for _ in range(repeat):
                started = time.process_time()
                report = await store.verify()
                verify.append(time.process_time() - started)
                assert report.ok and report.agents == agents, report.problems[:3]
        loads = []
        async with StateStore(_tiered(where, readonly=True)) as readonly:
            for _ in range(repeat):
                started = time.process_time()
                for a in range(min(agents, 100)):
                    await readonly.load(f"agent-{a:05d}")
                loads.append((time.process_time() - started) / min(agents, 100))
    print(f"source {_common.source_state()}")
    print(
        f"verify of {agents} demoted agents x {events} events: median"
        f" {statistics.median(verify) * 1e3:.1f} ms (min {min(verify) * 1e3:.1f},"
        f" max {max(verify) * 1e3:.1f})"
    )
    print(
        f"read-only load of a demoted agent: median {statistics.median(loads) * 1e6:.0f} us"
        f" (min {min(loads) * 1e6:.0f}, max {max(loads) * 1e6:.0f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.agents, args.events, args.repeat))
