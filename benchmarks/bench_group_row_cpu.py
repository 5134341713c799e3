"""Process CPU a save of ``bench_hotpath.py --quick``'s concurrency rows (1, 4 and 16
agents on ``durability="group"``, 6 saves an agent from 10 to 15 messages, a fresh
store file each repetition, the store opened before the clock starts, as the row times
it), at ``synchronous=OFF`` by default so that the fsync's luck is left out: the row's
CPU, first round included. Medians over ``--reps``; run the trees alternately (the
machine's load moves process CPU; instruction counts: ``bench_group_window.py --warm 0
--saves 6 --agents N``)::

    for i in 1 2 3; do
      PYTHONPATH=<main>/src .venv/bin/python benchmarks/bench_group_row_cpu.py
      PYTHONPATH=src .venv/bin/python benchmarks/bench_group_row_cpu.py
    done

``--sync FULL --last 30`` is the full curve's row (21 saves an agent, the WAL's growth
step included); the wall a save is printed beside the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload
from statekeeper import StateStore


async def row(path: Path, sync: str, wl: Workload, agents: list[str]) -> tuple[float, float]:
    """CPU and wall seconds a save of one row: every agent's saves, concurrently."""
    docs = {a: wl.docs(a) for a in agents}
    async with StateStore(f"sqlite:///{path}?synchronous={sync}", durability="group") as store:

        async def run(a: str) -> None:
            for doc in docs[a]:
                await store.save(a, doc)

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(run(a) for a in agents))
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    saves = len(agents) * len(wl.sizes)
    return cpu / saves, wall / saves


async def main(reps: int, sync: str, counts: list[int], last: int = 15) -> None:
    wl = Workload(max(counts), 10, last, chars=300)
    with tempfile.TemporaryDirectory() as tmp:
        out: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
        for rep in range(reps):
            for n in counts:
                got = await row(Path(tmp) / f"r{n}-{rep}.db", sync, wl, wl.agent_ids[:n])
                out[n].append(got)
    for n in counts:
        v = sorted(cpu for cpu, _ in out[n])
        wall = statistics.median(w for _, w in out[n])
        print(
            f"{n:>3} agents: {1e6 * statistics.median(v):6.1f} us CPU a save"
            f" [{1e6 * v[0]:.1f}..{1e6 * v[-1]:.1f}], wall {1e6 * wall:,.0f} us a save"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--sync", default="OFF", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--last",
        type=int,
        default=15,
        help="messages of an agent's last state (saves an agent: LAST - 9; 30: the 21 saves"
        " of bench_hotpath.py's full curve)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.sync, args.agents, args.last))
