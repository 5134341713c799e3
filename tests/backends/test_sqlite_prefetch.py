"""A page backup's snapshot reads the store file in from the disk, in file order, in
large requests (``sqlite_prefetch.Prefetch``, docs/benchmarks.md "backupread"): one
reader, on a descriptor of its own (from ``fds.take``: never closed under SQLite's
locks), ``WINDOW`` bytes a request into one scratch buffer (its memory), started by the
plan once its own few pages are read; the chunks wait for it to pass them
("backupfeed"), the heads' scan for its end; a file already in the page cache is not
read; a file dropped from it is in it once the reader is done; a file larger than half
the available memory is not read ahead and nothing waits; a close or a failed plan
stops it and wakes its waiters; a backup of a store read so restores."""

from __future__ import annotations

import ctypes
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.pages import PageSnapshot
from statekeeper.backends.sqlite.snapopen import open_snapshot
from statekeeper.governance.backup import BackupKey, backup, restore

from ..governance._point_in_time import keyring

pytestmark = pytest.mark.skipif(
    not hasattr(os, "preadv") or not os.path.exists("/proc/meminfo"),
    reason="no preadv or /proc/meminfo (Linux): nothing is read ahead",
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


class _Spy:
    """``os.preadv``, ``os.sendfile`` and ``os.pread`` noted in order, once the
    snapshot is open (its read-ahead descriptor known: :attr:`fd`): the reader's
    requests (a window sent to ``/dev/null`` or read into its buffer) and every page
    read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fd = -1
        self.said: list[tuple[Any, ...]] = []
        self.buffers: list[Any] = []
        real_preadv, real_pread, real_send = os.preadv, os.pread, os.sendfile

        def preadv(fd: int, buffers: list[Any], offset: int, *rest: Any) -> int:
            if fd == self.fd:
                self.said.append(("read", offset, sum(len(b) for b in buffers)))
                self.buffers.append(buffers)
            return real_preadv(fd, buffers, offset, *rest)

        def sendfile(out: int, fd: int, offset: int, count: int) -> int:
            got = real_send(out, fd, offset, count)
            if fd == self.fd:
                self.said.append(("read", offset, got))
            return got

        monkeypatch.setattr(os, "sendfile", sendfile)

        def pread(fd: int, size: int, offset: int) -> bytes:
            if self.fd >= 0:  # (the snapshot open)
                self.said.append(("page", fd, offset))
            return real_pread(fd, size, offset)

        monkeypatch.setattr(os, "preadv", preadv)
        monkeypatch.setattr(os, "pread", pread)


@pytest.mark.parametrize("sink", ["/dev/null", None])
def test_the_file_is_read_first_in_order_in_windows_on_its_own_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str | None
) -> None:
    """Every byte of the image from 0, ``WINDOW`` bytes a request, sent to
    ``/dev/null`` (Linux: never copied out of the page cache) or into one buffer, on a
    descriptor that is not the one the pages are read from; the plan's pages
    read before the reader's first request (docs/benchmarks.md, "backupfeed": read
    after, ahead of it, they would break its requests); the thread gone after close.
    (The file is taken as not cached: a test's file is, having just been written.)"""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 64 << 10)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    monkeypatch.setattr(sqlite_prefetch, "SINK", sink)
    spy = _Spy(monkeypatch)
    with snapshot(db) as snap:
        spy.fd = snap._prefetch._fd
        assert spy.fd != snap._db
        snap.plan()
        size = snap.size
        assert sum(len(piece) for piece in snap.chunks(64 << 10)) == size
    assert size == db.stat().st_size > 4 * (64 << 10)
    reads = [s for s in spy.said if s[0] == "read"]
    assert reads == [("read", at, min(64 << 10, size - at)) for at in range(0, size, 64 << 10)]
    kinds = [s[0] for s in spy.said]
    assert "page" in kinds[: kinds.index("read")]  # (the plan's, before the reader's)
    assert bool(spy.buffers) == (sink is None)  # (sent, nothing copied: no buffer)
    assert all(len(b) == 1 and len(b[0]) <= 64 << 10 for b in spy.buffers)
    assert len({id(b[0]) for b in spy.buffers[:-1]}) == (sink is None)  # (one: a last, shorter)
    assert not _threads()


def test_the_heads_scan_waits_for_the_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heads' scan, started before the plan (as a backup starts it, on its own
    thread), reads nothing before the file's last request returned."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 64 << 10)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    spy = _Spy(monkeypatch)
    with snapshot(db) as snap:
        spy.fd = snap._prefetch._fd
        conn = snap.conn

        class Noted:
            def execute(self, *args: Any) -> Any:
                spy.said.append(("heads",))
                return conn.execute(*args)

        snap.conn = Noted()  # type: ignore[assignment]
        heads = threading.Thread(target=snap.heads)
        heads.start()
        snap.plan()
        heads.join(30)
        assert not heads.is_alive()
        snap.conn = conn
    kinds = [s[0] for s in spy.said]
    assert "heads" in kinds and "read" in kinds
    last_read = len(kinds) - 1 - kinds[::-1].index("read")
    assert kinds.index("heads") > last_read


