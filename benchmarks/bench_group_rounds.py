"""Where the CPU of ``bench_hotpath.py --quick``'s 16-agent group-commit row goes, round by
round (issue 11): a fresh store file each repetition, as the row opens one per round.

The row's workload (16 agents, chat states of ~300-character messages, 10 -> 15
messages: 6 saves an agent, ``durability="group"``) timed as the row times it (process
CPU, every thread, between the store's open and close), split into the first round (each
agent's first save: the creates, and what a store does once — its reader connection,
the commit thread, the writer's statements) and rounds 2-6 (the batched saves of cached
agents); and, apart, the first saves of 16 new agents on a store already warm (no
one-time work left), and the first read of a fresh store (the reader connection opened:
what a new agent's first save reads before it writes). Medians over ``--reps``
repetitions; process CPU on a loaded machine counts its cache misses and preemptions, so
compare trees in alternating runs, and read instruction counts
(``bench_group_window.py``) for the conclusions::

    for i in 1 2 3; do
      PYTHONPATH=<main>/src .venv/bin/python benchmarks/bench_group_rounds.py
      PYTHONPATH=src .venv/bin/python benchmarks/bench_group_rounds.py
    done
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload
from statekeeper import AgentNotFound, StateStore

AGENTS = 16
FIRST, LAST = 10, 15  # bench_hotpath.py --quick: curve_last 15


async def fresh(path: Path, sync: str, wl: Workload) -> tuple[float, float, float]:
    """(first round, rounds 2-6, the first read) CPU seconds a save / a read."""
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    async with StateStore(f"sqlite:///{path}?synchronous={sync}", durability="group") as store:

        async def run(a: str, steps: slice) -> None:
            for doc in docs[a][steps]:
                await store.save(a, doc)

        c0 = time.process_time()
        await asyncio.gather(*(run(a, slice(0, 1)) for a in wl.agent_ids))
        c1 = time.process_time()
        await asyncio.gather(*(run(a, slice(1, None)) for a in wl.agent_ids))
        c2 = time.process_time()
    saves = len(wl.sizes) - 1
    async with StateStore(f"sqlite:///{path}.read?synchronous={sync}") as store:
        c3 = time.process_time()
        with contextlib.suppress(AgentNotFound):
            await store.load("nobody")
        c4 = time.process_time()
    return (c1 - c0) / AGENTS, (c2 - c1) / (AGENTS * saves), c4 - c3


async def warm(path: Path, sync: str, wl: Workload, reps: int) -> float:
    """CPU seconds of a new agent's first save on a warm store (16 together)."""
    docs = {a: wl.docs(a)[0] for a in wl.agent_ids}
    out = []
    async with StateStore(f"sqlite:///{path}?synchronous={sync}", durability="group") as store:
        for rep in range(reps + 1):
            c0 = time.process_time()
            await asyncio.gather(*(store.save(f"{a}-{rep}", docs[a]) for a in wl.agent_ids))
            out.append((time.process_time() - c0) / AGENTS)
    return statistics.median(out[1:])


async def main(reps: int, sync: str) -> None:
    wl = Workload(AGENTS, FIRST, LAST, chars=300)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [await fresh(Path(tmp) / f"f{i}.db", sync, wl) for i in range(reps)]
        new = await warm(Path(tmp) / "warm.db", sync, wl, reps)
    first = statistics.median(r[0] for r in rows)
    later = statistics.median(r[1] for r in rows)
    read = statistics.median(r[2] for r in rows)
    saves = AGENTS * len(wl.sizes)
    total = AGENTS * first + (saves - AGENTS) * later
    print(
        f"synchronous={sync}, {reps} fresh stores: first round {1e6 * first:.0f} us CPU a save,"
        f" rounds 2-{len(wl.sizes)} {1e6 * later:.0f} us; the row's {1e6 * total / saves:.0f} us"
        f" a save, {AGENTS * first / total:.0%} of it in the first round. A new agent's first"
        f" save on a warm store: {1e6 * new:.0f} us. A fresh store's first read (its reader"
        f" connection opened): {1e6 * read:.0f} us."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=12)
    parser.add_argument("--sync", default="OFF", choices=["OFF", "NORMAL", "FULL"])
    args = parser.parse_args()
    asyncio.run(main(args.reps, args.sync))
