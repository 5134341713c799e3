"""A page backup's snapshot reads the store file in from the disk in file order while
its heads and chunks read pages (``sqlite_prefetch.Prefetch``, started by the plan once
its own few pages are read: tests/backends/test_sqlite_tree_outline.py): the kernel
is asked for every byte of the image, window by window, on the snapshot's own
descriptor (never a second one: closing it would drop the process's SQLite locks); a
file dropped from the page cache is in it once the read-ahead is done; a file larger
than half the available memory is not read ahead; closing the snapshot stops the
thread; a backup of a store read so restores."""

from __future__ import annotations

import ctypes
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.pages import PageSnapshot, open_snapshot
from statekeeper.governance.backup import BackupKey, backup, restore

from ..governance._point_in_time import keyring

pytestmark = pytest.mark.skipif(
    not hasattr(os, "posix_fadvise") or not os.path.exists("/proc/meminfo"),
    reason="no posix_fadvise or /proc/meminfo (Linux): nothing is read ahead",
)


def _store(path: Path, rows: int = 3000) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA page_size = 1024")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE sk_events (k INTEGER PRIMARY KEY, v BLOB)")
        conn.executemany(
            "INSERT INTO sk_events VALUES (?, ?)", ((i, os.urandom(300)) for i in range(rows))
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def snapshot(path: Path) -> Iterator[PageSnapshot]:
    with closing(sqlite3.connect(path)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        snap = open_snapshot(str(path), 5.0)
        assert snap is not None
        try:
            yield snap
        finally:
            snap.close()


def _cached(path: Path) -> float:
    """The fraction of the file's pages in the page cache (``mincore`` of a mapping
    that touches none of them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size, page = path.stat().st_size, os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert addr not in (None, ctypes.c_void_p(-1).value)
        try:
            vec = ctypes.create_string_buffer((size + page - 1) // page)
            assert libc.mincore(addr, size, vec) == 0
            return sum(b & 1 for b in vec.raw) / len(vec.raw)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "statekeeper-prefetch"]


def test_the_snapshot_asks_for_the_whole_file_window_by_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte of the image from 0, in windows of ``WINDOW`` bytes, ``WILLNEED``, on
    the descriptor the snapshot reads its pages from; the thread gone after close."""
    db = tmp_path / "s.db"
    _store(db)
    asked: list[tuple[int, int, int, int]] = []
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        asked.append((fd, offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 64 << 10)
    with snapshot(db) as snap:
        ahead = snap._prefetch
        snap.plan()
        assert ahead.started
        assert ahead._thread is not None
        ahead._thread.join()  # (run to its end: close would stop it)
        fd, size = snap._db, snap.size
    assert size == db.stat().st_size > 4 * (64 << 10)
    assert {a[0] for a in asked} == {fd} and {a[3] for a in asked} == {os.POSIX_FADV_WILLNEED}
    assert [(a[1], a[2]) for a in asked] == [
        (at, min(64 << 10, size - at)) for at in range(0, size, 64 << 10)
    ]
    assert not _threads()


def test_a_file_dropped_from_the_page_cache_is_read_back_in() -> None:
    """With the store's pages dropped from the page cache, a snapshot's plan brings
    every one back (``mincore``: read from the disk), though no chunk was read. (On a
    disk: the tests' own folder may be a tmpfs, whose pages are never dropped.)"""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as where:
        _cold_file_read_in(Path(where) / "s.db")


def _cold_file_read_in(db: Path) -> None:
    _store(db)
    with closing(sqlite3.connect(db)) as writer:
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        fd = os.open(db, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if _cached(db) > 0.5:
            pytest.skip("this file system keeps the file's pages (tmpfs?)")
        snap = open_snapshot(str(db), 5.0)
        assert snap is not None
        try:
            snap.plan()
            assert snap._prefetch._thread is not None
            snap._prefetch._thread.join()  # (every read asked for; the disk still reads)
            deadline = time.monotonic() + 60
            while _cached(db) < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            if _cached(db) == 0:  # (asked for, as the test above checks; not our call)
                pytest.skip("this kernel or file system does not act on POSIX_FADV_WILLNEED")
            assert _cached(db) == 1
        finally:
            snap.close()


def test_a_file_larger_than_half_the_available_memory_is_not_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _store(db, rows=200)
    asked: list[Any] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda *a: asked.append(a))
    monkeypatch.setattr(sqlite_prefetch, "available_memory", lambda: 2 * db.stat().st_size - 2)
    with snapshot(db) as snap:
        snap.plan()
        assert not snap._prefetch.started
    monkeypatch.setattr(sqlite_prefetch, "available_memory", lambda: None)
    with snapshot(db) as snap:
        snap.plan()
        assert not snap._prefetch.started
    assert asked == [] and not _threads()


def test_closing_the_snapshot_stops_the_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close while the thread is between windows ends it there: no window is asked
    for after the close returned (the descriptor may be closed then)."""
    db = tmp_path / "s.db"
    _store(db)
    first, go = threading.Event(), threading.Event()
    asked: list[int] = []

    def slow(fd: int, offset: int, length: int, advice: int) -> None:
        asked.append(offset)
        first.set()
        go.wait(10)

    monkeypatch.setattr(os, "posix_fadvise", slow)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 4096)
    with snapshot(db) as snap:
        snap.plan()
        assert first.wait(10)
        closer = threading.Thread(target=snap.close)
        closer.start()
        snap._prefetch._stopped.wait(10)
        go.set()
        closer.join(10)
        assert not closer.is_alive() and not _threads()
        snap.close = lambda: None  # type: ignore[method-assign]  # (closed above)
    assert asked == [0]


async def test_a_backup_of_a_read_ahead_store_restores(tmp_path: Path) -> None:
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        for i in range(60):
            await src.save(f"t{i % 3}/agent-{i:03d}", {"i": i})
        await backup(src, tmp_path / "b.skb", key)
    assert not _threads()
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        assert (await dst.load("t2/agent-059")).data == {"i": 59}
