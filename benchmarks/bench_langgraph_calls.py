"""CPU per saver call, without a graph: ``put``, ``put_writes`` and ``get_tuple`` of a
one-integer state, ``StatekeeperSaver`` vs ``SqliteSaver`` side by side.

A graph's own work (LangGraph's loop, channels, tasks) hides the saver's cost per call
in ``bench_langgraph_goals.py``; this one calls the savers directly from one thread:
``--calls`` checkpoints on one thread (each followed by one pending write), then as many
``get_tuple`` of the latest. Reported per call: the calling thread's CPU (µs) and the
process's CPU per (put + put_writes + get_tuple) — the process figure also counts
work done on other threads (a loop thread, a writer thread). Rounds interleave the
savers, alternating which goes first; ``fork_protection`` off and ``writes_wait=0``
(no run, no held writes: the bare call path), ``synchronous=NORMAL`` on both.

    .venv/bin/python benchmarks/bench_langgraph_calls.py            # 3 rounds of 300
    .venv/bin/python benchmarks/bench_langgraph_calls.py --profile  # + cProfile (statekeeper)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from statekeeper.integrations.langgraph import StatekeeperSaver


def open_saver(kind: str, folder: Path) -> tuple[Any, Any]:
    if kind == "sk":
        saver = StatekeeperSaver.from_url(
            f"sqlite:///{folder}/sk.db?synchronous=NORMAL", fork_protection=False, writes_wait=0
        )
        return saver, saver.close
    conn = sqlite3.connect(folder / "peer.db", check_same_thread=False)
    peer = SqliteSaver(conn)
    peer.setup()
    conn.execute("PRAGMA synchronous=NORMAL")
    return peer, conn.close


def calls(saver: Any, n: int, thread_id: str) -> dict[str, float]:
    """``n`` put + put_writes, then ``n`` get_tuple; thread CPU µs per call, process
    CPU µs per (put + put_writes + get_tuple)."""
    cfg: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    spent = {"put": 0.0, "put_writes": 0.0, "get_tuple": 0.0}
    process = time.process_time()
    for i in range(n):
        cp = create_checkpoint(cp, None, i)
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": i + 1}
        cp["versions_seen"] = {"step": {"n": i}}
        c0 = time.thread_time()
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})
        c1 = time.thread_time()
        saver.put_writes(cfg, [("n", i + 1)], str(uuid.uuid4()))
        spent["put"] += c1 - c0
        spent["put_writes"] += time.thread_time() - c1
    latest: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    c0 = time.thread_time()
    for _ in range(n):
        saver.get_tuple(latest)
    spent["get_tuple"] = time.thread_time() - c0
    out = {k: 1e6 * v / n for k, v in spent.items()}
    out["process"] = 1e6 * (time.process_time() - process) / n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"sk": [], "peer": []}
    for r in range(args.rounds):
        for kind in ("sk", "peer") if r % 2 == 0 else ("peer", "sk"):
            with tempfile.TemporaryDirectory() as folder:
                saver, close = open_saver(kind, Path(folder))
                try:
                    calls(saver, 30, "warm")  # connections opened, caches built
                    results[kind].append(calls(saver, args.calls, f"t{r}"))
                finally:
                    close()
    print(f"\n### CPU per saver call, {args.rounds} rounds of {args.calls} (medians)\n")
    print("| µs CPU                        | statekeeper | SqliteSaver | ratio | spread    |")
    print("|-------------------------------|-------------|-------------|-------|-----------|")
    labels = {
        "put": "put (calling thread)",
        "put_writes": "put_writes (calling thread)",
        "get_tuple": "get_tuple latest (calling thread)",
        "process": "process, per put+writes+get",
    }
    for key, label in labels.items():
        ours = [x[key] for x in results["sk"]]
        theirs = [x[key] for x in results["peer"]]
        ratios = [b / a for a, b in zip(ours, theirs, strict=True)]
        print(
            f"| {label:<29} | {statistics.median(ours):>11,.0f} | "
            f"{statistics.median(theirs):>11,.0f} | {statistics.median(ratios):.2f}x | "
            f"{min(ratios):.2f}–{max(ratios):.2f} |"
        )
    if args.profile:
        with tempfile.TemporaryDirectory() as folder:
            saver, close = open_saver("sk", Path(folder))
            try:
                calls(saver, 30, "warm")
                profile = cProfile.Profile()
                profile.enable()
                calls(saver, args.calls, "profiled")
                profile.disable()
            finally:
                close()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
