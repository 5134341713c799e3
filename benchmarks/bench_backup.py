"""Backup throughput for a store of many agents, against a raw copy of the same file.

Builds a SQLite store of ``--agents`` agents (``--events`` saves each, a realistic
~300-byte state, encrypted with a master key), then alternates, ``--rounds`` times,
in the same run: a raw copy of the SQLite file (read + write + fsync: the disk's
bound) and ``statekeeper.governance.backup.backup`` of the store into a file. Reports
MB/s of each (store file bytes / second of wall time), the ratio backup / copy with its
spread, and MB per CPU-second of each (store bytes / the process's user+system time):
on a loaded machine wall time measures the share of CPU the run got, CPU time what the
work costs. A backup is disk-bound when its MB per CPU-second exceeds the disk's MB/s.

    python benchmarks/bench_backup.py --agents 100000 --events 3 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - puts src/ on the path
from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.backup import BackupKey, backup


async def build(url: str, agents: int, events: int, keyring: Keyring) -> None:
    async with StateStore(url, keyring=keyring, durability="async", flush_size=500) as store:
        for i in range(agents):
            for j in range(events):
                await store.save(
                    f"tenant{i % 10}/agent-{i:07d}",
                    {
                        "step": j,
                        "status": "running",
                        "notes": f"observation {j} of agent {i}: " + "x" * 200,
                    },
                )
        await store.flush()


def raw_copy(src: Path, dst: Path) -> tuple[float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 8 << 20)
        fout.flush()
        os.fsync(fout.fileno())
    return time.perf_counter() - start, time.process_time() - cpu


async def one_backup(
    url: str, keyring: Keyring, key: BackupKey, to: Path
) -> tuple[float, float, int]:
    async with StateStore(url, keyring=keyring) as store:
        cpu, start = time.process_time(), time.perf_counter()
        result = await backup(store, to, key)
        return time.perf_counter() - start, time.process_time() - cpu, result.bytes_written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    keyring = Keyring({"k1": bytes(range(32))})
    key = BackupKey(os.urandom(32))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.db"
        url = f"sqlite:///{db}"
        start = time.perf_counter()
        asyncio.run(build(url, args.agents, args.events, keyring))
        built = time.perf_counter() - start
        size = db.stat().st_size + (
            Path(f"{db}-wal").stat().st_size if Path(f"{db}-wal").exists() else 0
        )
        copies, backups, ratios = [], [], []
        copy_cpu, backup_cpu = [], []
        out_bytes = 0
        for _ in range(args.rounds):
            c, c_cpu = raw_copy(db, Path(tmp) / "copy.db")
            b, cpu, out_bytes = asyncio.run(one_backup(url, keyring, key, Path(tmp) / "b.skb"))
            copies.append(size / c / 1e6)
            backups.append(size / b / 1e6)
            copy_cpu.append(size / max(c_cpu, 1e-9) / 1e6)
            backup_cpu.append(size / cpu / 1e6)
            ratios.append((size / b) / (size / c))
        report = {
            "agents": args.agents,
            "events_per_agent": args.events,
            "store_bytes": size,
            "backup_bytes": out_bytes,
            "build_seconds": round(built, 1),
            "raw_copy_MBps": [round(x, 1) for x in copies],
            "backup_MBps": [round(x, 1) for x in backups],
            "raw_copy_MB_per_cpu_second": [round(x, 1) for x in copy_cpu],
            "backup_MB_per_cpu_second": [round(x, 1) for x in backup_cpu],
            "ratio_backup_over_copy_median": round(statistics.median(ratios), 4),
            "ratio_min_max": [round(min(ratios), 4), round(max(ratios), 4)],
            "loadavg": os.getloadavg(),
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
