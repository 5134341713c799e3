"""What the restore's rebuild of delta snapshots (governance/backup/wholesnaps.py) costs,
and what it saves: process CPU time of one restore of a SQLite store into an empty
SQLite store, and of one cold load of every restored agent after it (no cache).

The source: ``AGENTS`` agents, each ``HEAD`` chat saves under the default policy (its
latest snapshot a tail, a delta on the whole one at 61) or, with ``whole``, saved
with ``snapshot_every=8`` and ``full_snapshot_every=1`` (no delta: the rebuild only
looks). Built once, backed up once; each round restores into a fresh file::

    .venv/bin/python benchmarks/bench_restore_deltas.py /tmp/rd build
    .venv/bin/python benchmarks/bench_restore_deltas.py /tmp/rd run --rounds 3

``PYTHONPATH=<another tree's src>`` runs another tree on the same backups (run the
two trees' ``run`` in turn, interleaved, for an A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import source_state
from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, restore

AGENTS = 200
HEAD = 70
KEY = BackupKey(bytes(range(1, 33)))
KINDS: dict[str, dict[str, Any]] = {
    "tails": {"snapshot_every": "bounded"},
    "whole": {"snapshot_every": 8},
}


def chat(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"m{i} " + "x" * 120} for i in range(n)]}


async def build(folder: Path) -> None:
    for kind, options in KINDS.items():
        async with StateStore(f"sqlite:///{folder / kind}.db", **options) as src:
            for a in range(AGENTS):
                for n in range(1, HEAD + 1):
                    await src.save(f"a{a:04d}", chat(n))
            await backup(src, folder / f"{kind}.skb", KEY)


async def one(folder: Path, kind: str, number: int) -> tuple[float, float]:
    target = folder / f"dst-{kind}-{os.getpid()}-{number}.db"
    try:
        async with StateStore(f"sqlite:///{target}", cache_size=0) as dst:
            began = time.process_time()
            await restore(dst, [folder / f"{kind}.skb"], KEY)
            restored = time.process_time() - began
            began = time.process_time()
            for a in range(AGENTS):
                await dst.load(f"a{a:04d}")
            loaded = time.process_time() - began
        return restored, loaded
    finally:
        for suffix in ("", "-wal", "-shm"):  # (between the measured parts)
            Path(f"{target}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240


async def run(folder: Path, rounds: int) -> None:
    out: dict[str, Any] = {"source": source_state(), "agents": AGENTS, "head": HEAD}
    for kind in KINDS:
        got = [await one(folder, kind, r) for r in range(rounds)]
        out[kind] = {
            "restore_cpu_s": sorted(g[0] for g in got),
            "cold_loads_cpu_s": sorted(g[1] for g in got),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where the sources and backups are")
    parser.add_argument("what", choices=("build", "run"))
    parser.add_argument("--rounds", type=int, default=5, help="restores of each backup")
    args = parser.parse_args()
    if args.what == "build":
        args.folder.mkdir(parents=True, exist_ok=True)
        asyncio.run(build(args.folder))
    else:
        asyncio.run(run(args.folder, args.rounds))
