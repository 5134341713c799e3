"""Faults of the store file's read-ahead of a page backup (``sqlite_prefetch``, a second
read of the change "backupread"): a reader thread that cannot be started leaves the
backup reading as without it (its waiters go on, the snapshot closes, its connections
with it); the reader's memory is one buffer of at most ``WINDOW`` bytes, its last,
shorter request too."""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
import threading
import tracemalloc
import types
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import fds as sqlite_fds
from statekeeper.backends.sqlite import prefetch as sqlite_prefetch
from statekeeper.backends.sqlite.snapopen import open_snapshot

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


class _Unstartable(threading.Thread):
    def start(self) -> None:
        raise RuntimeError("can't start new thread")


def test_a_reader_that_cannot_start_leaves_the_backup_reading_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread to be had (the process at its limit): the plan reads as without a
    read-ahead, the heads' scan does not wait, and the snapshot closes, its read
    transactions with it (was: the plan raised, and every close raised "cannot join
    thread before it is started" with the connections left open)."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    fake = types.SimpleNamespace(**vars(threading))
    fake.Thread = _Unstartable
    monkeypatch.setattr(sqlite_prefetch, "threading", fake)
    with closing(sqlite3.connect(db)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT INTO sk_events VALUES (-2, x'00')")
        writer.commit()
        snap = open_snapshot(str(db), 5.0)
        assert snap is not None
        try:
            snap.plan()
            assert not snap._prefetch.started
            snap._prefetch.wait(snap.size)  # (returns: nothing to wait for)
            assert sum(len(piece) for piece in snap.chunks(64 << 10)) == snap.size
        finally:
            snap.close()
        with pytest.raises(sqlite3.ProgrammingError):
            snap.conn.execute("SELECT 1")
        # no read transaction of the snapshot left: a checkpoint empties the WAL
        writer.execute("INSERT INTO sk_events VALUES (-1, x'00')")
        writer.commit()
        busy, _, _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0


def test_the_reader_holds_one_buffer_its_last_shorter_request_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of one and a half windows: the reader's allocations peak at one window
    (was: its last request read into a copy of the buffer's start, a second buffer)."""
    window = 1 << 20
    monkeypatch.setattr(sqlite_prefetch, "WINDOW", window)
    monkeypatch.setattr(sqlite_prefetch, "SINK", None)  # (read into a buffer, not sent)
    monkeypatch.setattr(sqlite_prefetch, "cached", lambda fd, offset, length: False)
    path = tmp_path / "f"
    path.write_bytes(os.urandom(window + window // 2))
    fd = os.open(path, os.O_RDONLY)
    read: list[Any] = []
    real = os.preadv

    def noted(fd: int, buffers: list[Any], offset: int) -> int:
        read.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", noted)
    try:
        ahead = sqlite_prefetch.Prefetch(fd, window + window // 2)
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            ahead.start()
            ahead.wait(ahead.size)
            ahead.stop()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        os.close(fd)
    assert read == [0, window]
    assert window <= peak < window + window // 4


def test_without_cachestat_a_file_in_the_page_cache_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel without ``cachestat`` (before Linux 6.5, or the call refused: ENOSYS
    here): a file whose pages are all in the page cache is still known to be, and a
    snapshot's plan starts no reader (was: every warm backup there read the whole file
    before its plan: 1.09x the wall of the code before, docs/benchmarks.md
    "readbackup")."""
    monkeypatch.setattr(sqlite_prefetch, "_CACHESTAT", -1)  # (syscall -1: ENOSYS)
    monkeypatch.setattr(sqlite_prefetch, "_stat", [])
    db = tmp_path / "s.db"
    _store(db)
    with closing(sqlite3.connect(db)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT INTO sk_events VALUES (-2, x'00')")
        writer.commit()
        fd = os.open(db, os.O_RDONLY)
        try:
            os.pread(fd, db.stat().st_size, 0)
            assert sqlite_prefetch.cached(fd, 0, db.stat().st_size)
        finally:
            os.close(fd)
        snap = open_snapshot(str(db), 5.0)
        assert snap is not None
        try:
            snap.plan()
            assert not snap._prefetch.started
        finally:
            snap.close()


def test_without_cachestat_a_file_dropped_from_the_page_cache_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same kernel, the file's pages dropped (on a disk: the tests' own folder may
    be a tmpfs): not cached, read in by the plan's reader."""
    monkeypatch.setattr(sqlite_prefetch, "_CACHESTAT", -1)
    monkeypatch.setattr(sqlite_prefetch, "_stat", [])
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as where:
        db = Path(where) / "s.db"
        _store(db)
        with closing(sqlite3.connect(db)) as writer:
            writer.execute("INSERT INTO sk_events VALUES (-2, x'00')")
            writer.commit()
            fd = os.open(db, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if sqlite_prefetch.cached(fd, 0, db.stat().st_size):
                    pytest.skip("this file system keeps the file's pages (tmpfs?)")
            finally:
                os.close(fd)
            snap = open_snapshot(str(db), 5.0)
            assert snap is not None
            try:
                snap.plan()
                assert snap._prefetch.started
            finally:
                snap.close()


def _opened(db: Path) -> Any:
    with closing(sqlite3.connect(db)) as writer:  # (keeps the WAL index)
        writer.execute("INSERT OR REPLACE INTO sk_events VALUES (-2, x'00')")
        writer.commit()
        return open_snapshot(str(db), 5.0)


def test_a_snapshot_that_fails_to_open_gives_its_descriptors_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead's descriptor not to be had (EMFILE): the open fails with it, and
    the descriptor of the pages' taken before is given back (was: left out for good,
    never closed nor reused)."""
    db = tmp_path / "s.db"
    _store(db)
    real = sqlite_fds.take
    taken: list[int] = []

    def take(path: str) -> int:
        if taken:
            raise OSError(errno.EMFILE, "Too many open files")
        taken.append(real(path))
        return taken[-1]

    monkeypatch.setattr(sqlite_fds, "take", take)
    with pytest.raises(OSError, match="Too many"):
        _opened(db)
    assert len(taken) == 1 and taken[0] not in sqlite_fds._out


def test_no_descriptor_is_taken_for_a_read_ahead_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nothing can be read ahead (no ``MemAvailable``: not Linux) the snapshot
    takes one descriptor of the store file, not two (where the process cannot tell
    which files its connections hold, each is closed after: a close drops every lock
    the process holds on the file)."""
    db = tmp_path / "s.db"
    _store(db)
    monkeypatch.setattr(sqlite_prefetch, "available_memory", lambda: None)
    real = sqlite_fds.take
    taken: list[int] = []

    def take(path: str) -> int:
        taken.append(real(path))
        return taken[-1]

    monkeypatch.setattr(sqlite_fds, "take", take)
    snap = _opened(db)
    assert snap is not None
    try:
        snap.plan()
        assert not snap._prefetch.started
        assert sum(len(piece) for piece in snap.chunks(64 << 10)) == snap.size
    finally:
        snap.close()
    assert len(taken) == 1
