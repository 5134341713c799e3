"""How many pages of a SQLite store an incremental backup by pages would ship (issue 15
item 4, a measurement for a design not built): the page image of a whole-store backup
(:mod:`statekeeper.backends.sqlite.pages`) hashed per page (BLAKE2b, 16 bytes), then
``--percent`` % of the agents saved once more (``bench_backup.py``'s ``touch``), then
the image hashed again: the pages that differ, and the CPU seconds of one image + hash.
The store is changed: run it on a copy.

    cp /work/bench/store.db /tmp/inc.db
    python benchmarks/bench_page_delta.py /tmp/inc.db --agents 100000 --percent 10
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sqlite3
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))


def image_digests(path: str) -> tuple[list[bytes], int]:
    from statekeeper.backends.sqlite.pages import open_snapshot

    keep = sqlite3.connect(path)  # a WAL-mode connection: the wal-index the image needs
    try:
        keep.execute("PRAGMA journal_mode = wal")
        keep.execute("SELECT count(*) FROM sqlite_master").fetchone()
        snapshot = open_snapshot(path, 5.0)
        if snapshot is None:
            raise SystemExit(f"{path}: no page image (not in WAL mode?)")
        size = snapshot.page_size
        digests: list[bytes] = []
        try:
            for piece in snapshot.chunks(8 << 20):
                view = memoryview(piece)
                digests += [
                    hashlib.blake2b(view[at : at + size], digest_size=16).digest()
                    for at in range(0, len(piece), size)
                ]
        finally:
            snapshot.close()
        return digests, size
    finally:
        keep.close()


def main() -> None:
    import bench_backup

    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--percent", type=float, default=10.0)
    args = parser.parse_args()
    before, size = image_digests(args.db)
    asyncio.run(bench_backup.touch(f"sqlite:///{args.db}", args.agents, args.percent))
    cpu = time.process_time()
    after, _ = image_digests(args.db)
    cpu = time.process_time() - cpu
    changed = sum(1 for i, d in enumerate(after) if i >= len(before) or before[i] != d)
    print(
        f"pages {len(before)} -> {len(after)}, changed {changed}"
        f" ({changed * size / 1e6:.1f} MB of {len(after) * size / 1e6:.1f} MB);"
        f" image + digests {cpu:.3f} CPU-s"
    )


if __name__ == "__main__":
    main()
