"""What a new saver costs before and during its first reads (issue 12): CPU ms of
opening it (``from_url`` / ``SqliteSaver(conn)`` + ``setup``), of its first read (a
thread that is not there, as ``bench_langgraph_goals.py`` opens a saver before its
cold read) and of its read of the 200-turn chat's latest checkpoint — the goals
benchmark's "cold" read — for statekeeper and SqliteSaver, fresh savers interleaved,
medians. Files from ``bench_langgraph_cold_callgrind.py write DIR``::

    .venv/bin/python benchmarks/bench_langgraph_cold_callgrind.py write /tmp/cg
    .venv/bin/python benchmarks/bench_langgraph_cold_open.py /tmp/cg --savers 30
    .venv/bin/python benchmarks/bench_langgraph_cold_open.py /tmp/cg --absent 500

``--absent N``: instead, CPU µs of a read of a thread that is not there on an open saver
(N distinct threads per window, 5 windows, median): what a plain read of a new thread
costs once the saver is open.

``PYTHONPATH=<another tree's src>`` measures another tree on the same files.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_langgraph_goals as goals
from _common import median, table  # type: ignore[import-not-found]

PARTS = ("open", "absent", "latest")


def one(kind: str, path: Path) -> dict[str, float]:
    """CPU ms of each part for one fresh saver of ``kind``."""
    out: dict[str, float] = {}
    gc.collect()
    cpu = time.process_time()
    saver, close = goals.SAVERS[kind](path, "NORMAL")
    out["open"] = time.process_time() - cpu
    cpu = time.process_time()
    saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
    out["absent"] = time.process_time() - cpu
    gc.collect()  # as the goals benchmark does before its timed read
    cpu = time.process_time()
    assert saver.get_tuple({"configurable": {"thread_id": "chat", "checkpoint_ns": ""}})
    out["latest"] = time.process_time() - cpu
    close()
    return {k: v * 1e3 for k, v in out.items()}


def absent(kind: str, path: Path, n: int) -> float:
    """CPU µs of a read of a thread that is not there, on an open saver."""
    saver, close = goals.SAVERS[kind](path, "NORMAL")
    saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
    windows = []
    for w in range(5):
        cpu = time.process_time()
        for i in range(n):
            saver.get_tuple({"configurable": {"thread_id": f"absent-{w}-{i}", "checkpoint_ns": ""}})
        windows.append((time.process_time() - cpu) / n * 1e6)
    close()
    return median(windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--savers", type=int, default=30)
    parser.add_argument("--absent", type=int, default=0)
    args = parser.parse_args()
    if args.absent:
        ours, peer = (absent(k, args.dir / f"{k}.db", args.absent) for k in ("sk", "sqlite"))
        print(f"absent-thread read, CPU us: statekeeper {ours:.1f}, SqliteSaver {peer:.1f}")
        return
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in goals.SAVERS}
    for i in range(args.savers):
        for kind in goals.SAVERS if i % 2 == 0 else reversed(list(goals.SAVERS)):
            runs[kind].append(one(kind, args.dir / f"{kind}.db"))
    rows = []
    for part in (*PARTS, "sum"):
        ours, peer = (
            median([sum(r.values()) if part == "sum" else r[part] for r in runs[kind]])
            for kind in ("sk", "sqlite")
        )
        rows.append([part, f"{ours:.3f}", f"{peer:.3f}", f"{peer / ours:.2f}x"])
    print(table(["CPU ms (median)", "statekeeper", "SqliteSaver", "ratio"], rows))


if __name__ == "__main__":
    main()
