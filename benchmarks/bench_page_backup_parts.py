"""What a page backup of a SQLite store is made of, step by step (helper bk15b, issue
15): on the snapshot of ``DB``, the CPU seconds of opening the snapshot, the ``dbstat``
plan, reading the pages with the plan applied, the same plus the page digests, and the
heads and totals; then (``--chain``) a full backup, ``--percent`` % of the agents saved
once more, an incremental by pages, and the CPU of rebuilding the chain's image against
decrypting the full one. ``--chain`` changes the store: run it on a copy.

    cp /work/bench_bk15b/store.db /tmp/parts.db
    python benchmarks/bench_page_backup_parts.py /tmp/parts.db --chain --agents 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statekeeper.governance.backup import BackupKey

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))


def steps(path: str, rounds: int) -> None:
    from statekeeper.backends.sqlite.pages import open_snapshot
    from statekeeper.governance.backup import filecopy
    from statekeeper.governance.backup.pagedelta import page_digests

    keep = sqlite3.connect(path)  # a WAL-mode connection: the wal-index the image needs
    keep.execute("PRAGMA journal_mode = wal")
    keep.execute("SELECT count(*) FROM sqlite_master").fetchone()
    cpu = time.process_time
    for _ in range(rounds):
        start = cpu()
        snapshot = open_snapshot(path, 5.0)
        if snapshot is None:
            raise SystemExit(f"{path}: no page image (not in WAL mode?)")
        opened = cpu() - start
        try:
            start = cpu()
            snapshot.plan()
            planned = cpu() - start
            start = cpu()
            size = sum(len(piece) for piece in snapshot.chunks(8 << 20))
            read = cpu() - start
            start = cpu()
            for piece in snapshot.chunks(8 << 20):
                page_digests(piece, snapshot.page_size, 1)  # XXH3-128, any seed
            digested = cpu() - start
            start = cpu()
            filecopy._heads_of(snapshot.conn)
            heads = cpu() - start
        finally:
            snapshot.close()
        print(
            f"open {opened:.3f}  plan {planned:.3f}  read+apply {read:.3f}"
            f"  read+apply+digests {digested:.3f}  heads {heads:.3f}  ({size / 1e6:.0f} MB)"
        )
    keep.close()


async def make_chain(url: str, folder: str, agents: int, percent: float) -> None:
    import bench_backup
    from statekeeper import StateStore
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.backup import backup

    key = _key()
    keyring = Keyring({"k1": bench_backup.MASTER})
    async with StateStore(url, keyring=keyring) as store:
        await backup(store, f"{folder}/full.skb", key)
    await bench_backup.touch(url, agents, percent)
    async with StateStore(url, keyring=keyring) as store:
        made = await backup(store, f"{folder}/inc.skb", key, since=f"{folder}/full.skb")
    print(f"incremental: {made.copied} streams, {made.record_bytes} bytes of pages")


_KEY = os.urandom(32)


def _key() -> BackupKey:
    from statekeeper.governance.backup import BackupKey

    return BackupKey(_KEY)


def chain(path: str, agents: int, percent: float, rounds: int) -> None:
    from statekeeper.governance.backup import filecopy, pagechain
    from statekeeper.governance.backup.fileformat import FrameReader

    with tempfile.TemporaryDirectory(dir=Path(path).parent) as folder:
        asyncio.run(make_chain(f"sqlite:///{path}", folder, agents, percent))
        files = [f"{folder}/full.skb", f"{folder}/inc.skb"]
        key = _key()
        for _ in range(rounds):
            start = time.process_time()
            reader = FrameReader(files[0], key)
            try:
                with filecopy.opened_copy(reader):
                    pass
            finally:
                reader.close()
            full = time.process_time() - start
            start = time.process_time()
            with (
                tempfile.TemporaryDirectory() as work,
                pagechain.chain_image(files, key, work),
            ):
                pass
            rebuilt = time.process_time() - start
            print(f"full image decrypted {full:.3f} CPU-s; chain rebuilt and checked {rebuilt:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chain", action="store_true")
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--percent", type=float, default=10.0)
    args = parser.parse_args()
    steps(args.db, args.rounds)
    if args.chain:
        chain(args.db, args.agents, args.percent, args.rounds)


if __name__ == "__main__":
    main()
