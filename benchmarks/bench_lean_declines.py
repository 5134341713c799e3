"""Why a LangGraph run's writes took or declined the SQLite lean append (wakebyte).

Runs a small graph for ``STEPS`` steps (one node adding 1, ``durability="sync"``) on a
``StatekeeperSaver`` over SQLite, ``RUNS`` times, each on a new thread id, with
``SQLiteBackend.commit_keyed`` wrapped: each call's outcome is recorded as taken
("lean") or why it declined, read right after it declined (as
``tests/lean_declines.py`` reads it, with "a pass of the loop due" split by what the
poll finds: a timer due, the loop's own self-pipe readable — a wake-up byte
``call_soon_threadsafe`` wrote —, other I/O ready). Prints the counts and the lean
share over all runs::

    PYTHONPATH=<tree>/src python benchmarks/bench_lean_declines.py [RUNS] [STEPS]
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from statekeeper.backends import sqlite

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 30


def why(backend: sqlite.SQLiteBackend) -> str:
    """(On the loop's thread, right after a decline.) What is still there; the self-pipe
    looked at without reading it (``select(0)`` lists what is readable)."""
    loop: Any = asyncio.get_running_loop()
    if loop._ready:
        return "task ready"
    timers = loop._scheduled
    if timers and timers[0].when() <= loop.time() + loop._clock_resolution:
        callback = getattr(timers[0], "_callback", None)
        return f"timer due ({getattr(callback, '__qualname__', callback)})"
    found = {key.fd for key, _ in loop._selector.select(0)}
    pipe = loop._ssock.fileno()
    if found - {pipe}:
        return "other I/O ready"
    if found:
        return "self-pipe byte (I/O ready)"
    if backend._checkpoint_due or backend._writer_busy.locked():
        return "writer busy"
    return "none left (poll/decline raced)"


def main() -> None:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from statekeeper.integrations.langgraph import StatekeeperSaver

    outcomes: collections.Counter[str] = collections.Counter()
    commit_keyed = sqlite.SQLiteBackend.commit_keyed

    def recorded(backend: sqlite.SQLiteBackend, *args: Any) -> Any:
        result = commit_keyed(backend, *args)
        outcomes["lean" if result is not None else why(backend)] += 1
        return result

    sqlite.SQLiteBackend.commit_keyed = recorded  # type: ignore[method-assign]

    class S(TypedDict):
        n: int

    graph = StateGraph(S)
    graph.add_node("inc", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "inc")
    graph.add_conditional_edges("inc", lambda s: END if s["n"] >= STEPS else "inc")
    per_run: list[str] = []
    tmp = tempfile.mkdtemp()
    with StatekeeperSaver.from_url(f"sqlite:///{tmp}/lg.db") as saver:
        app = graph.compile(checkpointer=saver)
        for run in range(RUNS):
            before = outcomes["lean"], sum(outcomes.values())
            config: Any = {"configurable": {"thread_id": f"t{run}"}}
            assert app.invoke({"n": 0}, config, durability="sync") == {"n": STEPS}
            lean, total = outcomes["lean"] - before[0], sum(outcomes.values()) - before[1]
            per_run.append(f"{lean}/{total}")
    shutil.rmtree(tmp)
    total = sum(outcomes.values())
    print(
        f"{RUNS} runs of {STEPS} steps: lean {outcomes['lean']}/{total} "
        f"({outcomes['lean'] / total:.0%}); per run {' '.join(per_run)}"
    )
    for reason, count in outcomes.most_common():
        print(f"  {count:>5}  {reason}")


if __name__ == "__main__":
    main()
