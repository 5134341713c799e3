"""Where the wall time of 16 LangGraph threads on one SQLite file goes (issue 12).

The workload of ``bench_langgraph_concurrent.py sqlite`` (``--threads`` OS threads, each
a ``MessagesState`` chat of ``--turns`` turns, ``durability="sync"``), run with three
savers in interleaved rounds, each with the counters that tell a CPU bound from a
commit bound:

* ``mem``: LangGraph's ``InMemorySaver`` — the graph's own CPU plus the cheapest saver:
  no saver on disk can beat its writes/s (the floor of any ratio goal).
* ``peer``: ``SqliteSaver`` on one ``check_same_thread=False`` connection; its commits
  counted by the connection's trace callback.
* ``sk``: ``StatekeeperSaver.from_url("sqlite:///…")``: the engine's commits and the
  appends they carried (its commit listener), the wall time of the commits made on the
  writer thread, the wall time the event loop spent handing batches to that thread,
  and the statements the writer connection ran.

Reported per saver: writes (saver write calls), wall, process CPU, CPU per write, and
for the savers on disk, commits and writes per commit. Count fsyncs with ``strace -f
-c -e trace=fsync,fdatasync`` around a ``--kinds`` run of one saver.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_threads_where.py --synchronous FULL NORMAL
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from langchain_core.messages import HumanMessage

from _common import machine, median, table
from bench_langgraph import text  # type: ignore[import-not-found]
from bench_langgraph_goals import Counting, chat_graph  # type: ignore[import-not-found]
from statekeeper.integrations.langgraph import StatekeeperSaver


def run(saver: Any, args: argparse.Namespace) -> dict[str, float]:
    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    msgs = [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(args.turns)]
    tag = uuid.uuid4().hex[:8]

    def chat(t: int) -> None:
        cfg = {"configurable": {"thread_id": f"{tag}-{t}"}}
        for message in msgs:
            graph.invoke({"messages": [message]}, cfg, durability="sync")

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(args.threads) as pool:
        for f in [pool.submit(chat, t) for t in range(args.threads)]:
            f.result()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"writes": counting.writes, "wall": wall, "cpu": cpu}


def peer_side(path: Path, sync: str, args: argparse.Namespace) -> dict[str, float]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    commits = [0]

    def traced(statement: str) -> None:
        commits[0] += statement.lstrip().upper().startswith("COMMIT")

    try:
        peer = SqliteSaver(conn)
        peer.setup()
        conn.execute(f"PRAGMA synchronous={sync}")
        conn.set_trace_callback(traced)
        out = run(peer, args)
    finally:
        conn.close()
    return out | {"commits": commits[0]}


def sk_side(path: Path, sync: str, args: argparse.Namespace) -> dict[str, float]:
    saver = StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}")
    backend: Any = saver.store.backend
    carried: list[int] = []
    backend.commit_listeners.append(carried.append)
    commit_wall: list[float] = []
    handoff = [0.0]
    statements: collections.Counter[str] = collections.Counter()
    batch, submit = backend._append_batch_sync, backend._writer_pool.submit

    def timed_batch(requests: Any) -> Any:
        start = time.perf_counter()
        try:
            return batch(requests)
        finally:
            commit_wall.append(time.perf_counter() - start)

    def timed_submit(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return submit(*a, **k)
        finally:
            handoff[0] += time.perf_counter() - start

    backend._append_batch_sync, backend._writer_pool.submit = timed_batch, timed_submit
    backend._writer.set_trace_callback(lambda s: statements.update([s.split(None, 1)[0].upper()]))
    base = backend.append_commits
    try:
        out = run(saver, args)
        commits = backend.append_commits - base
    finally:
        saver.close()
    return out | {
        "commits": commits,
        "appends": sum(carried),
        "writer_commit_s": sum(commit_wall),
        "handoff_s": handoff[0],
        "statements": sum(statements.values()),
    }


def mem_side(path: Path, sync: str, args: argparse.Namespace) -> dict[str, float]:
    from langgraph.checkpoint.memory import InMemorySaver

    return run(InMemorySaver(), args)


SIDES = {"mem": mem_side, "peer": peer_side, "sk": sk_side}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", nargs="+", default=["FULL", "NORMAL"])
    parser.add_argument("--kinds", nargs="+", default=list(SIDES), choices=list(SIDES))
    args = parser.parse_args()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-lg-where-") as tmp:
        for sync in args.synchronous:
            got: dict[str, list[dict[str, float]]] = {k: [] for k in args.kinds}
            for i in range(args.rounds):
                kinds = args.kinds if i % 2 == 0 else args.kinds[::-1]
                for kind in kinds:
                    result = SIDES[kind](Path(tmp) / f"{sync}-{i}-{kind}.db", sync, args)
                    got[kind].append(result)
                    print(f"{sync} round {i} {kind}: {result}", file=sys.stderr)
            for kind, results in got.items():

                def med(key: str, results: list[dict[str, float]] = results) -> float:
                    return median([r[key] for r in results if key in r])

                writes = med("writes")
                rate = median([r["writes"] / r["wall"] for r in results])
                per_commit = (
                    f"{median([r['writes'] / r['commits'] for r in results]):.2f}"
                    if "commits" in results[0]
                    else ""
                )
                rows.append(
                    [
                        f"{kind} {sync}",
                        f"{rate:,.0f}",
                        f"{med('wall'):.2f}",
                        f"{med('cpu'):.2f}",
                        f"{med('cpu') / writes * 1e3:.2f}",
                        f"{med('commits'):.0f}" if per_commit else "",
                        per_commit,
                        f"{med('writer_commit_s'):.2f}" if kind == "sk" else "",
                        f"{med('handoff_s'):.3f}" if kind == "sk" else "",
                        f"{med('statements') / med('commits'):.1f}" if kind == "sk" else "",
                    ]
                )
    headers = [
        "saver",
        "writes/s",
        "wall s",
        "CPU s",
        "CPU ms/write",
        "commits",
        "writes/commit",
        "writer-thread commits s",
        "loop hand-off s",
        "statements/commit",
    ]
    print(f"\n### {args.threads} threads x {args.turns} turns, {args.rounds} rounds (medians)\n")
    print(table(headers, rows))
    print(machine("langgraph", "langgraph-checkpoint-sqlite"))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
