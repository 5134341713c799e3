"""SQL statements per 30-step small-graph run, statekeeper's saver against ``SqliteSaver``
(issue 12): every statement any SQLite connection of the process runs during ``RUNS``
runs (after ``WARM`` uncounted ones), grouped by their first three words, and the
threads that ran them::

    .venv/bin/python benchmarks/bench_langgraph_statements.py sk
    .venv/bin/python benchmarks/bench_langgraph_statements.py sqlite

Counted with ``sqlite3``'s trace callback, which also reports an ``INSERT`` whose
table has a trigger (``sk_events``: the feed's) once per trigger program it runs: read
``INSERT INTO sk_events`` as three lines per row. ``PYTHONPATH=<another tree's src>``
measures another tree (benchmarks/_common.py lets it win).
"""

from __future__ import annotations

import collections
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)

WARM, RUNS = 2, 3


def main() -> None:
    from bench_langgraph_goals import small_graph, sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    kind = sys.argv[1] if len(sys.argv) > 1 else "sk"
    statements: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    counting = [False]
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)

        def trace(sql: str) -> None:
            if counting[0]:
                statements[" ".join(sql.split()[:3])] += 1
                threads[threading.current_thread().name.rsplit("_", 1)[0]] += 1

        conn.set_trace_callback(trace)
        return conn

    sqlite3.connect = traced  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp())
    saver: Any
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "s.db", "NORMAL")
    else:
        saver = StatekeeperSaver.from_url(f"sqlite:///{tmp / 's.db'}?synchronous=NORMAL")
        close = saver.close
    graph = small_graph(30).compile(checkpointer=saver)
    for t in range(WARM + RUNS):
        counting[0] = t >= WARM
        cfg = {"configurable": {"thread_id": f"t{t}"}, "recursion_limit": 120}
        graph.invoke({"n": 0}, cfg, durability="sync")
    counting[0] = False
    close()
    print(f"{kind}: {sum(statements.values()) / RUNS:.1f} traced statements per run")
    for sql, n in statements.most_common():
        print(f"{n / RUNS:8.1f}  {sql}")
    print("by thread:", {name: round(n / RUNS, 1) for name, n in threads.most_common()})


if __name__ == "__main__":
    main()
