"""Store calls per LangGraph run of the saver (issue 12): counts, not timings.

Runs ``bench_langgraph_goals.py``'s two workloads (``durability="sync"``, SQLite
``synchronous=NORMAL``) on ``StatekeeperSaver`` and counts the store calls each run
makes: ``append`` (one commit each), ``head`` reads, ``list_agents`` listings and
``create``. With ``--writes-wait 0`` (the default here) a task's writes are committed
on their own, so no timing window changes the counts: they are the same on every run
and every machine. Compare two trees by ``PYTHONPATH``::

    .venv/bin/python benchmarks/bench_langgraph_run_calls.py
    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/bench_langgraph_run_calls.py
    .venv/bin/python benchmarks/bench_langgraph_run_calls.py --writes-wait 0.005  # default saver
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from bench_langgraph import text  # type: ignore[import-not-found]
from bench_langgraph_goals import chat_graph, small_graph  # type: ignore[import-not-found]
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.store.store import StateStore

CALLS = ("append", "head", "list_agents", "create")


def counting() -> dict[str, int]:
    """Wrap the store's methods in :data:`CALLS` to count calls (every store)."""
    counts = dict.fromkeys(CALLS, 0)

    def wrap(name: str, method: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
        async def counted(self: StateStore, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return await method(self, *args, **kwargs)

        return counted

    for name in CALLS:
        setattr(StateStore, name, wrap(name, getattr(StateStore, name)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes-wait", type=float, default=0.0)
    parser.add_argument("--small-threads", type=int, default=20)
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    counts = counting()
    tmp = Path(tempfile.mkdtemp())
    for kind, runs in (("small", args.small_threads), ("chat", args.turns)):
        saver = StatekeeperSaver.from_url(
            f"sqlite:///{tmp / kind}.db?synchronous=NORMAL", writes_wait=args.writes_wait
        )
        for name in counts:
            counts[name] = 0
        if kind == "small":
            graph = small_graph(30).compile(checkpointer=saver)
            for t in range(runs):
                cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
                graph.invoke({"n": 0}, cfg, durability="sync")
        else:
            graph = chat_graph().compile(checkpointer=saver)
            rng = random.Random(0)
            cfg = {"configurable": {"thread_id": "chat"}}
            for i in range(runs):
                message = HumanMessage(text(rng, 300), id=f"h-{i}")
                graph.invoke({"messages": [message]}, cfg, durability="sync")
        saver.close()
        per_run = ", ".join(f"{name} {counts[name] / runs:.2f}" for name in CALLS)
        print(f"{kind} ({runs} runs): per run {per_run}")


if __name__ == "__main__":
    main()
