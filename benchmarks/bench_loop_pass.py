"""CPU of a lone save with and without its pass of the event loop (issue 11).

A lone append on SQLite used to let the loop run once before committing (so that
the appends of other ready tasks join it); since then it skips that pass when no
other task is ready and a pass was made less than ``sqlite.PASS_EVERY`` ago. The
gain cannot be counted with callgrind: under valgrind a save takes longer than
``PASS_EVERY``, so every save still makes its pass there. This script measures it
in CPU time instead, in one process, side by side: ``StateStore.save`` of the chat
states of :mod:`bench_save_instructions` one agent at a time, with ``PASS_EVERY = 0``
(a pass before every commit, as before) and with the default, sides interleaved
per round; CPU seconds (``time.process_time``: this process only, so less
sensitive to the machine's load than wall time, never immune).

Run::

    .venv/bin/python benchmarks/bench_loop_pass.py --rounds 7 --sync NORMAL OFF
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload, median, table
from statekeeper import StateStore
from statekeeper.backends.sqlite import commits as sqlite
from statekeeper.backends.sqlite import lone as sqlite_lone

SIDES = {"a pass per save (before)": 0.0, "skipped when nothing is ready": sqlite.PASS_EVERY}


async def one_run(path: Path, sync: str, steps: int) -> float:
    """CPU seconds per save of ``steps`` saves of 4 agents, one at a time."""
    wl = Workload(4, 10, 10 + steps, chars=300)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    async with StateStore(f"sqlite:///{path}?synchronous={sync}") as store:
        for a in wl.agent_ids:  # created and cached: every later save is the common one
            await store.save(a, docs[a][0])
        start = time.process_time()
        for step in range(1, steps + 1):
            for a in wl.agent_ids:
                await store.save(a, docs[a][step])
        return (time.process_time() - start) / (4 * steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sync", nargs="+", default=["NORMAL", "OFF"])
    args = parser.parse_args()
    default = sqlite.PASS_EVERY
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sync in args.sync:
            cpu: dict[str, list[float]] = {side: [] for side in SIDES}
            for r in range(args.rounds):
                for side, every in SIDES.items():
                    sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = every
                    path = Path(tmp) / f"{sync}-{r}-{every}.db"
                    cpu[side].append(asyncio.run(one_run(path, sync, args.steps)))
            sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = default
            before, after = cpu.values()
            ratios = sorted(a / b for a, b in zip(after, before, strict=True))
            for side, values in cpu.items():
                rows.append(
                    (
                        sync,
                        side,
                        f"{median(values) * 1e6:,.0f} [{min(values) * 1e6:,.0f}.."
                        f"{max(values) * 1e6:,.0f}]",
                        "",
                    )
                )
            rows.append(
                (
                    sync,
                    "**ratio (same round)**",
                    "",
                    f"{median(ratios):.3f}x [{ratios[0]:.3f}..{ratios[-1]:.3f}]",
                )
            )
    print(table(("sync", "side", "CPU us per save, median [min..max]", "after / before"), rows))
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"({args.rounds} rounds x {4 * args.steps} saves per side; load average {load})")


if __name__ == "__main__":
    main()
