"""16 LangGraph threads on one SQLite file: same-run A/B of source trees (issue 12).

The workload of ``bench_langgraph_concurrent.py sqlite`` (``--threads`` OS threads, each
a ``MessagesState`` chat of ``--turns`` turns, ``durability="sync"``), each round in a
fresh child process per tree (``PYTHONPATH`` = the tree's ``src``), trees and the peer
(``SqliteSaver``) interleaved, so a loaded machine shifts every side alike. Per side:
writes/s, process CPU, the engine's commits and appends, and the wall the statements of
the group commits took on the threads that ran them (``_write_batch``: BEGIN and the
batch's statements, run on the saver's event loop — one of the graph threads —, each
statement giving the GIL back and waiting to take it again). With ``--count`` a second
child per tree counts the statements a commit runs (the trace callback itself takes
the GIL per statement, so it is not timed).

Usage::

    .venv/bin/python benchmarks/bench_langgraph_group_ab.py --tree /work/wt/base/src --tree src
    .venv/bin/python benchmarks/bench_langgraph_group_ab.py --durability group --tree … --tree src
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def chats(saver: Any, threads: int, turns: int) -> dict[str, float]:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import Counting, chat_graph  # type: ignore[import-not-found]

    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    msgs = [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(turns)]
    tag = uuid.uuid4().hex[:8]

    def chat(t: int) -> None:
        cfg = {"configurable": {"thread_id": f"{tag}-{t}"}}
        for message in msgs:
            graph.invoke({"messages": [message]}, cfg, durability="sync")

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(chat, t) for t in range(threads)]:
            f.result()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"writes_s": counting.writes / wall, "wall": wall, "cpu": cpu}


def child(
    kind: str, path: str, sync: str, threads: int, turns: int, count: bool, durability: str
) -> None:
    if kind == "peer":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        peer = SqliteSaver(conn)
        peer.setup()
        conn.execute(f"PRAGMA synchronous={sync}")
        print(json.dumps(chats(peer, threads, turns)))
        return
    from statekeeper.integrations.langgraph import StatekeeperSaver

    saver = StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}", durability=durability)
    backend: Any = saver.store.backend
    carried: list[int] = []
    backend.commit_listeners.append(carried.append)
    written = [0.0, 0]
    write_batch = backend._write_batch

    def timed(requests: Any) -> Any:
        start = time.perf_counter()
        try:
            return write_batch(requests)
        finally:
            written[0] += time.perf_counter() - start
            written[1] += 1

    backend._write_batch = timed
    statements: collections.Counter[str] = collections.Counter()
    if count:
        backend._writer.set_trace_callback(lambda s: statements.update([s.split(None, 1)[0]]))
    base = backend.append_commits
    try:
        out = chats(saver, threads, turns)
        commits = backend.append_commits - base
    finally:
        saver.close()
    print(
        json.dumps(
            out
            | {
                "commits": commits,
                "appends": sum(carried),
                "batches": written[1],
                "batch_wall": written[0],
                "statements": sum(statements.values()),
            }
        )
    )


def run_child(tree: str, kind: str, path: Path, args: argparse.Namespace, count: bool) -> Any:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    cmd = [sys.executable, __file__, "--child", kind, str(path), args.synchronous]
    cmd += [str(args.threads), str(args.turns), "1" if count else "0", args.durability]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, path, sync, threads, turns, count, durability = sys.argv[2:9]
        child(kind, path, sync, int(threads), int(turns), count == "1", durability)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="a tree's src dir")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--count", action="store_true", help="also count statements")
    parser.add_argument("--durability", default="sync", choices=["sync", "group"])
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="bench-lg-ab-") as tmp:
        for i in range(args.rounds):
            sides = [("peer", args.tree[0])] + [("sk", t) for t in args.tree]
            if i % 2:
                sides.reverse()
            for kind, tree in sides:
                name = "peer" if kind == "peer" else tree
                r = run_child(
                    tree, kind, Path(tmp) / f"{i}-{len(rows[name])}-{kind}.db", args, False
                )
                rows[name].append(r)
                print(f"round {i} {name}: {r}", file=sys.stderr)
        counts = {}
        if args.count:
            for tree in args.tree:
                counts[tree] = run_child(
                    tree, "sk", Path(tmp) / f"count-{len(counts)}.db", args, True
                )
    print(
        f"\n{args.threads} LangGraph threads, synchronous={args.synchronous},"
        f" durability={args.durability}, {args.rounds} rounds"
    )
    print(
        "| side | writes/s (median, min-max) | ratio to peer (per round) | CPU s | commits"
        " | appends/commit | batch wall ms/commit | trace lines/commit |"
    )
    print("|---|---|---|---|---|---|---|---|")
    peer = rows["peer"]
    for name, rs in rows.items():
        ws = sorted(r["writes_s"] for r in rs)
        ratios = sorted(r["writes_s"] / p["writes_s"] for r, p in zip(rs, peer, strict=True))
        cpu = sorted(r["cpu"] for r in rs)[len(rs) // 2]
        extra = ["", "", "", ""]
        if name != "peer":
            commits = sorted(r["commits"] for r in rs)[len(rs) // 2]
            per = sorted(r["appends"] / r["commits"] for r in rs)[len(rs) // 2]
            bw = sorted(1000 * r["batch_wall"] / max(r["batches"], 1) for r in rs)[len(rs) // 2]
            c = counts.get(name)
            spc = f"{c['statements'] / c['commits']:.1f}" if c else ""
            extra = [str(commits), f"{per:.2f}", f"{bw:.2f}", spc]
        print(
            f"| {name} | {ws[len(ws) // 2]:.0f} ({ws[0]:.0f}-{ws[-1]:.0f}) | "
            f"{ratios[len(ratios) // 2]:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}) | {cpu:.2f} | "
            + " | ".join(extra)
            + " |"
        )


if __name__ == "__main__":
    main()
