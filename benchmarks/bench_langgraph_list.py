"""``saver.list(None)`` over many threads, beside LangGraph's ``SqliteSaver``.

Workload: ``--threads`` threads of a one-node graph invoked once (3 checkpoints a
thread: the input, the loop's first step and the node's), each with metadata
``{"user": "u<i % 7>"}``, written by both savers into ``--dir`` (built once, reused
by later runs: compare two versions of statekeeper on the same files). Measured per
round, the savers alternating: ``list(None)`` (every checkpoint of every thread) and
``list(None, filter={"user": "u3"})``, wall and CPU time (``time.process_time``); the
median of ``--rounds`` rounds, the spread (min-max) and statekeeper / SqliteSaver.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_list.py --dir /tmp/lglist --threads 1200
"""

from __future__ import annotations

import argparse
import operator
import os
import sqlite3
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver


class _State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    b = StateGraph(_State)
    b.add_node("n", lambda s: {"log": ["n"]})
    b.add_edge(START, "n")
    return b.compile(checkpointer=saver)


def _build(folder: Path, threads: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    sk = StatekeeperSaver.from_url(f"sqlite:///{folder / 'sk.db'}", durability="group")
    conn = sqlite3.connect(folder / "peer.sqlite", check_same_thread=False)
    try:
        gs, gq = _graph(sk), _graph(SqliteSaver(conn))
        for i in range(threads):
            cfg = {"configurable": {"thread_id": f"t-{i:05d}"}, "metadata": {"user": f"u{i % 7}"}}
            gs.invoke({"log": ["x"]}, cfg)
            gq.invoke({"log": ["x"]}, cfg)
    finally:
        sk.close()
        conn.close()


def _count(saver: Any, kw: dict[str, Any]) -> int:
    return sum(1 for _ in saver.list(None, **kw))


def _timed(fn: Callable[[], int]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/sk-bench-lglist"))
    parser.add_argument("--threads", type=int, default=1200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if not (args.dir / "peer.sqlite").exists():
        _build(args.dir, args.threads)
    sk = StatekeeperSaver.from_url(f"sqlite:///{args.dir / 'sk.db'}")
    peer = SqliteSaver(sqlite3.connect(args.dir / "peer.sqlite", check_same_thread=False))
    cases: dict[str, dict[str, Any]] = {
        "list(None)": {},
        "filter user=u3": {"filter": {"user": "u3"}},
    }
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    counts: dict[tuple[str, str], int] = {}
    try:
        for _ in range(args.rounds):
            for case, kw in cases.items():
                for name, saver in (("statekeeper", sk), ("SqliteSaver", peer)):
                    wall, cpu, n = _timed(partial(_count, saver, kw))
                    results.setdefault((case, name), []).append((wall, cpu))
                    counts[(case, name)] = n
    finally:
        sk.close()
    load = os.getloadavg()
    print(f"{args.threads} threads, {args.rounds} rounds, load {load[0]:.1f}/{load[1]:.1f}")
    for case in cases:
        med: dict[str, float] = {}
        for name in ("statekeeper", "SqliteSaver"):
            walls = sorted(w for w, _ in results[(case, name)])
            cpus = sorted(c for _, c in results[(case, name)])
            med[name] = walls[len(walls) // 2]
            print(
                f"  {case:15} {name:11} {counts[(case, name)]:5} checkpoints  wall "
                f"{med[name]:.3f} s ({walls[0]:.3f}-{walls[-1]:.3f})"
                f"  cpu {cpus[len(cpus) // 2]:.3f} s"
            )
        ratios = sorted(
            a[0] / b[0]
            for a, b in zip(
                results[(case, "statekeeper")], results[(case, "SqliteSaver")], strict=True
            )
        )
        print(
            f"  {case:15} statekeeper/SqliteSaver wall"
            f" {med['statekeeper'] / med['SqliteSaver']:.1f}x"
            f" (per round {ratios[0]:.1f}-{ratios[-1]:.1f})"
        )


if __name__ == "__main__":
    main()
