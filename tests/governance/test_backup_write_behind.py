"""A backup file leaves the page cache as it is written (:mod:`.writebehind`): once
``backup`` returns, none of its pages is cached (they would push the live store's
pages out), and it restores as any other."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, restore, writebehind

from ._point_in_time import keyring
from .test_backup_page_delta import contents, fill

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="mincore(2) and posix_fadvise: Linux"
)


def cached_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (mincore(2) over a private
    mapping of it: reading the result touches no page of the file)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        start = ctypes.c_char.from_buffer(mapped)
        try:
            if libc.mincore(ctypes.byref(start), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del start  # the mapping is closed only once no buffer holds it
    return sum(v & 1 for v in vec)


@pytest.fixture
def on_disk() -> Iterator[Path]:
    """A folder on a file system whose clean pages can leave the cache (pytest's
    temporary folders may be on tmpfs, whose pages are the file); skipped if none."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="sk-test-") as folder:
        probe = Path(folder) / "probe"
        with open(probe, "wb") as fh:
            fh.write(os.urandom(1 << 20))
            fh.flush()
            os.fsync(fh.fileno())
            assert cached_pages(probe) > 0  # the helper sees a file just written
            writebehind.drop_all(fh.fileno())
        if cached_pages(probe):
            pytest.skip("/var/tmp keeps its files' pages in memory (tmpfs)")
        yield Path(folder)


async def test_a_backup_file_is_not_left_in_the_page_cache(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full backup by pages, an incremental by pages, one by rows: none of their
    pages is cached when ``backup`` returns (before the first read of them)."""
    tmp_path = on_disk
    monkeypatch.setattr(writebehind, "STEP", 64 << 10)  # several steps in a small backup
    bkey = BackupKey(os.urandom(32))
    files = [tmp_path / "full.skb", tmp_path / "inc.skb", tmp_path / "rows.skb"]
    # each file checked before anything reads it (a read caches it)
    cached: dict[str, int] = {}
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 300)
        await backup(src, files[0], bkey, chunk_bytes=64 << 10)
        cached[files[0].name] = cached_pages(files[0])
        await src.save("t0/a000", {"one": 1})
        await backup(src, files[1], bkey, since=files[0], chunk_bytes=64 << 10)
        cached[files[1].name] = cached_pages(files[1])
        expected = await contents(src)
    async with StateStore("memory://", keyring=keyring()) as moved:  # the row path
        await restore(moved, files[:2], bkey)
        await moved.save("t0/a001", {"two": 2})
        expected["t0/a001"] = (await moved.head("t0/a001"), {"two": 2})
        await backup(moved, files[2], bkey, since=files[1])
        cached[files[2].name] = cached_pages(files[2])
    assert cached == {file.name: 0 for file in files}
    assert files[0].stat().st_size > 3 * (64 << 10)  # several steps of write-behind
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, files, bkey)
        assert await contents(dst) == expected
