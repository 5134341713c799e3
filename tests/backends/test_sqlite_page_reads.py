"""A page backup's chunks read side by side (``PageSnapshot.reads`` / ``read_into``: each
by the sealing thread that seals it, "backup6"): the image and every page's digest are
byte for byte what the one reader of ``chunks`` gives, in any order and from any
thread, with pages in the WAL, deleted rows and overflow pages (the pass then reads the
kept trees' overflow pages once, under a lock, whichever thread meets one first)."""

from __future__ import annotations

import random
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import sqlite_pages
from statekeeper.codec.keys import Keyring

SEED = 0x5EED_0F_DA7A


async def _store(src: StateStore, db: Path, overflow: bool) -> None:
    for i in range(40):
        pad = "x" * (9000 if overflow and i % 4 == 0 else 200)
        for j in range(2):
            await src.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j, "pad": pad})
    await src.delete("t1/a001")
    raw = sqlite3.connect(db, isolation_level=None)
    try:
        raw.execute("PRAGMA secure_delete = OFF")
        raw.execute("PRAGMA wal_autocheckpoint = 0")  # what follows stays in the WAL
        for i in range(12):
            raw.execute("INSERT INTO sk_meta (key, value) VALUES (?, ?)", (f"g-{i}", "v" * 300))
        raw.execute("DELETE FROM sk_meta WHERE key IN ('g-3', 'g-7')")
    finally:
        raw.close()


def _one_reader(db: Path, chunk: int) -> tuple[bytes, bytes]:
    snapshot = sqlite_pages.open_snapshot(str(db), 5.0)
    assert snapshot is not None
    try:
        image = b"".join(bytes(piece) for piece in snapshot.chunks(chunk, None, SEED))
        return image, bytes(snapshot.digests)
    finally:
        snapshot.close()


@pytest.mark.parametrize("overflow", [False, True], ids=["no-overflow", "overflow"])
@pytest.mark.parametrize("pages", [1, 3, 1000])
async def test_chunks_read_side_by_side_are_the_one_readers_image(
    tmp_path: Path, overflow: bool, pages: int
) -> None:
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=Keyring({"k1": bytes(range(32))})) as src:
        await _store(src, db, overflow)
        _compare(db, pages, overflow)


def _compare(db: Path, pages: int, overflow: bool) -> None:
    snapshot = sqlite_pages.open_snapshot(str(db), 5.0)
    assert snapshot is not None
    try:
        assert snapshot.frames  # pages the WAL holds
        size = snapshot.page_size
        chunk = pages * size
        image, digests = _one_reader(db, chunk)
        reads = snapshot.reads(chunk, SEED)
        assert [first for first, _ in reads] == list(range(1, snapshot.pages + 1, pages))
        assert sum(count for _, count in reads) == snapshot.pages
        shuffled = list(reads)
        random.Random(pages).shuffle(shuffled)

        def read(job: tuple[int, int]) -> tuple[int, bytes]:
            first, count = job
            buf = bytearray(b"\xa5" * (count * size))  # every byte overwritten
            snapshot.read_into(buf, first, count)
            return first, bytes(buf)

        with ThreadPoolExecutor(4) as pool:
            pieces = dict(pool.map(read, shuffled))
        assert b"".join(pieces[first] for first, _ in reads) == image
        assert bytes(snapshot.digests) == digests
        assert len(digests) == 16 * snapshot.pages and digests.count(0) < len(digests) // 2
        # the overflow pages' unused bytes were read once an overflow page was met
        assert snapshot._read_overflow == overflow
    finally:
        snapshot.close()
