"""Backup throughput for a store of many agents, against a raw copy of the same file.

Builds a SQLite store of ``--agents`` agents (``--events`` saves each, a realistic
~300-byte state, encrypted with a master key; ``--db PATH`` keeps it to reuse), then
alternates, ``--rounds`` times, in the same run: a raw copy of the SQLite file (read +
write + fsync: the disk's bound) and ``statekeeper.governance.backup.backup`` of the
store into a file (fsync'd too), once per ``--tree`` (a ``src`` folder: the backup runs
in a child process with that tree first on the import path, so two versions compare in
one run). A full backup of a SQLite store is a file copy (format version 2) since issue
15's third pass; a ``--tree`` of an older version measures the row path. Reports MB/s
of each (store file bytes / second of wall time), the ratio
backup / copy with its spread, and MB per CPU-second of each (store bytes / the
process's user+system time), and the same for ``cp`` (then ``sync FILE``) and ``dd
bs=8M conv=fsync`` of the store file (the system's own copy, no Python buffer per
read; their CPU is the children's): on a loaded machine wall time measures the share of CPU
the run got, CPU time what the work costs. A backup is disk-bound when its MB per
CPU-second exceeds the disk's MB/s.

    python benchmarks/bench_backup.py --agents 100000 --events 3 --rounds 3 \\
        --tree src --tree /tmp/main-src

``--profile N``: cProfile (timer: process CPU time) of one backup, top N functions.

``--engine postgresql``: the store is a PostgreSQL schema (``--pg-dsn``, ``--pg-schema``:
built if empty, kept after), the raw copy is ``pg_dump`` of the same four tables (data
only, custom format, no compression, ``fsync``'d: PostgreSQL's own bulk export), the
size is the tables' (heap + TOAST, no indexes). A full backup of a PostgreSQL store is
its ``COPY ... TO STDOUT (FORMAT binary)`` (format version 3, issue 15's fourth pass);
a ``--tree`` of an older version measures the row path. The server's CPU is in
neither process's time: compare wall time, and the client's CPU.

    python benchmarks/bench_backup.py --engine postgresql --pg-schema bench_bk \
        --agents 20000 --rounds 5 --tree src --tree /tmp/main-src

``--incremental PCT``: incremental backups instead: a full backup is taken once (the
parent, by the first ``--tree``), then PCT % of the agents saved once more, then each
timed backup is ``backup(..., since=parent)``. Of a SQLite store whose parent is a
page backup listing its page digests (what the first tree writes since bk15b), the
incremental ships the pages changed since (format version 4); a tree that cannot
(older ones, or any tree after an older parent) takes the row path (it reads every
agent's head and, on an engine that prunes, its compaction base: issue 15, backups of
retained stores). The store file is changed by it (``--db``: keep a copy).

    python benchmarks/bench_backup.py --agents 20000 --events 3 --rounds 3 \
        --incremental 10 --tree src --tree /tmp/main-src
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MASTER = bytes(range(32))


async def build(url: str, agents: int, events: int) -> None:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring

    keyring = Keyring({"k1": MASTER})
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


def tool_copy(tool: str, src: Path, dst: Path) -> tuple[float, float]:
    """The system's own copy of ``src``, ``fsync``'d: ``cp`` (coreutils: an in-kernel
    ``copy_file_range`` where it can) then ``sync FILE``, or ``dd bs=8M conv=fsync``.
    Wall seconds and the children's CPU seconds (user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    if tool == "cp":
        subprocess.run(["cp", str(src), str(dst)], check=True)
        subprocess.run(["sync", str(dst)], check=True)
    else:
        cmd = ["dd", f"if={src}", f"of={dst}", "bs=8M", "conv=fsync", "status=none"]
        subprocess.run(cmd, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


PG_TABLES = ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency")


def pg_dump(dsn: str, schema: str, dst: Path) -> tuple[float, float]:
    """``pg_dump`` of the store's four tables (data only, no compression), fsync'd:
    wall and the child's CPU seconds."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    tables = [arg for t in PG_TABLES for arg in ("-t", f"{schema}.{t}")]
    cmd = ["pg_dump", "--dbname", dsn, "--data-only", "-Fc", "-Z0", *tables, "-f", str(dst)]
    subprocess.run(cmd, check=True)
    fsync(dst)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def pg_size(dsn: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT sum(pg_table_size(to_regclass(quote_ident(%s) || '.' || t)))"
            " FROM unnest(%s::text[]) AS t",
            (schema, list(PG_TABLES)),
        ).fetchone()
    return int(row[0]) if row and row[0] else 0


def fsync(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


async def touch(url: str, agents: int, percent: float) -> None:
    """Save ``percent`` % of the agents once more (what an incremental copies)."""
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring

    step = max(1, round(100 / percent))
    async with StateStore(url, keyring=Keyring({"k1": MASTER})) as store:
        for i in range(0, agents, step):
            await store.save(f"tenant{i % 10}/agent-{i:07d}", {"step": -1, "status": "done"})


async def one_backup(
    url: str, key_hex: str, to: Path, since: str | None = None
) -> tuple[float, float, int]:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup

    key = BackupKey(bytes.fromhex(key_hex))
    async with StateStore(url, keyring=Keyring({"k1": MASTER})) as store:
        cpu, start = time.process_time(), time.perf_counter()
        result = await backup(store, to, key, since=since)
        await asyncio.to_thread(fsync, to)  # the same durability as the raw copy
        return time.perf_counter() - start, time.process_time() - cpu, result.bytes_written


def worker(args: argparse.Namespace) -> None:
    """Child process: one backup with ``--tree`` first on the path; prints JSON."""
    sys.path.insert(0, str(Path(args.tree[0]).resolve()))
    if args.profile:
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    wall, cpu, written = asyncio.run(one_backup(args.url, args.key, Path(args.to), args.since))
    if args.profile:
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(args.profile)
    import statekeeper

    print(json.dumps({"wall": wall, "cpu": cpu, "written": written, "src": statekeeper.__file__}))


def run_tree(
    tree: str,
    url: str,
    key_hex: str,
    to: Path,
    profile: int = 0,
    since: Path | None = None,
    keep: bool = False,
) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", "--tree", tree, "--url", url, "--key", key_hex]
    cmd += ["--to", str(to), "--profile", str(profile)]
    if since is not None:
        cmd += ["--since", str(since)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"backup with --tree {tree} failed:\n{done.stderr}")
    if profile:
        print(done.stderr, file=sys.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not keep:
        to.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", help="a src folder (repeatable)")
    parser.add_argument("--db", help="the store file: built if missing, kept after")
    parser.add_argument("--profile", type=int, default=0, help="cProfile one backup: top N")
    parser.add_argument(
        "--incremental", type=float, default=0.0, help="incremental backups: PCT %% changed"
    )
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--pg-schema", default="bench_backup")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--since", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    trees = [str(Path(t).resolve()) for t in args.tree or [HERE.parent / "src"]]
    key_hex = os.urandom(32).hex()
    with tempfile.TemporaryDirectory(dir=Path(args.db).parent if args.db else None) as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "store.db"
        url = f"sqlite:///{db}"
        postgres = args.engine == "postgresql"
        if postgres:
            url = f"{args.pg_dsn}?schema={args.pg_schema}"
        built = 0.0
        if not db.exists() if not postgres else not pg_size(args.pg_dsn, args.pg_schema):
            sys.path.insert(0, trees[0])
            start = time.perf_counter()
            asyncio.run(build(url, args.agents, args.events))
            built = time.perf_counter() - start
        since: Path | None = None
        if args.incremental > 0:
            since = Path(tmp) / "parent.skb"
            run_tree(trees[0], url, key_hex, since, keep=True)
            if trees[0] not in sys.path:
                sys.path.insert(0, trees[0])
            asyncio.run(touch(url, args.agents, args.incremental))
        if postgres:
            size = pg_size(args.pg_dsn, args.pg_schema)
        else:
            wal = Path(f"{db}-wal")
            size = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        if args.profile:
            run_tree(trees[0], url, key_hex, Path(tmp) / "b.skb", args.profile, since)
            return
        copies: list[float] = []
        copy_cpu: list[float] = []
        #: ``cp`` and ``dd`` of the store file (SQLite only): MB/s and MB per CPU-second
        tools: dict[str, dict[str, list[float]]] = {
            t: {"MBps": [], "MB_per_cpu_s": []} for t in ("cp", "dd")
        }
        per_tree: dict[str, dict[str, list[float]]] = {
            t: {"MBps": [], "MB_per_cpu_s": [], "cpu_s_per_MB": [], "ratio": [], "bytes": []}
            for t in trees
        }
        loads = [os.getloadavg()[0]]
        for round_no in range(args.rounds):
            if postgres:
                c, c_cpu = pg_dump(args.pg_dsn, args.pg_schema, Path(tmp) / "copy.db")
            else:
                c, c_cpu = raw_copy(db, Path(tmp) / "copy.db")
            (Path(tmp) / "copy.db").unlink()
            copies.append(size / c / 1e6)
            copy_cpu.append(size / max(c_cpu, 1e-9) / 1e6)
            walls: dict[str, float] = {}
            if not postgres:
                for tool, row_t in tools.items():
                    t_wall, t_cpu = tool_copy(tool, db, Path(tmp) / "copy.db")
                    (Path(tmp) / "copy.db").unlink()
                    walls[tool] = t_wall
                    row_t["MBps"].append(size / t_wall / 1e6)
                    row_t["MB_per_cpu_s"].append(size / max(t_cpu, 1e-9) / 1e6)
            order = trees if round_no % 2 == 0 else trees[::-1]
            for tree in order:
                got = run_tree(tree, url, key_hex, Path(tmp) / "b.skb", since=since)
                row = per_tree[tree]
                row["MBps"].append(size / got["wall"] / 1e6)
                row["MB_per_cpu_s"].append(size / got["cpu"] / 1e6)
                row["cpu_s_per_MB"].append(got["cpu"] / (size / 1e6))
                row["ratio"].append((size / got["wall"]) / (size / c))
                for tool, t_wall in walls.items():  # backup MB/s over cp's or dd's
                    row.setdefault(f"ratio_{tool}", []).append(t_wall / got["wall"])
                row["bytes"].append(got["written"])
            loads.append(os.getloadavg()[0])
        report = {
            "engine": args.engine,
            "agents": args.agents,
            "events_per_agent": args.events,
            "incremental_percent_changed": args.incremental,
            "store_bytes": size,
            "build_seconds": round(built, 1),
            "raw_copy_MBps": [round(x, 1) for x in copies],
            "raw_copy_MB_per_cpu_second": [round(x, 1) for x in copy_cpu],
            "trees": {
                tree: {
                    "backup_bytes": int(row["bytes"][-1]),
                    "backup_MBps": [round(x, 1) for x in row["MBps"]],
                    "backup_MB_per_cpu_second": [round(x, 1) for x in row["MB_per_cpu_s"]],
                    "cpu_seconds_per_MB": [round(x, 4) for x in row["cpu_s_per_MB"]],
                    "ratio_backup_over_copy_median": round(statistics.median(row["ratio"]), 3),
                    "ratio_min_max": [round(min(row["ratio"]), 3), round(max(row["ratio"]), 3)],
                    **{
                        f"ratio_backup_over_{tool}_median_min_max": [
                            round(statistics.median(row[f"ratio_{tool}"]), 3),
                            round(min(row[f"ratio_{tool}"]), 3),
                            round(max(row[f"ratio_{tool}"]), 3),
                        ]
                        for tool in ("cp", "dd")
                        if row.get(f"ratio_{tool}")
                    },
                }
                for tree, row in per_tree.items()
            },
            **{
                f"{tool}_MBps": [round(x, 1) for x in row_t["MBps"]]
                for tool, row_t in tools.items()
                if row_t["MBps"]
            },
            **{
                f"{tool}_MB_per_cpu_second": [round(x, 1) for x in row_t["MB_per_cpu_s"]]
                for tool, row_t in tools.items()
                if row_t["MBps"]
            },
            "loadavg_1min_during": [round(x, 1) for x in loads],
        }
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
