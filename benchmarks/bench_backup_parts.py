"""What each part of a whole SQLite store's page backup costs, measured alone.

Opens one page snapshot of ``DB`` (a store built by ``bench_backup.py``; a connection
of this process keeps its ``-shm`` while the parts run, the file is not written) with
``--tree`` (a ``src`` folder) first on the import path, and times, in this thread's
CPU seconds (best of ``--repeat``), each part a backup runs: the page plan, the read of
the image alone (``preadv``), with the page filter, and (a tree with a page pass,
backupc) with the page digests taken in the same pass, zstd of the image at the tree's
own setting (``filecopy.LEVEL``) and at level -20, AES-256-GCM of the compressed
chunks, the page digests, the heads' statement and their split, and the manifest's
packing and compression. The parts that run on other threads in a backup (sealing,
heads) are timed here one after the other: their sum is the backup's CPU less the
pipeline's own costs (thread hand-offs, page faults of new buffers, the writes).

    python benchmarks/bench_backup_parts.py /tmp/bkb/store.db --tree src --repeat 3
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def best(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The least thread CPU of ``repeat`` calls of ``fn``, and its last result."""
    spent, out = float("inf"), None
    for _ in range(repeat):
        start = time.thread_time()
        out = fn()
        spent = min(spent, time.thread_time() - start)
    return spent, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--tree", default="src", help="a src folder")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=2 << 20, help="bytes of a chunk")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.tree).resolve()))
    import msgpack  # type: ignore[import-untyped]
    import zstandard
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from statekeeper.backends.sqlite.pages import open_snapshot
    from statekeeper.governance.backup import filecopy
    from statekeeper.governance.backup.pagedelta import page_digests
    from statekeeper.governance.backup.tagheads import TAG_COLUMNS, tag_heads

    keep = sqlite3.connect(args.db)  # its -shm stays while the snapshot is open
    keep.execute("SELECT count(*) FROM sqlite_master").fetchone()
    snap = open_snapshot(args.db, 5.0)
    if snap is None:
        raise SystemExit(f"{args.db}: not a SQLite store in WAL mode")
    out: dict[str, Any] = {"tree": str(Path(args.tree).resolve()), "repeat": args.repeat}
    try:
        n = args.repeat
        out["plan"], _ = best(1, snap.plan)
        buf = bytearray(args.chunk)

        def read_only() -> None:
            for first in range(0, snap.size, len(buf)):
                os.preadv(snap._db, [buf], first)

        out["preadv"], _ = best(n, read_only)
        out["read_and_filter"], _ = best(n, lambda: sum(map(len, snap.chunks(args.chunk))))
        if "seed" in inspect.signature(snap.chunks).parameters:  # backupc: one pass
            from statekeeper.backends.sqlite import pagepass as sqlite_pagepass

            out["page_pass"] = "C" if sqlite_pagepass.NATIVE else "Python"
            out["read_filter_and_digests"], _ = best(
                n, lambda: sum(map(len, snap.chunks(args.chunk, None, 7)))
            )
        chunks = [bytes(c) for c in snap.chunks(args.chunk)]
        out["image_MB"] = round(sum(map(len, chunks)) / 1e6, 1)
        level = filecopy.LEVEL
        if isinstance(level, int):
            tree = zstandard.ZstdCompressor(level=level)
        else:
            params = zstandard.ZstdCompressionParameters(strategy=zstandard.STRATEGY_FAST, **level)
            tree = zstandard.ZstdCompressor(compression_params=params)
        for name, zstd in (
            ("zstd_tree", tree),
            ("zstd_level_-20", zstandard.ZstdCompressor(level=-20)),
        ):
            out[name], size = best(n, lambda z=zstd: sum(len(z.compress(c)) for c in chunks))
            out[name + "_MB"] = round(size / 1e6, 1)
        packed = [tree.compress(c) for c in chunks]
        aes, sealed = AESGCM(os.urandom(32)), bytearray(args.chunk + (args.chunk >> 6) + 16)

        def seal() -> None:
            for p in packed:
                aes.encrypt_into(os.urandom(12), p, b"aad", memoryview(sealed)[: len(p) + 16])

        out["aes_gcm"], _ = best(n, seal)
        out["page_digests"], _ = best(
            n, lambda: [page_digests(c, snap.page_size, 7) for c in chunks]
        )
        out["heads_statement"], _ = best(n, lambda: snap.conn.execute(TAG_COLUMNS).fetchone())
        spent, heads = best(n, lambda: tag_heads(snap.conn))
        out["heads_split"] = max(0.0, spent - out["heads_statement"])
        manifest = {
            "heads": {"agent": heads.agents, "head": heads.heads, "tag": heads.tags},
            "page_digests": os.urandom(16 * snap.pages),
        }
        try:
            from statekeeper.governance.backup.framepack import packb
        except ImportError:  # a tree before it: msgpack
            packb = None
        out["manifest_msgpack"], plain = best(n, lambda: msgpack.packb(manifest, use_bin_type=True))
        if packb is not None:
            out["manifest_tree_packb"], _ = best(n, lambda: packb(manifest))
        out["manifest_MB"] = round(len(plain) / 1e6, 1)
        out["manifest_zstd_1"], _ = best(
            n, lambda: zstandard.ZstdCompressor(level=1).compress(plain)
        )
    finally:
        snap.close()
        keep.close()
    print(
        json.dumps(
            {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, indent=2
        )
    )


if __name__ == "__main__":
    main()
