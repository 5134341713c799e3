"""Process memory of a LangGraph chat workload: ``StatekeeperSaver`` vs ``SqliteSaver``.

Workload (issue 12, item 2): a ``MessagesState`` chat graph on ``--threads`` threads x
``--turns`` turns (default 30 x 40). Each turn is one ``invoke`` with a ~300-character
``HumanMessage``; the node replies with a ~300-character ``AIMessage`` *without an id*
(as chat-model wrappers commonly return), so ``add_messages`` gives ids after the node's
write — the case the saver's message memo must get right. Both savers on a SQLite file
with their defaults (``StatekeeperSaver.from_url("sqlite:///…")``,
``SqliteSaver(sqlite3.connect(path))``).

Each saver runs in its own fresh subprocess (``--rounds`` times, alternating order), so
nothing one leaves behind is counted for the other. Measured in the child, after
``gc.collect()``:

* **tracemalloc**: Python heap allocated by the workload and still held at the end
  (current minus the baseline taken after imports and graph compilation), and its peak;
* **RSS**: resident set size at the end (``/proc/self/status`` ``VmRSS``), its growth
  over the same baseline, and the peak (``VmHWM``). RSS is what "process memory" means
  in the goal (within 1.2x of ``SqliteSaver``'s).

Tracemalloc slows the run, so it is measured in separate children from RSS.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_memory.py                # 3 rounds
    .venv/bin/python benchmarks/bench_langgraph_memory.py --rounds 1 --threads 10
    .venv/bin/python benchmarks/bench_langgraph_memory.py --src /path/to/other/src  # other code
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import human_bytes, machine, median, table  # type: ignore[import-not-found]

PAD = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 6  # ~330 characters


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def child(kind: str, threads: int, turns: int, trace: bool, src: str | None) -> dict[str, Any]:
    """Run the workload with one saver in this (fresh) process; return measurements."""
    if src:
        sys.path.insert(0, src)
    import sqlite3
    import tracemalloc

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    from statekeeper.integrations.langgraph import StatekeeperSaver

    def chat(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n}: {PAD}")]}  # id-less, as models reply

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")

    tmp = Path(tempfile.mkdtemp(prefix="lgmem-"))
    if kind == "statekeeper":
        saver: Any = StatekeeperSaver.from_url(f"sqlite:///{tmp}/sk.db")
        close = saver.close
    else:
        conn = sqlite3.connect(tmp / "lg.db", check_same_thread=False)
        saver = SqliteSaver(conn)
        close = conn.close
    graph = builder.compile(checkpointer=saver)
    # warm up LangGraph's and the saver's lazy imports and caches on a throwaway thread
    graph.invoke({"messages": [HumanMessage("warm " + PAD)]}, {"configurable": {"thread_id": "w"}})
    gc.collect()
    if trace:
        tracemalloc.start()
    base_heap = tracemalloc.get_traced_memory()[0] if trace else 0
    base_rss = _status("VmRSS")
    started = time.perf_counter()
    for turn in range(turns):
        for t in range(threads):
            graph.invoke(
                {"messages": [HumanMessage(f"question {turn} on thread {t}: {PAD}")]},
                {"configurable": {"thread_id": f"thread-{t}"}},
            )
    seconds = time.perf_counter() - started
    gc.collect()
    out: dict[str, Any] = {"kind": kind, "seconds": seconds}
    if trace:
        current, peak = tracemalloc.get_traced_memory()
        out.update(heap_held=current - base_heap, heap_peak=peak - base_heap)
        tracemalloc.stop()
    else:
        rss = _status("VmRSS")
        out.update(rss=rss, rss_growth=rss - base_rss, rss_peak=_status("VmHWM"))
    last = graph.get_state({"configurable": {"thread_id": "thread-0"}}).values["messages"]
    out["messages_per_thread"] = len(last)
    out["ids_set"] = all(m.id is not None for m in last)
    close()
    return out


def run_child(args: argparse.Namespace, kind: str, trace: bool) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--threads",
        str(args.threads),
        "--turns",
        str(args.turns),
    ]
    if trace:
        cmd.append("--trace")
    if args.src:
        cmd += ["--src", args.src]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=30)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", help="import statekeeper from this source directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.threads, args.turns, args.trace, args.src)))
        return
    kinds = ["statekeeper", "sqlite"]
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind in order:
            rss = run_child(args, kind, trace=False)
            heap = run_child(args, kind, trace=True)
            results[kind].append({**rss, **{k: heap[k] for k in ("heap_held", "heap_peak")}})
    med = {
        kind: {
            key: median([row[key] for row in rows])
            for key in ("rss", "rss_growth", "rss_peak", "heap_held", "heap_peak", "seconds")
        }
        for kind, rows in results.items()
    }
    summary = {
        "workload": f"{args.threads} threads x {args.turns} turns",
        "rounds": args.rounds,
        "src": args.src or "this checkout",
        "machine": machine("langgraph", "langgraph-checkpoint-sqlite"),
        "median": med,
        "ids_set": {k: all(row["ids_set"] for row in rows) for k, rows in results.items()},
        "rss_ratio": med["statekeeper"]["rss"] / med["sqlite"]["rss"],
    }
    if args.json:
        print(json.dumps(summary))
        return
    sk, lg = med["statekeeper"], med["sqlite"]
    rows = [
        ["RSS at the end", human_bytes(sk["rss"]), human_bytes(lg["rss"])],
        [
            "RSS growth over the workload",
            human_bytes(sk["rss_growth"]),
            human_bytes(lg["rss_growth"]),
        ],
        ["RSS peak (VmHWM)", human_bytes(sk["rss_peak"]), human_bytes(lg["rss_peak"])],
        [
            "Python heap held (tracemalloc)",
            human_bytes(sk["heap_held"]),
            human_bytes(lg["heap_held"]),
        ],
        [
            "Python heap peak (tracemalloc)",
            human_bytes(sk["heap_peak"]),
            human_bytes(lg["heap_peak"]),
        ],
        ["wall time (RSS run)", f"{sk['seconds']:.1f} s", f"{lg['seconds']:.1f} s"],
    ]
    print(f"{summary['workload']}, {args.rounds} round(s), medians; src: {summary['src']}")
    print(table(["metric", "statekeeper", "SqliteSaver"], rows))
    print(f"RSS ratio statekeeper / SqliteSaver: {summary['rss_ratio']:.2f}x")
    print(f"message ids set after the run: {summary['ids_set']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
