"""LangGraph checkpointer benchmark: statekeeper's saver vs LangGraph's ``SqliteSaver``.

Workload (both savers, same process, same SQLite ``synchronous`` setting, rounds
interleaved with alternating order): a real ``StateGraph`` chat — ``messages`` with
``add_messages``, one node that appends one AI message (~200 characters of text) per
step — run on 40 threads × 30 steps, each thread starting from 20 messages (so the chat
grows 20 → 50 messages; 32 checkpoints and 31 ``put_writes`` per thread).

Measured:

* **graph**: wall time of the 40 ``invoke`` calls (``durability="sync"``: every
  checkpoint is saved before the next step, so the saver is on the critical path),
  checkpoint steps per second;
* **saver only**: the exact ``put`` / ``put_writes`` / ``get_tuple`` calls the graph
  made (recorded once, values by reference as LangGraph passes them), replayed
  against each saver — the saver's own throughput without LangGraph's overhead;
* **get_tuple (latest)**: per call, warm, on the finished threads;
* **bytes on disk**: database + WAL after ``PRAGMA wal_checkpoint(TRUNCATE)``;
* with ``--workers N`` also the graph run from N threads at once (statekeeper with
  ``durability="group"``).

Usage::

    .venv/bin/python benchmarks/bench_langgraph.py                 # 3 rounds, FULL and NORMAL
    .venv/bin/python benchmarks/bench_langgraph.py --quick         # 1 round, FULL
    .venv/bin/python benchmarks/bench_langgraph.py --workers 8     # + concurrent graph runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from _common import file_bytes, human_bytes, machine, median, table  # type: ignore[import-not-found]
from statekeeper.integrations.langgraph import StatekeeperSaver

WORDS = [
    *[
        "agent",
        "state",
        "checkpoint",
        "durable",
        "stream",
        "event",
        "snapshot",
        "replay",
        "thread",
        "message",
        "tool",
    ],
    *[
        "call",
        "result",
        "plan",
        "step",
        "graph",
        "node",
        "edge",
        "memory",
        "recall",
        "summary",
        "answer",
        "question",
    ],
    *[
        "context",
        "user",
        "assistant",
        "system",
        "retry",
        "error",
        "resume",
        "interrupt",
        "approve",
        "review",
    ],
    *["draft", "publish", "search"],
]


def text(rng: random.Random, n: int = 200) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)[:n]


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turn: int


def build_graph(steps: int) -> StateGraph[Any]:
    replies = [text(random.Random(1000 + i)) for i in range(steps)]

    def chat(state: Chat) -> dict[str, Any]:
        n = state.get("turn", 0)
        return {"messages": [AIMessage(replies[n], id=f"ai-{n}")], "turn": n + 1}

    def route(state: Chat) -> str:
        return "chat" if state.get("turn", 0) < steps else END

    builder = StateGraph(Chat)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", route)
    return builder


def opening(thread: int, n: int) -> list[AnyMessage]:
    rng = random.Random(thread)
    return [HumanMessage(text(rng), id=f"h-{thread}-{i}") for i in range(n)]


class Recorder(InMemorySaver):
    """Records the saver calls a graph run makes (arguments by reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def get_tuple(self, config: Any) -> Any:
        self.calls.append(("get_tuple", _plain(config)))
        return super().get_tuple(config)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self.calls.append(("put", (_plain(config), checkpoint, dict(metadata), dict(new_versions))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.calls.append(("put_writes", (_plain(config), list(writes), task_id, task_path)))
        super().put_writes(config, writes, task_id, task_path)


def _plain(config: Any) -> Any:
    conf = {k: v for k, v in config["configurable"].items() if not k.startswith("__")}
    out: dict[str, Any] = {"configurable": conf}
    if config.get("metadata"):
        out["metadata"] = dict(config["metadata"])
    return out


def sqlite_saver(path: Path, sync: str) -> tuple[Any, Callable[[], None]]:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={sync}")
    return saver, conn.close


def sk_saver(path: Path, sync: str, durability: str = "sync") -> tuple[Any, Callable[[], None]]:
    saver = StatekeeperSaver.from_url(f"sqlite:///{path}?synchronous={sync}", durability=durability)
    return saver, saver.close


def run_graph(saver: Any, args: argparse.Namespace, workers: int = 1) -> float:
    graph = build_graph(args.steps).compile(checkpointer=saver)

    def one(thread: int) -> None:
        graph.invoke(
            {"messages": opening(thread, args.initial), "turn": 0},
            {"configurable": {"thread_id": f"thread-{thread}"}, "recursion_limit": 10 * args.steps},
            durability="sync",
        )

    start = time.perf_counter()
    if workers == 1:
        for thread in range(args.threads):
            one(thread)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(args.threads)))
    return time.perf_counter() - start


def replay(saver: Any, calls: list[tuple[str, Any]]) -> float:
    start = time.perf_counter()
    for name, call in calls:
        if name == "put":
            saver.put(*call)
        elif name == "put_writes":
            saver.put_writes(*call)
        else:
            saver.get_tuple(call)
    return time.perf_counter() - start


def latest_reads(saver: Any, threads: int, n: int = 400) -> float:
    start = time.perf_counter()
    for i in range(n):
        assert saver.get_tuple({"configurable": {"thread_id": f"thread-{i % threads}"}}) is not None
    return (time.perf_counter() - start) / n


def record(args: argparse.Namespace) -> list[tuple[str, Any]]:
    recorder = Recorder()
    run_graph(recorder, args)
    return recorder.calls


def one_round(
    args: argparse.Namespace, sync: str, calls: list[tuple[str, Any]], order: int
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    kinds = ["sqlite", "sk"] if order % 2 == 0 else ["sk", "sqlite"]
    with tempfile.TemporaryDirectory(prefix="bench-lg-") as tmp:
        for kind in kinds:
            make = sqlite_saver if kind == "sqlite" else sk_saver
            path = Path(tmp) / f"{kind}-graph.db"
            saver, close = make(path, sync)
            result[f"{kind}.graph_s"] = run_graph(saver, args)
            result[f"{kind}.get_tuple_s"] = latest_reads(saver, args.threads)
            close()
            result[f"{kind}.bytes"] = file_bytes(path)
            path = Path(tmp) / f"{kind}-replay.db"
            saver, close = make(path, sync)
            result[f"{kind}.replay_s"] = replay(saver, calls)
            close()
            if args.workers > 1:
                path = Path(tmp) / f"{kind}-concurrent.db"
                saver, close = (
                    sqlite_saver(path, sync) if kind == "sqlite" else sk_saver(path, sync, "group")
                )
                result[f"{kind}.concurrent_s"] = run_graph(saver, args, args.workers)
                close()
    return result


def _row(med: dict[str, float], label: str, key: str, count: int, fmt: str) -> list[str]:
    """A table row from median seconds: a rate (``count / s``) or, with count 0, ms."""
    sk, peer = med[f"sk.{key}"], med[f"sqlite.{key}"]

    def show(seconds: float) -> str:
        return fmt.format(count / seconds if count else seconds * 1e3)

    return [label, show(sk), show(peer), f"{peer / sk:.2f}x"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--initial", type=int, default=20, help="messages a thread starts with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", nargs="+", default=["FULL", "NORMAL"])
    parser.add_argument("--workers", type=int, default=1, help="also run the graph from N threads")
    parser.add_argument("--quick", action="store_true", help="1 round, FULL only")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.synchronous = 1, ["FULL"]
    calls = record(args)
    steps = args.threads * (args.steps + 2)  # checkpoints per run
    report: dict[str, Any] = {
        "machine": machine("langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph"),
        "workload": vars(args) | {"checkpoints": steps, "saver_calls": len(calls)},
    }
    for sync in args.synchronous:
        rounds = [one_round(args, sync, calls, i) for i in range(args.rounds)]
        med = {key: median([r[key] for r in rounds]) for key in rounds[0]}
        report[sync] = med
        if args.json:
            continue
        rows: list[list[str]] = []
        per_s = "{:,.0f}"
        workload = f"{args.threads} threads x {args.steps} steps"
        rows.append(_row(med, f"graph: checkpoints/s ({workload})", "graph_s", steps, per_s))
        rows.append(
            _row(med, "saver only: calls/s (recorded calls)", "replay_s", len(calls), per_s)
        )
        rows.append(_row(med, "get_tuple latest: ms per call (warm)", "get_tuple_s", 0, "{:.3f}"))
        if args.workers > 1:
            label = f"graph from {args.workers} threads: checkpoints/s (sk: group)"
            rows.append(_row(med, label, "concurrent_s", steps, per_s))
        sk_bytes, peer_bytes = med["sk.bytes"], med["sqlite.bytes"]
        rows.append(
            [
                "bytes on disk",
                human_bytes(sk_bytes),
                human_bytes(peer_bytes),
                f"1/{peer_bytes / sk_bytes:.1f}",
            ]
        )
        print(f"\n### synchronous={sync} ({args.rounds} rounds, medians)\n")
        print("ratio = how many times better statekeeper is (>1: statekeeper wins)\n")
        print(table(["metric", "statekeeper", "SqliteSaver", "ratio"], rows))
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
