"""Instructions per save, main vs a branch (left2: the group committer counts a commit
by its results; the read path remembers the event time of a dropped state; a lease
grant whose reply was lost is recognised): load-independent, side by side.

Each tree runs in a child process under ``valgrind --tool=callgrind`` (``PYTHONPATH``
set to that tree's ``src``) twice, with ``--small`` and ``--large`` rounds; the
difference of the two totals divided by the difference of the rounds is one round's
cost in the steady state (start-up and imports cancel out). Workloads:

* ``group``: one round = 16 agents saved concurrently, ``durability="group"`` on the
  memory engine (every batch through ``GroupCommitter._commit_batch``);
* ``conflict``: one round = another store writes agent ``a``, then this store saves it
  (its cached head stale: a conflict, the state read again — the path where the read
  path compares the event at the seq it saw), on the memory engine;
* ``lease``: one round = acquire and release a lease (memory).

Both trees are byte-compiled first, the children run with ``PYTHONHASHSEED=0`` and
without a witness file. ``--repeat`` runs the pairs again to show the spread.

Run::

    .venv/bin/python benchmarks/bench_left2_callgrind.py --a /work/main/src --b src
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


async def _child(work: str, rounds: int) -> None:
    from statekeeper import StateStore
    from statekeeper.backends import MemoryBackend
    from statekeeper.concurrency.leases import LeaseManager

    backend = MemoryBackend()
    if work == "group":
        async with StateStore(backend, durability="group", witness=False) as store:
            for r in range(rounds):
                await asyncio.gather(
                    *(store.save(f"agent-{i}", {"r": r, "text": "x" * 200}) for i in range(16))
                )
    elif work == "conflict":
        async with (
            StateStore(backend, witness=False) as store,
            StateStore(backend, witness=False) as other,
        ):
            await store.save("a", {"r": -1})
            for r in range(rounds):
                await other.save("a", {"other": r})
                await store.save("a", {"r": r})
    else:
        async with StateStore(backend, witness=False) as store:
            manager = LeaseManager(store, holder="w1")
            for _ in range(rounds):
                lease = await manager.acquire("a", ttl=60)
                await lease.release()


def instructions(src: str, work: str, rounds: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                work,
                str(rounds),
            ],
            capture_output=True,
            check=True,
            env=env,
        )
        text = out.read_text()
        return sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", text, re.M))


def per_round(src: str, work: str, small: int, large: int) -> float:
    return (instructions(src, work, large) - instructions(src, work, small)) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=2, metavar=("WORK", "ROUNDS"))
    parser.add_argument("--a", default="/work/main/src", help="tree A's src (main)")
    parser.add_argument("--b", default="src", help="tree B's src (the branch)")
    parser.add_argument("--work", nargs="+", default=["group", "conflict", "lease"])
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--large", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child[0], int(args.child[1])))
        return
    for src in (args.a, args.b):  # byte-compiled first: no run pays a compile
        compileall.compile_dir(src, quiet=1)
    for work in args.work:
        ratios = []
        for _ in range(args.repeat):
            a = per_round(args.a, work, args.small, args.large)
            b = per_round(args.b, work, args.small, args.large)
            ratios.append(b / a)
            print(f"{work}: A {a:,.0f}  B {b:,.0f} instructions per round  B/A {b / a:.4f}")
        print(f"{work}: B/A from {min(ratios):.4f} to {max(ratios):.4f} over {args.repeat} runs")


if __name__ == "__main__":
    main()
