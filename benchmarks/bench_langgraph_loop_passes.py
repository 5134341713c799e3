"""How often the saver's background thread takes the loop while runs hold claims.

A :class:`~statekeeper.integrations.langgraph.loop.SharedLoop`'s background thread runs
the loop for a pass (``_one_pass``) every 20 ms while a task lives on it; before
``h/lgsaver`` a claim's renewal was such a task for the whole of every run. This counts
those passes, and the process CPU, over the goals benchmark's workloads (the saver's
defaults: fork protection on, ``durability="sync"``, SQLite ``NORMAL``)::

    .venv/bin/python benchmarks/bench_langgraph_loop_passes.py small 20
    .venv/bin/python benchmarks/bench_langgraph_loop_passes.py chat 100
    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_loop_passes.py small 20

prints one JSON line: runs (turns), wall and CPU seconds, background passes.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)


def main() -> None:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import chat_graph, small_graph
    from statekeeper.integrations.langgraph import StatekeeperSaver
    from statekeeper.integrations.langgraph.loop import SharedLoop

    workload, runs = sys.argv[1], int(sys.argv[2])
    passes = [0]
    one_pass = SharedLoop._one_pass

    def counted(self: SharedLoop) -> None:
        passes[0] += 1
        one_pass(self)

    SharedLoop._one_pass = counted  # type: ignore[method-assign]
    tmp = Path(tempfile.mkdtemp())
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp / 'p.db'}?synchronous=NORMAL")
    calls: list[tuple[Any, dict[str, Any]]] = []
    if workload == "chat":
        graph = chat_graph().compile(checkpointer=saver)
        for t in range(runs):
            message = HumanMessage(text(random.Random(-t), 300), id=f"h-{t}")
            calls.append(({"messages": [message]}, {"configurable": {"thread_id": "chat"}}))
    else:
        graph = small_graph(30).compile(checkpointer=saver)
        for t in range(runs):
            cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
            calls.append(({"n": 0}, cfg))
    passes[0] = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for state, cfg in calls:
        graph.invoke(state, cfg, durability="sync")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    found = {"workload": workload, "runs": runs, "wall_s": wall, "cpu_s": cpu}
    found["background_passes"] = passes[0]
    saver.close()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
