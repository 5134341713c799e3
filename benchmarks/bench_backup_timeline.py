"""One full page backup's timeline: when each phase ran, and when the disk read the
store file and wrote the backup — what runs before the file's first read, after its
last, or beside a stalled reader.

Per ``--tree`` (a ``src`` folder, each backup in a child process, trees alternated
for ``--rounds``), the page cache set as ``bench_backup_paired.py`` sets it
(``--cache cold``: the store file dropped from it, ``warm``: read whole), one backup of
``DB`` (a store built by ``bench_backup.py``) with its functions wrapped to note when
each ran (ms from the call) while a thread samples every 2 ms the fraction of the
store file in the page cache (``mincore``) and the disk's requests in flight
(``/sys/block/DEV/stat``: every process's). Reported per backup: ``plan`` (start,
end), ``first_chunk`` (the first chunk's read), ``cached`` (when the whole file was
in the page cache: the disk's read of it done), ``first_write`` (start, ms it took:
a write queued behind the file's reads waits for them), ``last_chunk`` and
``writes_done``, ``wall``, ``cpu``, ``disk_idle`` (ms with no request in flight, and
its gaps > 2 ms). On a quiet machine a backup limited by its disk reads from
``first_chunk`` on with the disk never idle to its end.

    python benchmarks/bench_backup_timeline.py /tmp/bk9/store.db --rounds 3 \\
        --tree src --tree /tmp/main-src --cache cold
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = str(Path(__file__).resolve().parent)
MASTER = bytes(range(32))


def _disk_stat() -> str:
    root = os.stat("/").st_dev
    name = f"/sys/dev/block/{os.major(root)}:{os.minor(root)}"
    if os.path.exists(name + "/partition"):
        return os.path.join(os.path.realpath(name), "..", "stat")
    return name + "/stat"


def child(db: str, tree: str, cache: str) -> dict[str, Any]:
    sys.path.insert(0, tree)
    sys.path.insert(0, HERE)
    from bench_backup_paired import _LIBC, _MAP_SHARED, _PROT_READ, set_cache, store_files
    from statekeeper import StateStore
    from statekeeper.backends.sqlite import pages as sqlite_pages
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup

    events: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def timed(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    events.append((name, start, time.perf_counter()))

        return wrapped

    snapshot = sqlite_pages.PageSnapshot
    snapshot.plan = timed("plan", snapshot.plan)  # type: ignore[method-assign]
    os.preadv = timed("read", os.preadv)
    os.pwritev = timed("write", os.pwritev)
    samples: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        stat, size = _disk_stat(), os.path.getsize(db)
        page = os.sysconf("SC_PAGE_SIZE")
        fd = os.open(db, os.O_RDONLY)
        addr = _LIBC.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        vec = ctypes.create_string_buffer((size + page - 1) // page)
        try:
            while not stop.is_set():
                _LIBC.mincore(addr, size, vec)
                raw = vec.raw
                with open(stat) as fh:
                    busy = int(fh.read().split()[8])
                cached = 1 - raw.count(b"\0") / len(raw)
                samples.append((time.perf_counter(), cached, busy))
                time.sleep(0.002)
        finally:
            _LIBC.munmap(addr, size)
            os.close(fd)

    async def run() -> tuple[float, float, float]:
        key = BackupKey(os.urandom(32))
        with tempfile.TemporaryDirectory(dir=Path(db).parent) as tmp:
            async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
                os.sync()
                set_cache(store_files(db), cache)
                thread = threading.Thread(target=sample, daemon=True)
                thread.start()
                await asyncio.sleep(0.01)  # (its first samples: the state before)
                cpu, start = time.process_time(), time.perf_counter()
                await backup(store, Path(tmp) / "b.skb", key)
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                stop.set()
                thread.join()
                return start, wall, cpu

    start, wall, cpu = asyncio.run(run())

    def ms(at: float) -> float:
        return round((at - start) * 1000, 1)

    plan = next(e for e in events if e[0] == "plan")
    reads = sorted(e for e in events if e[0] == "read")
    writes = sorted(e for e in events if e[0] == "write")
    inside = [s for s in samples if start <= s[0] <= start + wall]
    cached = next((ms(t) for t, part, _ in inside if part >= 0.999), None)
    gaps, idle, since = [], 0.0, None
    ends = [*inside[1:], (start + wall, 0.0, 0)]
    for (t, _, busy), (after, _, _) in zip(inside, ends, strict=True):
        if busy:
            if since is not None and t - since > 0.002:
                gaps.append((ms(since), round((t - since) * 1000, 1)))
            since = None
        else:
            idle += after - t
            since = t if since is None else since
    return {
        "wall": ms(start + wall),
        "cpu": round(cpu * 1000, 1),
        "plan": [ms(plan[1]), ms(plan[2])],
        "first_chunk": ms(reads[0][1]),
        "cached": cached,
        "first_write": [ms(writes[0][1]), round((writes[0][2] - writes[0][1]) * 1000, 1)],
        "last_chunk": ms(reads[-1][2]),
        "writes_done": ms(writes[-1][2]),
        "disk_idle": [round(idle * 1000, 1), gaps],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", choices=["warm", "cold"], default="cold")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.db, args.child, args.cache)))
        return
    trees = [str(Path(t).resolve()) for t in args.tree or ["src"]]
    for round_no in range(args.rounds):
        for tree in trees if round_no % 2 == 0 else trees[::-1]:
            cmd = [sys.executable, __file__, args.db, "--child", tree, "--cache", args.cache]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"tree": tree, "load": round(os.getloadavg()[0], 1), **got}))


if __name__ == "__main__":
    main()
