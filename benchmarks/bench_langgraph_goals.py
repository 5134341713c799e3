"""The speed goals of issue 12: statekeeper's saver vs ``SqliteSaver``, side by side.

Two real ``StateGraph`` workloads, each run on both savers in the same process, rounds
interleaved with alternating order, both on SQLite with the same ``synchronous``:

* **chat**: a ``MessagesState`` chat of ``--turns`` turns (default 200) on one thread:
  each turn is one ``invoke`` with a ~300-character ``HumanMessage``; the node answers
  with a ~300-character ``AIMessage`` (400 messages at the end);
* **small**: a graph whose state is one integer, one node run ``--steps`` times
  (default 30) in one ``invoke``, on ``--small-threads`` threads (default 20).

Both with ``durability="sync"`` (every checkpoint stored before the next step) and the
savers' defaults (statekeeper: ``fork_protection`` on, so every run also claims and
releases its thread). Reported per workload: saver writes per second (``put`` +
``put_writes`` calls / wall time), CPU seconds of the process (both savers run every
write in this process, so CPU is comparable on a loaded machine), ``get_tuple`` of the
latest and of an older checkpoint (warm: the saver that wrote the thread; cold: a new
saver on the file; each timed window starts after a ``gc.collect()``, so both
savers' reads start at the same phase of the cyclic GC), and bytes on disk (db + WAL after
``wal_checkpoint(TRUNCATE)``).
Ratios are statekeeper over SqliteSaver (> 1: statekeeper better), with min–max over
rounds.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_goals.py                  # 3 rounds, NORMAL
    .venv/bin/python benchmarks/bench_langgraph_goals.py --synchronous FULL
    .venv/bin/python benchmarks/bench_langgraph_goals.py --quick          # 1 round, 50 turns
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from _common import file_bytes, human_bytes, machine, median, table  # type: ignore[import-not-found]
from bench_langgraph import text  # type: ignore[import-not-found]
from statekeeper.integrations.langgraph import StatekeeperSaver

Make = Callable[[Path, str], tuple[Any, Callable[[], None]]]


class Counter(TypedDict):
    n: int


def sqlite_saver(path: Path, sync: str) -> tuple[Any, Callable[[], None]]:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={sync}")
    return saver, conn.close


def sk_saver(path: Path, sync: str) -> tuple[Any, Callable[[], None]]:
    saver = StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}")
    return saver, saver.close


SAVERS: dict[str, Make] = {"sk": sk_saver, "sqlite": sqlite_saver}


class Counting:
    """Wraps a saver's write methods to count calls."""

    def __init__(self, saver: Any) -> None:
        self.writes = 0
        put, put_writes = saver.put, saver.put_writes

        def counted_put(*a: Any, **k: Any) -> Any:
            self.writes += 1
            return put(*a, **k)

        def counted_put_writes(*a: Any, **k: Any) -> Any:
            self.writes += 1
            return put_writes(*a, **k)

        saver.put, saver.put_writes = counted_put, counted_put_writes


def chat_graph() -> StateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(text(random.Random(n), 300), id=f"ai-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder


def small_graph(steps: int) -> StateGraph[Any]:
    def step(state: Counter) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    def route(state: Counter) -> str:
        return "step" if state["n"] < steps else END

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route)
    return builder


def reads(saver: Any, thread: str, older: str, n: int) -> dict[str, float]:
    """Milliseconds per ``get_tuple`` of the latest and of an older checkpoint: wall
    time, and CPU time of the process (every thread: the saver's loop included)."""
    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    old = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": older}}
    out: dict[str, float] = {}
    for name, config in (("latest", latest), ("older", old)):
        # Every window starts at the same phase of CPython's cyclic GC: a full collection
        # costs ~60-120 ms here (~112k tracked objects after the imports alone, the savers'
        # caches ~1-7k), and both savers' reads build the same ~400 messages, so one lands
        # in ~60 reads, for either saver. Left to chance, a 50-read window held 0, 1 or 2
        # of them (+0 to +4.8 ms a read) and one round's ratio swung from 0.5x to 2x.
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            assert saver.get_tuple(config) is not None
        out[name] = (time.perf_counter() - wall) / n * 1e3
        out[f"{name}_cpu"] = (time.process_time() - cpu) / n * 1e3
    return out


