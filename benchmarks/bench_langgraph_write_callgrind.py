"""Instructions per LangGraph run of the saver's sync writes (issue 12): callgrind.

Runs ``bench_langgraph_goals.py``'s workloads (``durability="sync"``, SQLite
``synchronous=NORMAL``, the saver's defaults) on ``StatekeeperSaver`` for ``--runs``
runs (small graph: one 30-step run per thread; chat: one turn each); run it twice under
callgrind with two counts and divide the difference of the totals by the difference of
the counts (start-up and imports cancel out)::

    for n in 2 12; do PYTHONHASHSEED=0 valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.small.$n .venv/bin/python \\
        benchmarks/bench_langgraph_write_callgrind.py small $n; done
    # per run: (total(12) - total(2)) / 10, totals from `callgrind_annotate`'s header

``--saver sqlite`` runs LangGraph's ``SqliteSaver`` on the same graph (same file
settings) for the instruction gap. Compare two trees with ``PYTHONPATH=<tree>/src``
(benchmarks/_common.py lets it win).
Without valgrind it prints the process's CPU seconds per run (``time.process_time``).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from langchain_core.messages import HumanMessage

import _common  # type: ignore[import-not-found]  # noqa: F401  (PYTHONPATH wins)
from bench_langgraph import text  # type: ignore[import-not-found]
from bench_langgraph_goals import (  # type: ignore[import-not-found]
    chat_graph,
    small_graph,
    sqlite_saver,
)
from statekeeper.integrations.langgraph import StatekeeperSaver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=("small", "chat"))
    parser.add_argument("runs", type=int)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--writes-wait",
        type=float,
        default=None,
        help="the saver's writes_wait (default: the saver's); 0: no timing window "
        "changes the commits (deterministic under callgrind)",
    )
    parser.add_argument(
        "--saver",
        choices=("sk", "sqlite"),
        default="sk",
        help="sk: StatekeeperSaver; sqlite: LangGraph's SqliteSaver on the same graph",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    options = {} if args.writes_wait is None else {"writes_wait": args.writes_wait}
    url = f"sqlite:///{tmp / args.kind}.db?synchronous=NORMAL"
    if args.saver == "sqlite":
        saver, close = sqlite_saver(tmp / f"{args.kind}.db", "NORMAL")
    else:
        saver = StatekeeperSaver.from_url(url, **options)
        close = saver.close
    cpu = time.process_time()
    if args.kind == "small":
        graph = small_graph(args.steps).compile(checkpointer=saver)
        for t in range(args.runs):
            cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 4 * args.steps}
            graph.invoke({"n": 0}, cfg, durability="sync")
    else:
        graph = chat_graph().compile(checkpointer=saver)
        rng = random.Random(0)
        cfg = {"configurable": {"thread_id": "chat"}}
        for i in range(args.runs):
            message = HumanMessage(text(rng, 300), id=f"h-{i}")
            graph.invoke({"messages": [message]}, cfg, durability="sync")
    cpu = time.process_time() - cpu
    close()
    print(f"{args.kind}: {args.runs} runs, process CPU {cpu / args.runs * 1000:.2f} ms per run")


if __name__ == "__main__":
    main()
