"""The event loop's share of a group commit (issue 11, 16 agents): asyncio's default loop
against uvloop, interleaved in the same run.

N agents save concurrently (``durability="group"``, chat states as in
:mod:`bench_save_instructions`: ~300-character messages, one more a save), each side in
a fresh child process, the loops alternating pair by pair so both see the same load:

* default: wall saves/s and process CPU per save at ``--sync`` (FULL), ``--pairs``
  pairs, and the uvloop/asyncio ratio of each pair;
* ``--callgrind``: instructions per save (``valgrind --tool=callgrind
  --separate-threads=yes``, ``synchronous=OFF``, witness off), the difference of a
  ``--small`` and a ``--large`` run over the saves between them, for the event-loop
  thread and the whole process — the load-independent figure.

Run::

    .venv/bin/python benchmarks/bench_group_loop.py --pairs 4
    .venv/bin/python benchmarks/bench_group_loop.py --callgrind
    .venv/bin/python benchmarks/bench_group_loop.py --callgrind --loops asyncio
    PYTHONPATH=<main>/src .venv/bin/python benchmarks/bench_group_loop.py --callgrind
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload

CHARS = 300
FIRST = 10
#: saves an agent the workload is built for in every child (its cost then cancels out
#: of the difference of two callgrind runs)
STEPS = 200
LOOPS = ("asyncio", "uvloop")


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """``coro`` run to the end on a new event loop of kind ``loop``."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


async def _group(path: Path, agents: int, rounds: int, sync: str) -> dict[str, float]:
    from statekeeper import StateStore

    if rounds > STEPS:
        raise SystemExit(f"at most {STEPS} saves an agent, not {rounds}")
    wl = Workload(agents, FIRST, FIRST + 5 + STEPS, chars=CHARS)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    url = f"sqlite:///{path}?synchronous={sync}"
    async with StateStore(url, durability="group", witness=False) as store:

        async def run(a: str, steps: slice) -> None:
            for doc in docs[a][steps]:
                await store.save(a, doc)

        await asyncio.gather(*(run(a, slice(0, 5)) for a in wl.agent_ids))  # warm-up
        commits0 = store.stats().commits
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(run(a, slice(5, 5 + rounds)) for a in wl.agent_ids))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        commits = store.stats().commits - commits0
    saves = agents * rounds
    return {"saves": saves, "wall": wall, "cpu": cpu, "commits": commits}


def child(loop: str, agents: int, rounds: int, sync: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        return dict(run_on(loop, _group(Path(tmp) / "bench.db", agents, rounds, sync)))


def _child_cmd(loop: str, agents: int, rounds: int, sync: str) -> list[str]:
    return [sys.executable, __file__, "--child", loop, str(agents), str(rounds), sync]


def _side(r: dict[str, float]) -> str:
    return (
        f"{r['saves'] / r['wall']:,.0f} saves/s, {r['cpu'] / r['saves'] * 1e6:.0f} us CPU/save, "
        f"{r['saves'] / max(r['commits'], 1):.1f} saves/commit"
    )


def wall_pairs(pairs: int, agents: int, rounds: int, sync: str) -> None:
    rows: dict[str, list[dict[str, float]]] = {loop: [] for loop in LOOPS}  # (both loops)
    for i in range(pairs):
        order = LOOPS if i % 2 == 0 else LOOPS[::-1]
        for loop in order:
            out = subprocess.run(
                _child_cmd(loop, agents, rounds, sync), capture_output=True, text=True, check=True
            ).stdout
            rows[loop].append(json.loads(out.strip().splitlines()[-1]))
        a, u = rows["asyncio"][-1], rows["uvloop"][-1]
        print(
            f"pair {i + 1} (load {os.getloadavg()[0]:.1f}): asyncio {_side(a)}; uvloop {_side(u)}; "
            f"rate ratio {a['wall'] / u['wall']:.2f}x, CPU ratio {u['cpu'] / a['cpu']:.2f}x",
            flush=True,
        )
    for loop in LOOPS:
        rates = [r["saves"] / r["wall"] for r in rows[loop]]
        cpus = [r["cpu"] / r["saves"] * 1e6 for r in rows[loop]]
        print(
            f"{loop}: median {statistics.median(rates):,.0f} saves/s "
            f"[{min(rates):,.0f}..{max(rates):,.0f}], CPU/save median "
            f"{statistics.median(cpus):.0f} us [{min(cpus):.0f}..{max(cpus):.0f}]"
        )


def _callgrind(loop: str, agents: int, rounds: int) -> tuple[int, int, int, int]:
    """(instructions of the loop thread, of the whole process, saves, commits made)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}",
                *_child_cmd(loop, agents, rounds, "OFF"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        made = json.loads(proc.stdout.strip().splitlines()[-1])
        per_thread = {}
        for file in Path(tmp).glob("cg.out*"):
            text = file.read_text()
            thread = re.search(r"^thread: (\d+)", text, re.M)
            if thread is None:  # (not a thread's file of the child's)
                continue
            total = sum(int(m.group(1)) for m in re.finditer(r"^summary: (\d+)", text, re.M))
            per_thread[int(thread.group(1))] = total
    return per_thread.get(1, 0), sum(per_thread.values()), made["saves"], made["commits"]


def callgrind(loops: list[str], agents: int, small: int, large: int) -> None:
    """Under valgrind the threads take turns, so how many saves share a commit varies
    from run to run (printed: the instructions a save follow it)."""
    for loop in loops:
        l1, p1, s1, _ = _callgrind(loop, agents, small)
        l2, p2, s2, c2 = _callgrind(loop, agents, large)
        saves = s2 - s1
        print(
            f"{loop}: {(l2 - l1) / saves:,.0f} instructions a save on the loop thread, "
            f"{(p2 - p1) / saves:,.0f} in the process ({saves} saves counted, "
            f"{s2 / max(c2, 1):.1f} saves a commit in the longer run, load "
            f"{os.getloadavg()[0]:.1f})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=4, metavar=("LOOP", "AGENTS", "ROUNDS", "SYNC"))
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=150, help="saves an agent (wall)")
    parser.add_argument("--sync", default="FULL", choices=["OFF", "NORMAL", "FULL"])
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=LOOPS)
    parser.add_argument("--small", type=int, default=5)
    parser.add_argument("--large", type=int, default=45)
    args = parser.parse_args()
    if args.child:
        loop, agents, rounds, sync = args.child
        if loop not in LOOPS:
            raise SystemExit(f"--child: the loop must be one of {LOOPS}, not {loop!r}")
        print(json.dumps(child(loop, int(agents), int(rounds), sync)))
        return
    if args.callgrind:
        callgrind(args.loops, args.agents, args.small, args.large)
        return
    wall_pairs(args.pairs, args.agents, args.rounds, args.sync)


if __name__ == "__main__":
    main()