def run_chat(kind: str, tmp: Path, args: argparse.Namespace) -> dict[str, float]:
    path = tmp / f"{kind}-chat.db"
    saver, close = SAVERS[kind](path, args.synchronous)
    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}}
    inputs = [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(args.turns)]
    wall, cpu = time.perf_counter(), time.process_time()
    for message in inputs:
        graph.invoke({"messages": [message]}, cfg, durability="sync")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    history = list(saver.list(cfg))
    older = history[len(history) // 2].config["configurable"]["checkpoint_id"]
    out = {"writes_s": counting.writes / wall, "cpu_s": cpu, "writes": counting.writes}
    for key, value in reads(saver, "chat", older, args.reads).items():
        out[f"{key}_warm"] = value
    close()
    cold: list[dict[str, float]] = []
    for _ in range(3):  # the first reads of a new saver on the file (connection opened)
        saver, close = SAVERS[kind](path, args.synchronous)
        saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
        cold.append(reads(saver, "chat", older, 1))
        close()
    for key in cold[0]:
        out[f"{key}_cold"] = median([c[key] for c in cold])
    out["bytes"] = file_bytes(path)
    return out


def run_small(kind: str, tmp: Path, args: argparse.Namespace) -> dict[str, float]:
    path = tmp / f"{kind}-small.db"
    saver, close = SAVERS[kind](path, args.synchronous)
    counting = Counting(saver)
    graph = small_graph(args.steps).compile(checkpointer=saver)
    wall, cpu = time.perf_counter(), time.process_time()
    for t in range(args.small_threads):
        cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 4 * args.steps}
        graph.invoke({"n": 0}, cfg, durability="sync")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    close()
    return {
        "writes_s": counting.writes / wall,
        "cpu_s": cpu,
        "writes": counting.writes,
        "bytes": file_bytes(path),
    }


def ratio_row(
    label: str, rounds: list[dict[str, Any]], key: str, higher: bool, fmt: str
) -> list[str]:
    sk = [r["sk"][key] for r in rounds]
    peer = [r["sqlite"][key] for r in rounds]
    ratios = [(a / b if higher else b / a) for a, b in zip(sk, peer, strict=True)]
    spread = f"{min(ratios):.2f}–{max(ratios):.2f}" if len(ratios) > 1 else ""
    return [
        label,
        fmt.format(median(sk)),
        fmt.format(median(peer)),
        f"{median(ratios):.2f}x",
        spread,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--small-threads", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=50)
    parser.add_argument("--synchronous", default="NORMAL")
    parser.add_argument("--quick", action="store_true", help="1 round, 50 turns")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.turns = 1, 50
    results: dict[str, list[dict[str, Any]]] = {"chat": [], "small": []}
    with tempfile.TemporaryDirectory(prefix="bench-lg-goals-") as tmp_dir:
        for i in range(args.rounds):
            order = ["sk", "sqlite"] if i % 2 == 0 else ["sqlite", "sk"]
            for workload, run in (("chat", run_chat), ("small", run_small)):
                rnd: dict[str, Any] = {}
                for kind in order:
                    tmp = Path(tmp_dir) / f"r{i}"
                    tmp.mkdir(exist_ok=True)
                    rnd[kind] = run(kind, tmp, args)
                results[workload].append(rnd)
    ms = "{:.3f}"
    chat, small = results["chat"], results["small"]
    rows = [
        ratio_row(f"chat {args.turns} turns: writes/s", chat, "writes_s", True, "{:,.0f}"),
        ratio_row("chat: CPU s (whole process)", chat, "cpu_s", False, "{:.2f}"),
        *[
            ratio_row(f"chat: get_tuple {which}, {temp} ({unit})", chat, key, False, ms)
            for which in ("latest", "older")
            for temp in ("warm", "cold")
            for unit, key in (
                ("ms", f"{which}_{temp}"),
                ("CPU ms", f"{which}_cpu_{temp}"),
            )
        ],
        ratio_row(f"small {args.steps} steps: writes/s", small, "writes_s", True, "{:,.0f}"),
        ratio_row("small: CPU s (whole process)", small, "cpu_s", False, "{:.2f}"),
    ]
    for label, rs in ((f"chat {args.turns} turns", chat), (f"small {args.steps} steps", small)):
        sk_b, peer_b = rs[0]["sk"]["bytes"], rs[0]["sqlite"]["bytes"]
        rows.append(
            [
                f"{label}: bytes on disk",
                human_bytes(sk_b),
                human_bytes(peer_b),
                f"1/{peer_b / sk_b:.1f}",
                "",
            ]
        )
    print(f"\n### synchronous={args.synchronous} ({args.rounds} rounds, medians)\n")
    print(table(["metric", "statekeeper", "SqliteSaver", "ratio", "spread"], rows))
    report = {"machine": machine("langgraph", "langgraph-checkpoint-sqlite"), "args": vars(args)}
    print(json.dumps(report | {"results": results}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
