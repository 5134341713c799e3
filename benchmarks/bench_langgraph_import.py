"""``statekeeper langgraph import`` / ``export`` throughput.

Workload: a ``SqliteSaver`` database holding ``--threads`` chats of ``--turns`` turns
each (a ``MessagesState`` graph whose node appends one ~300-character AI message per
turn, so a thread has 2 checkpoints and 2 pending writes per turn and its messages
grow to 2 × turns). Measured, in one process: the import into a statekeeper SQLite
store, the export of that store back into a new ``SqliteSaver`` file, each with the
command's verification (which reads every checkpoint of both sides again) — wall time,
CPU time (``time.process_time``), checkpoints per second, and the bytes of the source
and of the statekeeper store.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_import.py                # 10 threads x 50 turns
    .venv/bin/python benchmarks/bench_langgraph_import.py --turns 200 --threads 2
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from statekeeper import SyncStateStore
from statekeeper.integrations.langgraph.migrate import export_threads, import_threads

PAD = "lorem ipsum dolor sit amet " * 11


def _source(path: Path, threads: int, turns: int) -> None:
    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])} {PAD}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    conn = sqlite3.connect(path, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    for t in range(threads):
        config = {"configurable": {"thread_id": f"t{t}"}}
        for turn in range(turns):
            graph.invoke({"messages": [HumanMessage(f"q{turn} {PAD}")]}, config)
    conn.close()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "langgraph.sqlite"
        _source(src, args.threads, args.turns)
        target = Path(tmp) / "sk.db"
        SyncStateStore(f"sqlite:///{target}").close()
        for name, run in (
            ("import", lambda: import_threads(str(src), f"sqlite:///{target}")),
            ("export", lambda: export_threads(f"sqlite:///{target}", str(Path(tmp) / "b.db"))),
        ):
            wall, cpu = time.perf_counter(), time.process_time()
            report = run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(
                f"{name}: {report.checkpoints} checkpoints, {report.writes} writes, "
                f"{report.threads} threads: {wall:.2f} s wall, {cpu:.2f} s CPU, "
                f"{report.checkpoints / wall:.0f} checkpoints/s (copy + verify)"
            )
        print(f"bytes: SqliteSaver {_size(src):,}, statekeeper {_size(target):,}")


if __name__ == "__main__":
    main()
