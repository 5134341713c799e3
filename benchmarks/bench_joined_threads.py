"""Threads started by a backup and a restore of a large store, and their CPU and wall
time, for two or more trees side by side (paired, interleaved rounds): since
``h/backupesc`` every ``run_joined``/``run_owned`` (a backup's chunk, a restore's
batch) starts a daemon thread of its own instead of reusing asyncio's executor.

Each round runs, per ``--tree`` (a ``src`` folder, in a child process with it first
on the import path): a backup of ``--db`` (a store ``bench_backup.py --db`` built),
a restore of it into an empty SQLite store (the bulk image copy), and a restore into
a store already holding one agent (``skip_existing``: the batch-by-batch writing
pass, one thread hop a batch). Reports per step: threads started
(``threading.Thread.start`` counted), process CPU seconds and wall seconds.

    python benchmarks/bench_joined_threads.py --db /tmp/readesc/store.db --rounds 3 \\
        --tree src --tree /tmp/pre-src
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
BACKUP_KEY = bytes(range(1, 33))


def _counted() -> list[int]:
    count = [0]
    real = threading.Thread.start

    def start(self: threading.Thread) -> None:
        count[0] += 1
        real(self)

    threading.Thread.start = start  # type: ignore[method-assign]
    return count


async def _steps(db: str, folder: str, count: list[int]) -> dict[str, list[float]]:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup, restore

    key, keyring = BackupKey(BACKUP_KEY), Keyring({"k1": MASTER})
    out: dict[str, list[float]] = {}
    to = os.path.join(folder, "b.skb")

    async def step(name: str, run: Any) -> None:
        before, cpu, wall = count[0], time.process_time(), time.perf_counter()
        await run()
        out[name] = [count[0] - before, time.process_time() - cpu, time.perf_counter() - wall]

    async with StateStore(f"sqlite:///{db}", keyring=keyring) as store:
        await step("backup", lambda: backup(store, to, key))
    async with StateStore(f"sqlite:///{folder}/empty.db", keyring=keyring) as store:
        await step("restore_empty", lambda: restore(store, [to], key))
    async with StateStore(f"sqlite:///{folder}/one.db", keyring=keyring) as store:
        await store.save("\x7fnot-in-the-backup", {"x": 1})
        await step("restore_batches", lambda: restore(store, [to], key, skip_existing=True))
    return out


def worker(tree: str, db: str) -> None:
    sys.path.insert(0, str(Path(tree).resolve()))
    count = _counted()
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(asyncio.run(_steps(db, folder, count))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", required=True)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.db)
        return
    runs: dict[str, list[dict[str, list[float]]]] = {tree: [] for tree in args.tree}
    loads = []
    for _ in range(args.rounds):
        for tree in args.tree:
            cmd = [sys.executable, __file__, "--db", args.db, "--tree", tree, "--worker", tree]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    report: dict[str, Any] = {"rounds": args.rounds, "loadavg_1min": loads, "trees": {}}
    for tree, got in runs.items():
        report["trees"][tree] = {
            step: {
                "threads": [r[step][0] for r in got],
                "cpu_s_median": round(statistics.median(r[step][1] for r in got), 3),
                "cpu_s": [round(r[step][1], 3) for r in got],
                "wall_s_median": round(statistics.median(r[step][2] for r in got), 3),
                "wall_s": [round(r[step][2], 3) for r in got],
            }
            for step in got[0]
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