def test_a_file_in_the_page_cache_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file just written (every page of it in the page cache): no request, no
    thread, and the plan reads at once."""
    db = tmp_path / "s.db"
    _store(db)
    fd = os.open(db, os.O_RDONLY)
    try:
        os.pread(fd, db.stat().st_size, 0)
        if not sqlite_prefetch.cached(fd, 0, db.stat().st_size):
            pytest.skip("the kernel cannot say what is cached (cachestat: Linux 6.5)")
    finally:
        os.close(fd)
    spy = _Spy(monkeypatch)
    with snapshot(db) as snap:
        spy.fd = snap._prefetch._fd
        snap.plan()
        assert not snap._prefetch.started
    assert not [s for s in spy.said if s[0] == "read"] and not _threads()


def test_a_file_dropped_from_the_page_cache_is_in_it_once_the_reader_is_done() -> None:
    """With the store's pages dropped from the page cache, a snapshot's plan starts
    the reader, and once it is waited for every page is back in it (``mincore``),
    though no chunk was read. (On a disk: the tests' own folder may be a tmpfs, whose
    pages are never dropped.)"""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as where:
        db = Path(where) / "s.db"
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
                assert snap._prefetch.started
                snap._prefetch.wait(snap.size)
                assert _cached(db) == 1
            finally:
                snap.close()


def test_a_file_larger_than_half_the_available_memory_is_not_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _store(db, rows=200)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(sqlite_prefetch, "available_memory", lambda: 2 * db.stat().st_size - 2)
    with snapshot(db) as snap:
        spy.fd = snap._prefetch._fd
        snap.plan()  # (nothing waited for)
        assert not snap._prefetch.started
    monkeypatch.setattr(sqlite_prefetch, "available_memory", lambda: None)
    with snapshot(db) as snap:
        spy.fd = snap._prefetch._fd
        snap.plan()
        assert not snap._prefetch.started
    assert not [s for s in spy.said if s[0] == "read"] and not _threads()


@pytest.mark.parametrize("sink", ["/dev/null", None])
def test_stopping_the_reading_wakes_its_waiters_and_reads_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str | None
) -> None:
    """A stop (the snapshot's close, a failed plan) while the reader is in its first
    request: the chunks waiting for it go on, and no request follows (the descriptor
    may be given back then)."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 4096)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    monkeypatch.setattr(sqlite_prefetch, "SINK", sink)
    first, go = threading.Event(), threading.Event()
    asked: list[int] = []
    real, real_send = os.preadv, os.sendfile
    with snapshot(db) as snap:
        ahead = snap._prefetch._fd

        def slow(fd: int, buffers: list[Any], offset: int) -> int:
            if fd == ahead:
                asked.append(offset)
                first.set()
                go.wait(10)
            return real(fd, buffers, offset)

        def slow_send(out: int, fd: int, offset: int, count: int) -> int:
            if fd == ahead:
                asked.append(offset)
                first.set()
                go.wait(10)
            return real_send(out, fd, offset, count)

        monkeypatch.setattr(os, "preadv", slow)
        monkeypatch.setattr(os, "sendfile", slow_send)
        planning = threading.Thread(target=lambda: next(snap.chunks(4096)))
        planning.start()
        assert first.wait(10)
        stopping = threading.Thread(target=snap._prefetch.stop)
        stopping.start()
        planning.join(10)  # (woken by the stop, the reader still in its request)
        assert not planning.is_alive()
        go.set()
        stopping.join(10)
        assert not stopping.is_alive() and not _threads()
    assert asked == [0]


def test_a_failed_plan_stops_the_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    with snapshot(db) as snap:

        def broken() -> None:
            raise sqlite3.DatabaseError("broken")

        monkeypatch.setattr(snap, "_planned", broken)
        with pytest.raises(sqlite3.DatabaseError):
            snap.plan()
        snap._prefetch.wait(snap.size)  # (returns: nothing to wait for)
        assert not _threads()


async def test_a_backup_of_a_read_ahead_store_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", 64 << 10)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        for i in range(60):
            await src.save(f"t{i % 3}/agent-{i:03d}", {"i": i})
        await backup(src, tmp_path / "b.skb", key)
    assert not _threads()
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], key)
        assert (await dst.load("t2/agent-059")).data == {"i": 59}
