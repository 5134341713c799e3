"""How a sync graph's held writes wait, per run: parked off the loop (the step's ``put``
commits them on its own thread), or held on the saver's loop (their caller's thread runs
the loop until the step's checkpoint comes), and how many saver calls found another
thread running the loop and waited for it (``SharedLoop._drive``): a thread wake-up
each. Counted on the chat (60 turns of ``bench_langgraph_goals.py``'s chat graph, one
thread) or the small graph (20 runs of 30 steps), SQLite ``NORMAL``, the saver's
defaults::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_handoffs.py chat
    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_handoffs.py small

The counts follow the threads' timing (which executor thread calls first): compare
trees on the same machine, several runs each. ``PYTHONPATH=<another tree's src>``
measures another tree (benchmarks/_common.py lets it win).
"""

from __future__ import annotations

import collections
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)


def main() -> None:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import chat_graph, small_graph
    from statekeeper.integrations.langgraph import StatekeeperSaver
    from statekeeper.integrations.langgraph import commits as c
    from statekeeper.integrations.langgraph import loop as lp

    workload = sys.argv[1] if len(sys.argv) > 1 else "chat"
    counts: collections.Counter[str] = collections.Counter()
    drive, hold, park = lp.SharedLoop._drive, c._SaverCommits._hold, c._SaverCommits._park

    def driven(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["calls that waited for another thread running the loop"] += 1
        return drive(self, *args, **kwargs)

    async def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["writes held on the loop"] += 1
        return await hold(self, *args, **kwargs)

    def parked(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["writes parked"] += 1
        return park(self, *args, **kwargs)

    lp.SharedLoop._drive = driven  # type: ignore[method-assign]
    c._SaverCommits._hold = held  # type: ignore[method-assign]
    c._SaverCommits._park = parked  # type: ignore[method-assign]
    saver = StatekeeperSaver.from_url(f"sqlite:///{tempfile.mkdtemp()}/h.db?synchronous=NORMAL")
    try:
        if workload == "chat":
            chat = chat_graph().compile(checkpointer=saver)
            runs = 60
            for i in range(runs):
                message = HumanMessage(text(random.Random(-i), 300), id=f"h-{i}")
                cfg: Any = {"configurable": {"thread_id": "chat"}}
                chat.invoke({"messages": [message]}, cfg, durability="sync")
        else:
            graph = small_graph(30).compile(checkpointer=saver)
            runs = 20
            for i in range(runs):
                cfg = {"configurable": {"thread_id": f"small-{i}"}, "recursion_limit": 120}
                graph.invoke({"n": 0}, cfg, durability="sync")
    finally:
        saver.close()
    print(workload, "per run:", {k: round(v / runs, 2) for k, v in sorted(counts.items())})


if __name__ == "__main__":
    main()
