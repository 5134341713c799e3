"""How much of a LangGraph write is the graph's and how much the saver's (issue 12).

``bench_langgraph_goals.py`` compares whole-process CPU and writes/s; both include
LangGraph's own work per step (the Pregel loop, channels, reducers, the background
executor), which no saver can remove. This benchmark runs the same two graphs (the
200-turn ``MessagesState`` chat and the 30-step small graph, with ``durability="sync"``)
on four savers in the same process, rounds interleaved with rotating order:

* **floor**: :class:`KeepsReferences`, a minimal ``BaseCheckpointSaver`` that stores
  nothing: it keeps the latest checkpoint object it was handed per thread (by reference,
  no copy, no serialisation) so that the graph sees its state on the next turn exactly
  as with a real saver, and drops every pending write. Its CPU is the graph's own;
* **InMemorySaver**: LangGraph's in-memory saver (serialises every channel version);
* **SqliteSaver** and **statekeeper** as in ``bench_langgraph_goals.py``.

Per side and workload: writes/s and CPU seconds of the process; then the **saver's own
CPU** (the side's CPU minus the floor's in the same round) and the ratios statekeeper
vs SqliteSaver (whole process, and saver only), with min–max over rounds. The last row
per workload is the best whole-process ratio any saver could reach against SqliteSaver
(its CPU over the floor's): a whole-process goal above it is out of reach by
construction.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_floor.py               # 3 rounds
    .venv/bin/python benchmarks/bench_langgraph_floor.py --rounds 5 --turns 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver

from _common import machine, median, table  # type: ignore[import-not-found]
from bench_langgraph import text  # type: ignore[import-not-found]
from bench_langgraph_goals import (  # type: ignore[import-not-found]
    Counting,
    chat_graph,
    sk_saver,
    small_graph,
    sqlite_saver,
)

SIDES = ("floor", "memory", "sqlite", "sk")
LABELS = {
    "floor": "no saver (floor)",
    "memory": "InMemorySaver",
    "sqlite": "SqliteSaver",
    "sk": "statekeeper",
}


class KeepsReferences(BaseCheckpointSaver[str]):
    """Stores nothing: the latest checkpoint per thread, by reference; writes dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[str, CheckpointTuple] = {}

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.latest.get(config["configurable"]["thread_id"])

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        own: RunnableConfig = {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
            }
        }
        self.latest[conf["thread_id"]] = CheckpointTuple(own, checkpoint, metadata, config, [])
        return own

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        return None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for tup in self.list(config):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        return None


def make(kind: str, path: Path, sync: str) -> tuple[Any, Any]:
    if kind == "floor":
        return KeepsReferences(), lambda: None
    if kind == "memory":
        return InMemorySaver(), lambda: None
    return (sqlite_saver if kind == "sqlite" else sk_saver)(path, sync)


def run_chat(kind: str, tmp: Path, args: argparse.Namespace) -> dict[str, float]:
    saver, close = make(kind, tmp / f"{kind}-chat.db", args.synchronous)
    counting = Counting(saver)
    graph = chat_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}}
    inputs = [HumanMessage(text(random.Random(-i), 300), id=f"h-{i}") for i in range(args.turns)]
    wall, cpu = time.perf_counter(), time.process_time()
    for message in inputs:
        graph.invoke({"messages": [message]}, cfg, durability="sync")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    final = graph.get_state(cfg).values["messages"]
    assert len(final) == 2 * args.turns, (kind, len(final))  # every side kept the history
    close()
    return {"writes_s": counting.writes / wall, "cpu_s": cpu, "writes": counting.writes}


def run_small(kind: str, tmp: Path, args: argparse.Namespace) -> dict[str, float]:
    saver, close = make(kind, tmp / f"{kind}-small.db", args.synchronous)
    counting = Counting(saver)
    graph = small_graph(args.steps).compile(checkpointer=saver)
    wall, cpu = time.perf_counter(), time.process_time()
    for t in range(args.small_threads):
        cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 4 * args.steps}
        graph.invoke({"n": 0}, cfg, durability="sync")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    close()
    return {"writes_s": counting.writes / wall, "cpu_s": cpu, "writes": counting.writes}


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}" if len(values) > 1 else ""


def rows_for(name: str, rounds: list[dict[str, dict[str, float]]]) -> list[list[str]]:
    rows = []
    for side in SIDES:
        cpu = [r[side]["cpu_s"] for r in rounds]
        own = [r[side]["cpu_s"] - r["floor"]["cpu_s"] for r in rounds]
        rows.append(
            [
                f"{name}: {LABELS[side]}",
                f"{median([r[side]['writes_s'] for r in rounds]):,.0f}",
                f"{median(cpu):.3f}",
                "" if side == "floor" else f"{median(own):.3f}",
                "",
            ]
        )

    def ratio_row(label: str, values: list[float]) -> list[str]:
        return [f"{name}: {label}", "", "", "", f"{median(values):.2f}x ({spread(values)})"]

    sk_cpu = [r["sk"]["cpu_s"] for r in rounds]
    peer_cpu = [r["sqlite"]["cpu_s"] for r in rounds]
    floor_cpu = [r["floor"]["cpu_s"] for r in rounds]
    rows += [
        ratio_row(
            "writes/s statekeeper / SqliteSaver",
            [r["sk"]["writes_s"] / r["sqlite"]["writes_s"] for r in rounds],
        ),
        ratio_row(
            "CPU SqliteSaver / statekeeper (whole process)",
            [p / s for p, s in zip(peer_cpu, sk_cpu, strict=True)],
        ),
        ratio_row(
            "saver CPU SqliteSaver / statekeeper",
            [(p - f) / (s - f) for p, s, f in zip(peer_cpu, sk_cpu, floor_cpu, strict=True)],
        ),
        ratio_row(
            "graph's share of statekeeper's CPU",
            [f / s for s, f in zip(sk_cpu, floor_cpu, strict=True)],
        ),
        ratio_row(
            "best reachable whole-process ratio (SqliteSaver / floor)",
            [p / f for p, f in zip(peer_cpu, floor_cpu, strict=True)],
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--small-threads", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", default="NORMAL")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"chat": [], "small": []}
    with tempfile.TemporaryDirectory(prefix="bench-lg-floor-") as tmp_dir:
        for i in range(args.rounds):
            order = SIDES[i % len(SIDES) :] + SIDES[: i % len(SIDES)]
            for workload, run in (("chat", run_chat), ("small", run_small)):
                tmp = Path(tmp_dir) / f"r{i}-{workload}"
                tmp.mkdir()
                results[workload].append({kind: run(kind, tmp, args) for kind in order})
    rows = rows_for(f"chat {args.turns} turns", results["chat"])
    rows += rows_for(f"small {args.steps} steps", results["small"])
    print(f"\n### synchronous={args.synchronous} ({args.rounds} rounds, medians)\n")
    print(table(["side / ratio", "writes/s", "CPU s", "saver CPU s", "ratio (spread)"], rows))
    report = {"machine": machine("langgraph", "langgraph-checkpoint-sqlite"), "args": vars(args)}
    print(json.dumps(report | {"results": results}))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
