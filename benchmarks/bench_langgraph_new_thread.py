"""A saver write's CPU on a thread new to it vs on a thread that wrote before (issue 12).

LangGraph runs each ``invoke``'s ``put`` / ``put_writes`` on threads of its own (about
2.5 new threads a chat turn, docs/benchmarks.md "lgwall"), so whatever a saver keeps
per thread is paid again on each of them. Here one ``put`` + ``put_writes`` pair (the
sequence of ``bench_langgraph_flatput.py``, one checkpoint on a cached thread) is timed
by the CPU clock of the thread that makes it (``time.thread_time_ns``), alternately on
a thread started for it and on a long-lived worker thread, for statekeeper's saver and
``SqliteSaver`` in the same process, rounds alternated::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_new_thread.py --pairs 400

prints, per saver, the median [min..p90] CPU of a pair on a new thread, on a warm
one, and the difference (what a new thread costs the saver), and a new thread's own
start (``new-noop``: an empty call on a new thread, the clock's floor).
"""

from __future__ import annotations

import argparse
import os
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)


def _pair_maker(saver: Any) -> Callable[[], None]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    state: dict[str, Any] = {
        "config": {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        "step": 0,
    }

    def pair() -> None:
        i = state["step"]
        state["step"] = i + 1
        cp: Any = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=-1))
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": i + 1, "__start__": 1}
        cp["versions_seen"] = {"step": {"n": i}, "__input__": {}}
        cp["updated_channels"] = ["n"]
        metadata: Any = {"source": "loop", "step": i, "parents": {}}
        config = saver.put(state["config"], cp, metadata, {"n": i + 1})
        state["config"] = config
        saver.put_writes(config, [("n", i + 1)], f"task-{i}")

    return pair


def _savers(tmp: Path) -> dict[str, tuple[Any, Callable[[], None]]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from statekeeper.integrations.langgraph import StatekeeperSaver

    sk = StatekeeperSaver.from_url(f"sqlite:///{tmp / 'sk.db'}?synchronous=NORMAL")
    conn = sqlite3.connect(tmp / "peer.db", check_same_thread=False)
    peer = SqliteSaver(conn)
    peer.setup()
    conn.execute("PRAGMA synchronous=NORMAL")
    return {"statekeeper": (sk, sk.close), "SqliteSaver": (peer, conn.close)}


def _timed(out: list[float], fn: Callable[[], None]) -> None:
    start = time.thread_time_ns()
    fn()
    out.append((time.thread_time_ns() - start) / 1e3)


def _on_new_thread(out: list[float], fn: Callable[[], None]) -> None:
    thread = threading.Thread(target=_timed, args=(out, fn))
    thread.start()
    thread.join()


def _cell(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[8]
    return f"{statistics.median(values):.1f} us [{min(values):.1f}..{p90:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=400, help="pairs timed per saver and kind")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sk-new-thread-"))
    savers = _savers(tmp)
    todo: queue.Queue[Callable[[], None] | None] = queue.Queue()
    done: queue.Queue[None] = queue.Queue()
    results: dict[str, dict[str, list[float]]] = {}
    sink: list[float] = []

    def worker() -> None:
        while (fn := todo.get()) is not None:
            _timed(sink, fn)
            done.put(None)

    warm = threading.Thread(target=worker)
    warm.start()
    pairs = {name: _pair_maker(saver) for name, (saver, _) in savers.items()}
    for pair in pairs.values():  # (each saver's thread cached, the worker warm)
        for _ in range(20):
            todo.put(pair)
            done.get()
    load = os.getloadavg()[0]
    for r in range(args.pairs):
        for name in list(pairs)[:: 1 if r % 2 == 0 else -1]:
            got = results.setdefault(name, {"new": [], "warm": [], "new-noop": []})
            _on_new_thread(got["new"], pairs[name])
            sink.clear()
            todo.put(pairs[name])
            done.get()
            got["warm"].extend(sink)
            _on_new_thread(got["new-noop"], lambda: None)
    todo.put(None)
    warm.join()
    for _, close in savers.values():
        close()
    print(f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}; {args.pairs} pairs each")
    for name, got in results.items():
        extra = statistics.median(got["new"]) - statistics.median(got["warm"])
        cells = "  ".join(f"{kind} {_cell(values)}" for kind, values in got.items())
        print(f"{name:12s} {cells}  new-thread extra {extra:.1f} us")


if __name__ == "__main__":
    main()
