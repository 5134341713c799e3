"""A full page backup's wall by stage: what stands between it and the disk.

Runs one backup of ``DB`` (a SQLite store built by ``bench_backup.py``) per ``--tree``
(a ``src`` folder, each in a child process, trees alternated for ``--rounds``) with the
backup's own functions wrapped to note when each ran (wall) and its thread's CPU, and
reports per tree the medians of:

- ``head``: from the call to the first chunk read (the page plan, the snapshot);
- ``pipeline``: from the first chunk read to the last page shipped (reader, sealing,
  writing threads), and ``pwrite``: the seconds the backup file's writes took in it
  (``disk_busy``: their share of the pipeline: 1 when the disk never waits);
- ``tail``: from the last page shipped to the return (the manifest, the file closed,
  fsync'd and renamed, the snapshot closed, the result), and ``tail_cpu``: the CPU of
  the manifest's frame, the snapshot's close and the result;
- ``heads_cpu``: the heads' thread (beside the pipeline); ``wall`` and ``cpu`` (process).

On a quiet machine a backup limited by its disk has ``disk_busy`` near 1 and short
``head`` and ``tail``; on a loaded one the wall is the CPU share it got.

    python benchmarks/bench_backup_stages.py /tmp/bench/store.db --rounds 8 \\
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
HERE = str(Path(__file__).resolve().parent)
#: the tail's parts whose thread CPU is ``tail_cpu``
TAIL = ("finish", "result", "snapshot_close")


def child(db: str, tree: str, cache: str = "asis") -> dict[str, float]:
    sys.path.insert(0, tree)
    from statekeeper import StateStore
    from statekeeper.backends.sqlite import pages as sqlite_pages
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup, filecopy, fileformat
    from statekeeper.governance.backup import writer as backup_writer

    events: list[tuple[str, float, float, float]] = []  # (stage, start, end, thread CPU)
    lock = threading.Lock()

    def timed(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    events.append((name, start, time.perf_counter(), time.thread_time() - cpu))

        return wrapped

    snapshot = sqlite_pages.PageSnapshot
    snapshot._apply = timed("apply", snapshot._apply)  # type: ignore[method-assign]
    snapshot.plan = timed("plan", snapshot.plan)  # type: ignore[method-assign]
    snapshot.close = timed("snapshot_close", snapshot.close)  # type: ignore[method-assign]
    heads = "_heads_ahead" if hasattr(filecopy, "_heads_ahead") else "_heads_of"
    setattr(filecopy, heads, timed("heads", getattr(filecopy, heads)))
    frames = fileformat.FrameWriter
    frames.finish = timed("finish", frames.finish)  # type: ignore[method-assign]
    try:  # a local page backup's manifest sealed in its place ("backup6")
        from statekeeper.governance.backup import placedframe

        placedframe.finish_placed = timed("finish", placedframe.finish_placed)
    except ImportError:
        pass
    try:  # the store file read ahead ("backup7")
        from statekeeper.backends.sqlite import prefetch as sqlite_prefetch

        ahead = sqlite_prefetch.Prefetch
        ahead._run = timed("prefetch", ahead._run)  # type: ignore[method-assign]
    except ImportError:
        pass
    backup_writer.write_pages = timed("ship", filecopy.write_pages)  # type: ignore[attr-defined]
    backup_writer._whole_result = timed("result", backup_writer._whole_result)  # type: ignore[attr-defined]
    os.pwrite = timed("pwrite", os.pwrite)
    os.pwritev = timed("pwrite", os.pwritev)  # (frames written from their place: "backup5")

    async def run() -> tuple[float, float, float]:
        key = BackupKey(os.urandom(32))
        with tempfile.TemporaryDirectory(dir=Path(db).parent) as tmp:
            async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
                if cache != "asis":  # (bench_backup_paired.py: the page cache set so)
                    sys.path.insert(0, HERE)
                    from bench_backup_paired import set_cache, store_files

                    os.sync()
                    set_cache(store_files(db), cache)
                cpu, start = time.process_time(), time.perf_counter()
                await backup(store, Path(tmp) / "b.skb", key)
                return start, time.perf_counter() - start, time.process_time() - cpu

    start, wall, cpu = asyncio.run(run())
    first = min(e[1] for e in events if e[0] == "apply")
    shipped = max(e[2] for e in events if e[0] == "ship")
    pipeline = shipped - first
    writes = sum(e[2] - e[1] for e in events if e[0] == "pwrite" and e[1] < shipped)
    return {
        "wall": wall,
        "cpu": cpu,
        "head": first - start,
        "pipeline": pipeline,
        "pwrite": writes,
        "disk_busy": writes / pipeline if pipeline > 0 else 0.0,
        "tail": start + wall - shipped,
        "tail_cpu": sum(e[3] for e in events if e[0] in TAIL),
        "heads_cpu": sum(e[3] for e in events if e[0] == "heads"),
        "heads_end": max((e[2] for e in events if e[0] == "heads"), default=start) - start,
        "plan": sum(e[2] - e[1] for e in events if e[0] == "plan"),
        "prefetch_end": max((e[2] for e in events if e[0] == "prefetch"), default=start) - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--cache",
        choices=["asis", "warm", "cold"],
        default="asis",
        help="the store file's pages read whole or dropped from the page cache first",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.db, args.child, args.cache)))
        return
    trees = [str(Path(t).resolve()) for t in args.tree or ["src"]]
    got: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    loads = [os.getloadavg()[0]]
    for round_no in range(args.rounds):
        for tree in trees if round_no % 2 == 0 else trees[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, args.db, "--child", tree, "--cache", args.cache],
                check=True,
                capture_output=True,
                text=True,
            )
            got[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
        loads.append(os.getloadavg()[0])
    report: dict[str, Any] = {"loadavg_1min_during": [round(x, 1) for x in loads]}
    for tree, runs in got.items():
        row: dict[str, Any] = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        row["wall_min_max"] = [
            round(min(r["wall"] for r in runs), 3),
            round(max(r["wall"] for r in runs), 3),
        ]
        row["runs"] = len(runs)
        report[tree] = row
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
