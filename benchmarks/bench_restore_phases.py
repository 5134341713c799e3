"""Where a restore's CPU goes, by phase, for two trees side by side.

Restores ``BACKUP`` (a backup of the store ``bench_backup.py`` builds; written first
from ``--db`` with the first tree if the file is missing) into a new SQLite store
once per ``--tree`` (a ``src`` folder, each in a child process, alternated for
``--rounds``), and reports the process CPU seconds (``time.process_time``: every
thread's) of each phase of ``restore``: reading the chain's headers and manifests
(``_open_chain``), the checking pass (``_check``: every chunk, every stream against
the manifest, every record opened with the target's keys and the chain followed),
the writing pass (``write_image``, the bulk copy of a checked image into an empty
SQLite target, else ``_write_all``), and the rest (the target's heads, the tags,
the audit event), with the wall time and the load. The phases run one after the
other, so each one's process CPU is its own.

    python benchmarks/bench_restore_phases.py /tmp/full.skb --db /tmp/store.db \\
        --rounds 3 --tree src --tree /tmp/main-src
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MASTER = bytes(range(32))
BACKUP_KEY = bytes(range(1, 33))
#: a tree without a phase (``write_image``: the bulk copy, since session 2 of
#: 2026-12-04) reports 0 for it
PHASES = ("_open_chain", "_check", "write_image", "_write_all")


async def write_backup(db: str, to: str) -> None:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup

    async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
        await backup(store, to, BackupKey(BACKUP_KEY))


def timed(module: Any, name: str, spent: dict[str, float]) -> None:
    """Wrap ``module.name`` to add its process CPU seconds to ``spent[name]``."""
    fn = getattr(module, name)

    if asyncio.iscoroutinefunction(fn):

        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            cpu = time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - cpu

        setattr(module, name, wrapped_async)
    else:

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            cpu = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - cpu

        setattr(module, name, wrapped)


async def one_restore(backup_file: str, folder: str) -> dict[str, float]:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey

    module = importlib.import_module("statekeeper.governance.backup.restore")
    spent: dict[str, float] = {}
    for name in PHASES:
        if hasattr(module, name):
            timed(module, name, spent)
    target = f"sqlite:///{os.path.join(folder, 'target.db')}"
    async with StateStore(target, keyring=Keyring({"k1": MASTER})) as store:
        cpu, start = time.process_time(), time.perf_counter()
        result = await module.restore(store, [backup_file], BackupKey(BACKUP_KEY))
        total = time.process_time() - cpu
        wall = time.perf_counter() - start
    spent["rest"] = total - sum(spent.values())
    return {**spent, "total": total, "wall": wall, "agents": result.agents}


def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(args.tree[0]).resolve()))
    with tempfile.TemporaryDirectory() as folder:
        out = asyncio.run(one_restore(args.backup, folder))
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backup")
    parser.add_argument("--db", help="the store to back up when BACKUP is missing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", help="a src folder (repeatable)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    trees = args.tree or ["src"]
    if not os.path.exists(args.backup):
        if not args.db:
            raise SystemExit(f"{args.backup} is missing: give --db to write it")
        sys.path.insert(0, str(Path(trees[0]).resolve()))
        asyncio.run(write_backup(args.db, args.backup))
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    loads: list[float] = []
    for _ in range(args.rounds):
        for tree in trees:
            loads.append(os.getloadavg()[0])
            cmd = [sys.executable, __file__, args.backup, "--worker", "--tree", tree]
            done = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"restore with --tree {tree} failed:\n{done.stderr}")
            runs[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
    report: dict[str, Any] = {"loadavg_1min": [round(x, 1) for x in loads]}
    for tree, got in runs.items():
        report[tree] = {
            key: {
                "median": round(statistics.median(r.get(key, 0.0) for r in got), 2),
                "min_max": [
                    round(min(r.get(key, 0.0) for r in got), 2),
                    round(max(r.get(key, 0.0) for r in got), 2),
                ],
            }
            for key in (*PHASES, "rest", "total", "wall")
        } | {"agents": got[0]["agents"], "runs": len(got)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
