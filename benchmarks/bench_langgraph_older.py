"""CPU per cold ``get_tuple`` of the latest and of older checkpoints (issue 12):
``StatekeeperSaver`` vs ``SqliteSaver`` on the 200-turn chat of
``bench_langgraph_goals.py`` (same graph, same messages).

Each read is a new saver on the file (its connection opened by a read of an absent
thread), which reads the latest checkpoint, then one older checkpoint; the older ones
are at 1/8 .. 7/8 of the thread's history, so a read lands at every distance from a
stored snapshot. CPU = process CPU time of the read (the machine is loaded: wall time
is not reported). Rounds alternate the savers' order. Ratio > 1: statekeeper better.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from langchain_core.messages import HumanMessage

sys.path.insert(0, str(Path(__file__).parent))
import bench_langgraph_goals as goals
from _common import file_bytes  # type: ignore[import-not-found]


def write_chat(kind: str, path: Path, turns: int) -> list[str]:
    """Write the chat through ``kind``'s saver; the older checkpoint ids to read."""
    saver, close = goals.SAVERS[kind](path, "NORMAL")
    graph = goals.chat_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}}
    for i in range(turns):
        message = HumanMessage(goals.text(random.Random(-i), 300), id=f"h-{i}")
        graph.invoke({"messages": [message]}, cfg, durability="sync")  # type: ignore[call-overload]
    history = list(saver.list(cfg))
    close()
    return [
        history[len(history) * k // 8].config["configurable"]["checkpoint_id"] for k in range(1, 8)
    ]


def cold_reads(kind: str, path: Path, older: str) -> tuple[float, float]:
    """CPU ms of a new saver's latest read, then of its read of ``older``."""
    saver, close = goals.SAVERS[kind](path, "NORMAL")
    saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
    t0 = time.process_time()
    assert saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})
    t1 = time.process_time()
    old = {"configurable": {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": older}}
    assert saver.get_tuple(old)
    t2 = time.process_time()
    close()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {kind: Path(tmp) / f"{kind}.db" for kind in goals.SAVERS}
        olders = {kind: write_chat(kind, paths[kind], args.turns) for kind in goals.SAVERS}
        cpu: dict[str, dict[str, list[float]]] = {
            kind: {"latest": [], "older": []} for kind in goals.SAVERS
        }
        for rnd in range(args.rounds):
            order = ["sk", "sqlite"] if rnd % 2 == 0 else ["sqlite", "sk"]
            for kind in order:
                for older in olders[kind]:
                    latest_ms, older_ms = cold_reads(kind, paths[kind], older)
                    cpu[kind]["latest"].append(latest_ms)
                    cpu[kind]["older"].append(older_ms)
        size = {kind: file_bytes(paths[kind]) for kind in goals.SAVERS}
    print(f"load average before/after: {load[0]:.1f} / {os.getloadavg()[0]:.1f}")
    print(
        f"bytes of the {args.turns}-turn chat: statekeeper {size['sk']:,}, SqliteSaver"
        f" {size['sqlite']:,} (1/{size['sqlite'] / size['sk']:.1f})"
    )
    for which in ("latest", "older"):
        sk, peer = median(cpu["sk"][which]), median(cpu["sqlite"][which])
        print(
            f"cold get_tuple {which:6}: statekeeper {sk:6.2f} ms CPU, SqliteSaver"
            f" {peer:6.2f} ms CPU, ratio {peer / sk:.2f}x (median of {len(cpu['sk'][which])})"
        )


if __name__ == "__main__":
    main()
