"""The disk's bandwidth for a backup's workload: what "disk-bound" is measured against.

For a file (the bench store), ``--rounds`` times: (a) the raw copy of
``bench_backup.py`` (read from the page cache, write, ``fsync``); (b) the same copy with
the source dropped from the page cache first (``posix_fadvise(DONTNEED)``: the
container may not write ``/proc/sys/vm/drop_caches``; ``fincore`` says how much of the
file was still cached); (c) writing as many bytes from memory, ``fsync``'d; (d) the
same with ``O_DIRECT`` (no page cache); (e) reading the file after dropping it. Prints
MB/s and the process's CPU seconds of each.

    python benchmarks/bench_disk.py /path/to/store.db --rounds 3
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Result = tuple[float, float, int]


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached(path: Path) -> int:
    """Bytes of ``path`` in the page cache (``fincore``), -1 if unknown."""
    try:
        out = subprocess.run(
            ["fincore", "-b", "-n", "-o", "RES", str(path)], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return -1
    return int(out or 0)


def timed(work: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def copy(src: Path, dst: Path, cold: bool) -> Result:
    if cold:
        drop(src)
    before = cached(src)

    def work() -> None:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 8 << 20)
            fout.flush()
            os.fsync(fout.fileno())

    wall, cpu = timed(work)
    dst.unlink()
    return wall, cpu, before


def write(dst: Path, size: int, direct: bool) -> Result:
    block = mmap.mmap(-1, 8 << 20)  # page-aligned, as O_DIRECT needs
    block.write(os.urandom(8 << 20))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)

    def work() -> None:
        fd = os.open(dst, flags, 0o600)
        try:
            done = 0
            while done < size:
                done += os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)

    wall, cpu = timed(work)
    dst.unlink()
    return wall, cpu, 0


def read(src: Path) -> Result:
    drop(src)
    before = cached(src)

    def work() -> None:
        with open(src, "rb", buffering=0) as fin:
            while fin.read(8 << 20):
                pass

    wall, cpu = timed(work)
    return wall, cpu, before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    src: Path = args.file
    size = src.stat().st_size
    tmp = src.parent
    runs: dict[str, list[Result]] = {
        "copy, source cached": [],
        "copy, source dropped": [],
        "write, fsync": [],
        "write, O_DIRECT": [],
        "read, dropped": [],
    }
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        runs["copy, source cached"].append(copy(src, tmp / "bench-disk.copy", False))
        runs["copy, source dropped"].append(copy(src, tmp / "bench-disk.copy", True))
        runs["write, fsync"].append(write(tmp / "bench-disk.write", size, False))
        runs["write, O_DIRECT"].append(write(tmp / "bench-disk.write", size, True))
        runs["read, dropped"].append(read(src))
        loads.append(os.getloadavg()[0])
    print(f"{size / 1e6:.1f} MB, load average {loads}")
    for name, got in runs.items():
        rates = [round(size / wall / 1e6) for wall, _, _ in got]
        cpus = [round(cpu, 3) for _, cpu, _ in got]
        print(f"{name:22s} MB/s {rates}  CPU-s {cpus}  cached before {[c for _, _, c in got]}")


if __name__ == "__main__":
    main()
