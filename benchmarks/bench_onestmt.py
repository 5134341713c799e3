"""A snapshot-carrying save on SQLite, two source trees side by side (issue 11, "onestmt").

Each tree runs in a worker process of its own (``PYTHONPATH=<tree>/src``), driven one
save at a time by this process, which alternates which tree goes first at every save:
the two sides see the same load. Each worker times its save inside (``perf_counter``
and ``process_time`` around ``await store.save``: the whole process, the SQLite
writer thread included) and says whether the save carried a snapshot (the store's
``snapshots_written`` moved). Chat states as in ``bench_hotpath.py`` (~300-character
messages, one more a save, 4 agents in turn); each round starts both workers on new
files.

Policies: ``every1`` (``snapshot_every=1``: every save carries its whole state) and
``default`` (``"bounded"``: a whole or tail snapshot every few saves). ``--count``
instead counts the statements the writer connection sends a save (the connection's
trace callback; a trigger program's own trace lines are not statements sent).

Run::

    python benchmarks/bench_onestmt.py --base /tmp/base --policy every1 --sync FULL
    python benchmarks/bench_onestmt.py --base /tmp/base --count
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIRST, STEPS, AGENTS, CHARS = 10, 60, 4, 300


def worker(policy: str, sync: str, directory: str, count: bool) -> None:
    sys.path.insert(0, str(HERE))
    from _common import Workload
    from statekeeper import StateStore

    options: dict[str, Any] = {"snapshot_every": 1} if policy == "every1" else {}
    wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=CHARS)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    order = [(a, step) for step in range(len(wl.sizes)) for a in wl.agent_ids]
    loop = asyncio.new_event_loop()
    url = f"sqlite:///{directory}/s.db?synchronous={sync}"
    store = StateStore(url, durability="sync", **options)
    writes = store._writes
    seen: list[str] = []
    traced = False
    wall, proc = time.perf_counter, time.process_time
    for line in sys.stdin:
        if line.strip() == "stop":
            break
        agent, step = order.pop(0)
        doc = docs[agent][step]
        if count and not traced and store.backend._writer is not None:
            store.backend._writer.set_trace_callback(seen.append)
            traced = True
        before = writes.snapshots_written
        del seen[:]
        c0, t0 = proc(), wall()
        loop.run_until_complete(store.save(agent, doc))
        t1, c1 = wall(), proc()
        # statements sent: a trigger program's trace lines ("-- TRIGGER ...") and the
        # repeat of a statement as each of its trigger programs starts are not
        sent = [s for i, s in enumerate(seen) if not s.startswith("--") and seen[i - 1 : i] != [s]]
        reply = {
            "wall": t1 - t0,
            "cpu": c1 - c0,
            "snap": writes.snapshots_written != before,
            "stmts": len(sent) if traced else None,
        }
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    loop.run_until_complete(store.close())


def start(tree: Path, policy: str, sync: str, directory: str, count: bool) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    args = [sys.executable, __file__, "--worker", policy, sync, directory]
    if count:
        args.append("--count")
    return subprocess.Popen(
        args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )


def ask(proc: Any) -> dict[str, Any]:
    proc.stdin.write("save\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())  # type: ignore[no-any-return]


def run_round(trees: dict[str, Path], policy: str, sync: str, first: int, count: bool) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for name, tree in trees.items():
            os.mkdir(f"{tmp}/{name}")
            procs[name] = start(tree, policy, sync, f"{tmp}/{name}", count)
        names = list(trees)
        got: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        try:
            for i in range(AGENTS * (STEPS + 1)):
                for name in names if (i + first) % 2 == 0 else names[::-1]:
                    got[name].append(ask(procs[name]))
        finally:
            for p in procs.values():
                p.stdin.write("stop\n")
                p.stdin.flush()
                p.wait()
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--worker", nargs=3, metavar=("POLICY", "SYNC", "DIR"))
    parser.add_argument("--base", type=Path, help="the other tree (its src/ is imported)")
    parser.add_argument("--policy", default="every1", choices=["every1", "default"])
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL", "OFF"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, count=args.count)
        return
    trees = {"base": args.base, "this": ROOT}
    if args.count:
        for policy in ("every1", "default"):
            got = run_round(trees, policy, "OFF", 0, count=True)
            for name, saves in got.items():
                saves = saves[AGENTS:]  # (each agent's first save: a create)
                snap = [s["stmts"] for s in saves if s["snap"] and s["stmts"] is not None]
                plain = [s["stmts"] for s in saves if not s["snap"] and s["stmts"] is not None]
                print(
                    f"{policy:8} {name:5} statements a save: with a snapshot "
                    f"{statistics.mean(snap) if snap else float('nan'):.2f} ({len(snap)} saves, "
                    f"{sorted(set(snap))}), without "
                    f"{statistics.mean(plain) if plain else float('nan'):.2f} ({len(plain)})"
                )
        return
    ratios: dict[str, list[float]] = {"wall": [], "cpu": [], "wall_all": [], "cpu_all": []}
    per: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in trees}
    for r in range(args.rounds):
        got = run_round(trees, args.policy, args.sync, r, count=False)
        # a save at a snapshot seq: the same saves on both sides (same states, same policy)
        idx = [i for i, s in enumerate(got["this"]) if s["snap"] and got["base"][i]["snap"]]
        idx = [i for i in idx if i >= AGENTS]  # (each agent's first save: a create)
        stat: dict[str, dict[str, float]] = {}
        for name in trees:
            saves = got[name]
            stat[name] = {
                "wall": statistics.median(saves[i]["wall"] for i in idx),
                "cpu": statistics.mean(saves[i]["cpu"] for i in idx),
                "wall_all": statistics.median(s["wall"] for s in saves[AGENTS:]),
                "cpu_all": statistics.mean(s["cpu"] for s in saves[AGENTS:]),
            }
            per[name]["wall"].append(1e6 * stat[name]["wall"])
            per[name]["cpu"].append(1e6 * stat[name]["cpu"])
        for key in ratios:
            ratios[key].append(stat["this"][key] / stat["base"][key])
        print(
            f"round {r}: {len(idx)} snapshot saves; p50 wall base {1e6 * stat['base']['wall']:.0f}"
            f" this {1e6 * stat['this']['wall']:.0f} us; CPU base {1e6 * stat['base']['cpu']:.0f}"
            f" this {1e6 * stat['this']['cpu']:.0f} us",
            flush=True,
        )

    def spread(xs: list[float], fmt: str) -> str:
        return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}..{max(xs):{fmt}}]"

    print(f"policy {args.policy}, synchronous={args.sync}, {args.rounds} rounds")
    for name in trees:
        print(
            f"  {name}: snapshot save p50 wall {spread(per[name]['wall'], '.0f')} us,"
            f" CPU {spread(per[name]['cpu'], '.0f')} us"
        )
    for key, xs in ratios.items():
        print(f"  this / base {key}: {spread(xs, '.3f')}")


if __name__ == "__main__":
    main()
