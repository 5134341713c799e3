"""A full backup against a raw copy of the same file, in pairs, the page cache set the
same way for both: can it show a backup limited by the disk, not the CPU?

``bench_backup.py`` runs its copies and backups one after another and left the page
cache as the run before left it: a copy that found the file cached and a backup that
did not (or the reverse) make a ratio of cache states, not of programs, and ``cp``
itself varied 2.4x across rounds (docs/benchmarks.md, "Check at the end of the
2026-12-06 early-morning session"). Here each round runs, for each page-cache state
(``--cache``):

- ``warm``: the store file read whole just before (every page cached; what a backup
  of a live store mostly meets);
- ``cold``: the store file's pages dropped from the page cache just before
  (``posix_fadvise(POSIX_FADV_DONTNEED)`` after ``sync``; ``/proc/sys/vm/drop_caches``
  is not writable in a container) — for the backup inside its process, once the store
  is open, right before the clock starts; the fraction still cached is measured
  (``mincore``) and reported for every run (a page some process maps stays);

a backup (``--tree``: a ``src`` folder, in a child process, the store opened before
the clock: as ``bench_backup.py``) and the raw copies (``--tools``) of the same file, in
an order rotated each round, ``sync`` before each (no other run's dirty pages written
during it). Every copy is durable when it returns, as a backup is (its file written,
``fsync``'d, linked, its directory ``fsync``'d): ``cp`` is ``cp`` + ``sync FILE`` (an
``fsync`` of the copy: written into the page cache, then in one burst), ``dd`` is ``dd
bs=8M conv=fsync`` (the same, 8 MiB reads), ``direct`` is ``dd bs=4M oflag=direct
conv=fsync`` (the backup's way of writing: 4 MiB ``O_DIRECT`` writes, each done before
the next read, never through the page cache; the reads through it, with the kernel's
read-ahead). None ``fsync``s a directory (1-2 ms of a backup's tail, backup9).

Each pair's ratio is the copy's wall over the backup's (> 1: the backup was faster);
the backup's CPU-seconds per wall-second say whether it waited (a disk-bound backup
leaves the CPU idle: well below its cores); the disk's read sectors
(``/sys/block/*/stat``, every process's) say what came from the disk, and its busy
fraction (``io_ticks``, the ms with a request in flight, over the run's wall:
``/sys/dev/block/MAJ:MIN/stat`` of the file's disk, every process's requests) whether
it waited for the disk: a run limited by its disk keeps it busy ~100 % (the MB written
to that disk are reported too: more than the copy's, another process wrote). Busy is
necessary, not sufficient: a virtual disk with many requests in flight is busy as long
with slower requests; what it moved a wall-second (``disk_MBps``: read + written) beside
the ``direct`` copy's, and its requests (``disk_requests_read_write``: fewer, larger is
faster here) say at what rate (docs/benchmarks.md, "backupcold"). The
copies' wall includes starting ``cp`` / ``sync`` / ``dd`` (``spawn_s``: ``true`` +
``sync`` of an empty file, reported); the backup's excludes its
process start and the store's open, as in ``bench_backup.py``.

    python benchmarks/bench_backup_paired.py /tmp/bk7/store.db --rounds 6 --tree src
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MASTER = bytes(range(32))
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_PROT_READ, _MAP_SHARED = 1, 1
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached(paths: list[str]) -> float:
    """The fraction of the files' pages in the page cache (``mincore`` of a mapping
    that touches nothing)."""
    total = resident = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for path in paths:
        size = os.path.getsize(path) if os.path.exists(path) else 0
        if not size:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _LIBC.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
            if addr in (None, _MAP_FAILED):
                raise OSError(ctypes.get_errno(), f"mmap {path}")
            try:
                pages = (size + page - 1) // page
                vec = ctypes.create_string_buffer(pages)
                if _LIBC.mincore(addr, size, vec):
                    raise OSError(ctypes.get_errno(), f"mincore {path}")
                resident += sum(b & 1 for b in vec.raw)
                total += pages
            finally:
                _LIBC.munmap(addr, size)
        finally:
            os.close(fd)
    return resident / total if total else 1.0


def set_cache(paths: list[str], state: str) -> float:
    """Put the files' pages in ``state`` (``warm``: read whole; ``cold``: dropped);
    returns the fraction cached after."""
    for path in paths:
        if not os.path.exists(path):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if state == "cold":
                os.fsync(fd)  # a dirty page is not dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 8 << 20):
                    pass
        finally:
            os.close(fd)
    return cached(paths)


def store_files(db: str) -> list[str]:
    return [db, db + "-wal"]


def disk_stat_path(path: str) -> str:
    """``/sys/dev/block/MAJ:MIN/stat`` of the whole disk ``path`` is on."""
    dev = os.stat(path).st_dev
    name = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if os.path.exists(name + "/partition"):
        return os.path.join(os.path.realpath(name), "..", "stat")
    return name + "/stat"


def disk_io(path: str) -> list[int]:
    """The disk of ``path``: its counters since boot (``Documentation/block/stat``);
    zeros where ``path`` is on no block device (tmpfs)."""
    stat = Path(disk_stat_path(path))
    if not stat.exists():
        return [0] * 17
    return [int(x) for x in stat.read_text().split()]


def disk_delta(before: list[int], after: list[int], wall: float) -> dict[str, float]:
    """What the disk did between two :func:`disk_io`: its busy fraction of ``wall``
    (``io_ticks``), the MB written, its read and write requests and the ms they
    waited in all (``read_ticks``, ``write_ticks``: summed over requests in flight)."""
    d = [b - a for a, b in zip(before, after, strict=False)]
    return {
        "busy": d[9] / 1e3 / wall,
        "written_MB": d[6] * 512 / 1e6,
        "read_reqs": d[0],
        "write_reqs": d[4],
        "read_wait_ms": d[3],
        "write_wait_ms": d[7],
    }


def disk_read_sectors() -> int:
    """Sectors read by every whole disk since boot (``/sys/block/*/stat``)."""
    total = 0
    for stat in Path("/sys/block").glob("*/stat"):
        if stat.parent.name.startswith(("loop", "ram", "zram")):
            continue
        total += int(stat.read_text().split()[2])
    return total


async def one_backup(db: str, to: str, state: str) -> dict[str, float]:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup

    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
        os.sync()
        before = set_cache(store_files(db), state)
        sectors = disk_read_sectors()
        disk = disk_io(db)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu, start = time.process_time(), time.perf_counter()
        await backup(store, Path(to), key)
        fd = os.open(to, os.O_RDONLY)
        try:
            os.fsync(fd)  # the same durability as the copies
        finally:
            os.close(fd)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        disk = disk_delta(disk, disk_io(db), wall)
        after = resource.getrusage(resource.RUSAGE_SELF)
        return {
            **disk,
            "out_MB": os.stat(to).st_size / 1e6,
            "wall": wall,
            "cpu": cpu,
            "cached_before": before,
            "read_MB": (disk_read_sectors() - sectors) * 512 / 1e6,
            "minflt": after.ru_minflt - usage.ru_minflt,
        }


def child(db: str, tree: str, to: str, state: str) -> None:
    sys.path.insert(0, tree)
    print(json.dumps(asyncio.run(one_backup(db, to, state))))


def run_backup(db: str, tree: str, to: Path, state: str) -> dict[str, float]:
    cmd = [sys.executable, __file__, db, "--child", tree, "--to", str(to), "--state", state]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"backup with --tree {tree} failed:\n{done.stderr}")
    to.unlink()
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_tool(tool: str, db: str, to: Path, state: str) -> dict[str, float]:
    os.sync()
    before = set_cache(store_files(db), state)
    sectors = disk_read_sectors()
    disk = disk_io(db)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    if tool == "cp":
        subprocess.run(["cp", db, str(to)], check=True)
        subprocess.run(["sync", str(to)], check=True)  # fsync of the copy
    else:
        block, direct = ("4M", ["oflag=direct"]) if tool == "direct" else ("8M", [])
        cmd = ["dd", f"if={db}", f"of={to}", f"bs={block}", *direct, "conv=fsync", "status=none"]
        subprocess.run(cmd, check=True)
    wall = time.perf_counter() - start
    disk = disk_delta(disk, disk_io(db), wall)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = os.path.getsize(to) / 1e6
    to.unlink()
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    read = (disk_read_sectors() - sectors) * 512 / 1e6
    return {
        "wall": wall,
        "cpu": cpu,
        "cached_before": before,
        "read_MB": read,
        **disk,
        "out_MB": out,
    }


