"""Instructions per keyed save, main vs a branch (keysttl: idempotency records now carry
``created_at``): load-independent, side by side.

Each tree runs in a child process under ``valgrind --tool=callgrind`` (``PYTHONPATH``
set to that tree's ``src``) twice, with ``--small`` and ``--large`` saves of one agent,
each with an idempotency key of its own (``idempotency_key=f"k{i}"``), on SQLite
(``synchronous=OFF``: no fsync, which callgrind does not count anyway) or memory; the
difference of the two totals divided by the difference of the saves is one keyed save's
cost in the steady state (start-up and imports cancel out). Every thread counted; both
trees are byte-compiled first, the children run with ``PYTHONHASHSEED=0`` and the
store without its witness file (whose once-a-second flush made counts depend on time).
``--repeat`` runs the pairs again to show the spread.

Run::

    .venv/bin/python benchmarks/bench_keyed_save_callgrind.py --a /work/main/src --b src
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


async def _child(engine: str, saves: int, path: Path) -> None:
    from statekeeper import StateStore

    url = "memory://" if engine == "memory" else f"sqlite:///{path}?synchronous=OFF"
    # (no witness: it flushes its file once a second, so a run's length under valgrind
    # would decide how many flushes it counts)
    async with StateStore(url, durability="sync", witness=False) as store:
        for i in range(saves):
            await store.save("agent", {"i": i, "text": "x" * 200}, idempotency_key=f"k{i}")


def instructions(src: str, engine: str, saves: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        # (a fixed hash seed: dict probes otherwise differ run to run by ~1 %)
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                engine,
                str(saves),
                str(Path(tmp) / "bench.db"),
            ],
            capture_output=True,
            check=True,
            env=env,
        )
        text = out.read_text()
        return sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", text, re.M))


def per_save(src: str, engine: str, small: int, large: int) -> float:
    return (instructions(src, engine, large) - instructions(src, engine, small)) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "SAVES", "PATH"))
    parser.add_argument("--a", default="/work/main/src", help="tree A's src (main)")
    parser.add_argument("--b", default="src", help="tree B's src (the branch)")
    parser.add_argument("--engines", nargs="+", default=["sqlite", "memory"])
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=250)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        asyncio.run(_child(args.child[0], int(args.child[1]), Path(args.child[2])))
        return
    for src in (args.a, args.b):  # byte-compiled first: no run pays a compile
        compileall.compile_dir(src, quiet=1)
    for engine in args.engines:
        ratios = []
        for _ in range(args.repeat):
            a = per_save(args.a, engine, args.small, args.large)
            b = per_save(args.b, engine, args.small, args.large)
            ratios.append(b / a)
            print(f"{engine}: A {a:,.0f}  B {b:,.0f} instructions per keyed save  B/A {b / a:.4f}")
        print(f"{engine}: B/A from {min(ratios):.4f} to {max(ratios):.4f} over {args.repeat} runs")


if __name__ == "__main__":
    main()
