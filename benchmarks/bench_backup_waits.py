"""Where a warm full page backup's pipeline waits: per backup, the wall each stage's
calls took (summed over their threads) and their CPU, beside the pipeline's wall.

Runs ``--backups`` backups of ``DB`` (a store built by ``bench_backup.py``; the file
is read whole first, so every backup after the first finds it in the page cache) in
one process with ``--tree`` (a ``src`` folder) first on the import path, the backup's
own functions wrapped to note each call's wall and thread CPU (the first backup, with
its imports and new buffers, is not reported). Per backup: ``wall`` and ``cpu`` (the
process's), ``pipe`` (from the first page read to the end of the last write),
``head`` / ``tail`` (before and after it), and ``stage wall/cpu xcalls`` for:
``preadv`` (the store file's pages read), ``apply`` (the page pass: filter and
digests), ``feed`` (the reader handing a chunk over: its wall is mostly the wait for a
place in the pipeline), ``seal`` (zero-run frame and AES-GCM, two threads), ``turn``
(a sealed chunk waiting for its offset), ``put`` (the writing thread), ``pwritev``
(the disk's thread: the write's own time, and from its end the wait for a CPU and the
GIL to return). A pipeline limited by its disk has ``pwritev`` near ``pipe``; its
other stages then wait in ``feed``. ``--switch`` sets ``sys.setswitchinterval`` (how
long a thread waiting for the GIL waits before it asks the holder to drop it).

    chrt -f 10 python benchmarks/bench_backup_waits.py /tmp/bk/store.db --tree src
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MASTER = bytes(range(32))
STAGES = ("preadv", "apply", "feed", "seal", "turn", "put", "pwritev", "pwrite")
#: each stage's calls of the running backup: (start, end, thread CPU)
calls: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)


def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            calls[label].append((start, time.perf_counter(), time.thread_time() - cpu))

    return wrapped


def instrument() -> None:
    from statekeeper.backends.sqlite import pages
    from statekeeper.governance.backup import directfile, sealer

    for owner, name, label in [
        (pages.PageSnapshot, "_apply", "apply"),
        (sealer.ChunkSealer, "feed", "feed"),
        (sealer.ChunkSealer, "_seal", "seal"),
        (sealer.ChunkSealer, "_offset", "turn"),
        (sealer.ChunkSealer, "_put", "put"),
        (directfile.DirectFile, "_pwritev", "pwritev"),
        (directfile.DirectFile, "_pwrite", "pwrite"),
    ]:
        setattr(owner, name, timed(label, getattr(owner, name)))
    os.preadv = timed("preadv", os.preadv)  # (only the page reader calls it here)


def report(wall: float, cpu: float, start: float, end: float) -> str:
    first = min(s for s, _, _ in calls["preadv"])
    last = max(e for _, e, _ in calls["pwritev"] + calls["pwrite"])
    parts = [
        f"wall {1e3 * wall:.0f} cpu {1e3 * cpu:.0f} | pipe {1e3 * (last - first):.0f}"
        f" (head {1e3 * (first - start):.0f} tail {1e3 * (end - last):.0f})"
    ]
    for stage in STAGES:
        got = calls[stage]
        if got:
            spent, cpu = sum(e - s for s, e, _ in got), sum(c for *_, c in got)
            parts.append(f"{stage} {1e3 * spent:.0f}/{1e3 * cpu:.0f}x{len(got)}")
    return " ".join(parts)


async def run(db: str, backups: int) -> None:
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import BackupKey, backup

    key = BackupKey(os.urandom(32))
    with tempfile.TemporaryDirectory(dir=Path(db).parent) as tmp:
        async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": MASTER})) as store:
            for i in range(backups + 1):
                calls.clear()
                to = Path(tmp) / f"b{i}.skb"
                cpu, start = time.process_time(), time.perf_counter()
                await backup(store, to, key)
                end = time.perf_counter()
                cpu = time.process_time() - cpu
                to.unlink()
                if i:
                    print(report(end - start, cpu, start, end), flush=True)
    print("load average", [round(x, 1) for x in os.getloadavg()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", default="src")
    parser.add_argument("--backups", type=int, default=5)
    parser.add_argument("--switch", type=float, help="sys.setswitchinterval, seconds")
    args = parser.parse_args()
    with open(args.db, "rb") as fh:  # (the store file in the page cache: warm)
        while fh.read(8 << 20):
            pass
    sys.path.insert(0, str(Path(args.tree).resolve()))
    instrument()
    if args.switch:
        sys.setswitchinterval(args.switch)
    asyncio.run(run(args.db, args.backups))


if __name__ == "__main__":
    main()
