"""Where a full page backup's CPU runs, by thread: whether both cores can be busy.

Runs one backup of ``DB`` (a SQLite store built by ``bench_backup.py``) per ``--tree``
(a ``src`` folder, each in a child process, alternated for ``--rounds``) and reports
each thread's CPU seconds (``time.thread_time``), measured by wrapping the backup's
own functions: the page reader (``filecopy.write_pages``, the thread that reads and
plans the pages, and before backup15's pipeline wrote the sealed chunks in order; its
waits cost no CPU), the sealing threads (``ChunkSealer._seal``: page digests, zstd,
AES-GCM, summed over threads), the writing thread (``ChunkSealer._put``, where there
is one: 0 otherwise, the writes are in the reader's time), the heads' thread
(``filecopy._heads_of``), and the process's CPU and wall.
On a loaded machine wall time is the share of CPU the run got; the thread times are
what the work costs. With 2 cores and nothing else running, the backup's wall is at
least ``max(reader, total / 2)``: the reader is the part no other thread can take.

    python benchmarks/bench_backup_threads.py /work/bench/store.db --rounds 3 \\
        --tree src --tree /tmp/main-src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MASTER = bytes(range(32))


def child(db: str, tree: str) -> dict[str, float]:
    sys.path.insert(0, tree)
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup, filecopy, sealer

    spent: dict[str, float] = {"reader": 0.0, "sealing": 0.0, "writing": 0.0, "heads": 0.0}
    lock = threading.Lock()

    def timed(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    spent[name] += time.thread_time() - start

        return wrapped

    filecopy.write_pages = timed("reader", filecopy.write_pages)
    filecopy._heads_of = timed("heads", filecopy._heads_of)
    seal = sealer.ChunkSealer._seal
    sealer.ChunkSealer._seal = timed("sealing", seal)  # type: ignore[method-assign]
    if hasattr(sealer.ChunkSealer, "_put"):  # the writing thread (backup15's pipeline)
        put = sealer.ChunkSealer._put
        sealer.ChunkSealer._put = timed("writing", put)  # type: ignore[method-assign]
    # the writer imported write_pages by name
    from statekeeper.governance.backup import writer

    writer.write_pages = filecopy.write_pages  # type: ignore[attr-defined]

    async def run() -> tuple[float, float]:
        key = BackupKey(os.urandom(32))
        with tempfile.TemporaryDirectory(dir=Path(db).parent) as tmp:
            async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
                cpu, start = time.process_time(), time.perf_counter()
                await backup(store, Path(tmp) / "b.skb", key)
                return time.perf_counter() - start, time.process_time() - cpu

    wall, cpu = asyncio.run(run())
    return {**spent, "process_cpu": cpu, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.db, args.child)))
        return
    trees = [str(Path(t).resolve()) for t in args.tree or ["src"]]
    got: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    loads = [os.getloadavg()[0]]
    for round_no in range(args.rounds):
        for tree in trees if round_no % 2 == 0 else trees[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, args.db, "--child", tree],
                check=True,
                capture_output=True,
                text=True,
            )
            got[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
        loads.append(os.getloadavg()[0])
    report: dict[str, Any] = {"loadavg_1min_during": [round(x, 1) for x in loads]}
    for tree, runs in got.items():
        row = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        row["idle_2_core_wall_floor"] = round(max(row["reader"], row["process_cpu"] / 2), 3)
        row["runs"] = len(runs)
        report[tree] = row
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
