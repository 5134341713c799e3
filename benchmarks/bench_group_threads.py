"""Where a group commit's time goes, thread by thread (issue 11, 16 concurrent agents).

N agents save chat states concurrently (``durability="group"``, ``asyncio.gather``) on
one SQLite file; around the saves the script reads each thread's user and system CPU
from ``/proc/self/task/*/stat`` (Linux; 10 ms ticks: use enough saves), and prints
saves/s, CPU per save, appends per commit and each thread's CPU per save. The event
loop's thread is the first row; the SQLite writer/commit threads follow.

``--one-group`` is an experiment on the batching policy, not the engine's: when a
commit lands, the next one is flushed one pass of the loop later, after the saves the
landing woke have joined it (all N agents in one commit instead of two alternating
groups of N/2; the loop is then idle during each commit's fsync).

Compare two trees in alternating runs (the wall figures need a quiet machine; the
load average is printed beside them)::

    for i in 1 2 3; do
      PYTHONPATH=<main>/src .venv/bin/python benchmarks/bench_group_threads.py --agents 16
      .venv/bin/python benchmarks/bench_group_threads.py --agents 16
    done
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload
from statekeeper import StateStore

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[int, tuple[float, float]]:
    """User and system CPU seconds of each thread of this process, by native id."""
    out: dict[int, tuple[float, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[int(tid)] = (int(fields[11]) / TICK, int(fields[12]) / TICK)
    return out


def one_group() -> None:
    """The ``--one-group`` experiment (see the module's docs)."""
    from statekeeper.backends.sqlite import backend as sqlite
    from statekeeper.backends.sqlite import commits

    def landed(
        self: sqlite.SQLiteBackend, loop: asyncio.AbstractEventLoop, queue: Any, n: int, f: Any
    ) -> None:
        outcome = commits._outcome(f)
        commits._settle(queue, outcome)
        if not isinstance(outcome, BaseException):
            self._committed(n)

        def go() -> None:  # (the loop stays "in flight" until then: no flush meanwhile)
            self._in_flight.discard(loop)
            self._next(loop)

        loop.call_soon(go)

    sqlite.SQLiteBackend._landed = landed  # type: ignore[method-assign,assignment]


async def run(agents: int, last: int, sync: str) -> None:
    wl = Workload(agents, 10, last, chars=300)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/group.db?synchronous={sync}"
        async with StateStore(url, durability="group") as store:

            async def one(agent: str) -> None:
                for doc in docs[agent]:
                    await store.save(agent, doc)

            before, c0, t0 = thread_cpu(), time.process_time(), time.perf_counter()
            await asyncio.gather(*(one(a) for a in wl.agent_ids))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            after = thread_cpu()
            commits = store.stats().commits
    saves = agents * len(wl.sizes)
    print(
        f"{agents} agents, {saves} saves, synchronous={sync}: {saves / wall:,.0f} saves/s"
        f" (load average {os.getloadavg()[0]:.1f}), CPU {1e6 * cpu / saves:.0f} us/save,"
        f" {saves / max(commits, 1):.1f} saves/commit"
    )
    loop_thread = threading.get_native_id()
    for tid in sorted(after, key=lambda t: t != loop_thread):
        user = after[tid][0] - before.get(tid, (0.0, 0.0))[0]
        system = after[tid][1] - before.get(tid, (0.0, 0.0))[1]
        if user + system > 0:
            name = "event loop" if tid == loop_thread else f"thread {tid}"
            print(
                f"  {name:14s} user {1e6 * user / saves:6.1f}  sys {1e6 * system / saves:6.1f}"
                " us/save"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--last", type=int, default=60, help="messages in the last state")
    parser.add_argument("--sync", default="FULL", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--one-group", action="store_true", help="the batching experiment")
    args = parser.parse_args()
    if args.one_group:
        one_group()
    asyncio.run(run(args.agents, args.last, args.sync))


if __name__ == "__main__":
    main()
