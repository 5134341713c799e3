"""How often the saver's sync calls run asyncio's loop: ``run_until_complete`` calls and
selector polls (``epoll``) during the goals' two workloads, with the saver's defaults.

``SharedLoop.call`` steps a call's task itself and leaves only a call that waits to
``run_until_complete`` (each of whose passes polls the selector); the SQLite backend
polls on its own every ``PASS_EVERY``. Counted over ``RUNS`` small-graph runs (30 steps,
63 writes each) and ``TURNS`` chat turns, both ``durability="sync"``::

    .venv/bin/python benchmarks/bench_langgraph_loop_calls.py
    PYTHONPATH=<another tree's src> .venv/bin/python benchmarks/bench_langgraph_loop_calls.py

(benchmarks/_common.py lets ``PYTHONPATH`` win.) The counts of polls depend on timing
(the backend's ``PASS_EVERY`` is a time bound, a new thread's creation waits).
"""

from __future__ import annotations

import asyncio
import selectors
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)

RUNS = 10
TURNS = 50


def main() -> None:
    from langchain_core.messages import HumanMessage

    from bench_langgraph_goals import chat_graph, sk_saver, small_graph

    counts = {"run_until_complete": 0, "polls": 0}
    until = asyncio.BaseEventLoop.run_until_complete
    select = selectors.EpollSelector.select

    def counted_until(self: Any, future: Any) -> Any:
        counts["run_until_complete"] += 1
        return until(self, future)

    def counted_select(self: Any, timeout: float | None = None) -> Any:
        counts["polls"] += 1
        return select(self, timeout)

    asyncio.BaseEventLoop.run_until_complete = counted_until  # type: ignore[method-assign]
    selectors.EpollSelector.select = counted_select  # type: ignore[method-assign]
    saver, close = sk_saver(Path(tempfile.mkdtemp()) / "calls.db", "NORMAL")
    small = small_graph(30).compile(checkpointer=saver)
    for t in range(RUNS):
        cfg: Any = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
        small.invoke({"n": 0}, cfg, durability="sync")
    print(f"small, {RUNS} runs ({RUNS * 63} writes): {counts}")
    counts.update(run_until_complete=0, polls=0)
    chat = chat_graph().compile(checkpointer=saver)
    for t in range(TURNS):
        message = HumanMessage("hello " * 50, id=f"h-{t}")
        chat.invoke(
            {"messages": [message]}, {"configurable": {"thread_id": "chat"}}, durability="sync"
        )
    print(f"chat, {TURNS} turns: {counts}")
    close()


if __name__ == "__main__":
    main()