def spawn_seconds(tmp: Path) -> float:
    """What starting the copies' processes costs: ``true`` + ``sync`` of an empty file."""
    empty = tmp / "empty"
    empty.touch()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(["true"], check=True)
        subprocess.run(["sync", str(empty)], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def spread(values: list[float], digits: int = 3) -> list[float]:
    return [round(x, digits) for x in (statistics.median(values), min(values), max(values))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db", help="a store built by bench_backup.py --db")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--tree", action="append", help="a src folder the backup runs (repeatable: A/B)"
    )
    parser.add_argument("--cache", nargs="+", default=["warm", "cold"], choices=["warm", "cold"])
    parser.add_argument(
        "--tools", nargs="+", default=["cp", "dd", "direct"], choices=["cp", "dd", "direct"]
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--to", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args()
    db = str(Path(args.db).resolve())
    if args.child:
        child(db, args.child, args.to, args.state)
        return
    trees = [str(Path(t).resolve()) for t in args.tree or ["src"]]
    label = {t: "backup" if len(trees) == 1 else f"backup[{i}]" for i, t in enumerate(trees)}
    size = sum(os.path.getsize(p) for p in store_files(db) if os.path.exists(p))
    runs: dict[str, list[dict[str, float]]] = {}
    pairs: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=Path(db).parent) as tmp_name:
        tmp = Path(tmp_name)
        spawn = spawn_seconds(tmp)
        for round_no in range(args.rounds):
            states = args.cache if round_no % 2 == 0 else args.cache[::-1]
            for state in states:
                names = [*trees, *args.tools]
                shift = round_no % len(names)
                got: dict[str, dict[str, float]] = {}
                for name in names[shift:] + names[:shift]:
                    to = tmp / "out"
                    if name in label:
                        got[name] = run_backup(db, name, to, state)
                    else:
                        got[name] = run_tool(name, db, to, state)
                    runs.setdefault(f"{state} {label.get(name, name)}", []).append(got[name])
                for tree in trees:
                    for tool in args.tools:
                        ratio = got[tool]["wall"] / got[tree]["wall"]
                        pairs.setdefault(f"{state} {tool}/{label[tree]}", []).append(ratio)
                for other in trees[1:]:  # A/B of the trees: > 1, the first was faster
                    ratio = got[other]["wall"] / got[trees[0]]["wall"]
                    pairs.setdefault(f"{state} {label[other]}/{label[trees[0]]}", []).append(ratio)
            loads.append(os.getloadavg()[0])
    report: dict[str, Any] = {
        "store_bytes": size,
        "trees": label,
        "rounds": args.rounds,
        "spawn_s": round(spawn, 4),
        "pairs_copy_wall_over_backup_wall": {
            k: {"each": [round(x, 3) for x in v], "median_min_max": spread(v)}
            for k, v in pairs.items()
        },
        "runs": {
            k: {
                "MBps_median_min_max": spread([size / r["wall"] / 1e6 for r in v], 0),
                "wall_s": [round(r["wall"], 3) for r in v],
                "cpu_s_per_wall_s_median_min_max": spread([r["cpu"] / r["wall"] for r in v], 2),
                "cpu_s_per_wall_s": [round(r["cpu"] / r["wall"], 2) for r in v],
                "cpu_s": [round(r["cpu"], 3) for r in v],
                "cached_before": [round(r["cached_before"], 3) for r in v],
                "disk_read_MB": [round(r["read_MB"], 1) for r in v],
                "disk_busy_median_min_max": spread([r["busy"] for r in v], 2),
                # what the disk moved a wall-second (every process's reads and writes)
                "disk_MBps_median_min_max": spread(
                    [(r["read_MB"] + r["written_MB"]) / r["wall"] for r in v], 0
                ),
                "disk_busy": [round(r["busy"], 2) for r in v],
                "disk_written_MB": [round(r["written_MB"], 1) for r in v],
                "disk_requests_read_write": [f"{r['read_reqs']}/{r['write_reqs']}" for r in v],
                "disk_wait_ms_read_write": [f"{r['read_wait_ms']}/{r['write_wait_ms']}" for r in v],
                "out_MB": round(v[0]["out_MB"], 1),
                "out_MBps_median_min_max": spread([r["out_MB"] / r["wall"] for r in v], 0),
                **({"minflt": [int(r["minflt"]) for r in v]} if "minflt" in v[0] else {}),
            }
            for k, v in sorted(runs.items())
        },
        "loadavg_1min_during": [round(x, 1) for x in loads],
    }
    # one line a run's lists (the full report is long otherwise)
    print(
        re.sub(
            r"\[[^\[\]{}]*\]",
            lambda m: re.sub(r"\s+", " ", m.group(0)),
            json.dumps(report, indent=2),
        )
    )


if __name__ == "__main__":
    main()
