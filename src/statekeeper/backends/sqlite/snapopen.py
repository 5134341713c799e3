"""Opening a :class:`~.pages.PageSnapshot` of a live SQLite store, in a way another
thread can stop (a backup cancelled while it waits for the store's write lock).

The snapshot is taken under the store's write lock for a moment (``BEGIN IMMEDIATE``:
see :mod:`.pages`). SQLite's busy handler waits for that lock up to the busy timeout,
and ``sqlite3_interrupt`` does not cut that wait short (measured: a 10 s
``busy_timeout`` waited 10 s after an interrupt at 0.5 s): a cancelled backup then
waited for as long. So the lock is asked for with no busy handler, again and again
up to the timeout (SQLite's own handler also polls: 1 ms growing to 100 ms), and
:class:`OpeningStop` ends the wait between two asks; the statements of the readers
are interrupted (``sqlite3_interrupt``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from urllib.parse import quote

from . import wal as sqlite_wal
from .files import connect_read_only
from .pages import PageSnapshot, SnapshotStopped
from .walframes import NBACKFILL, snapshot_frames, wal_index

__all__ = ["OpeningStop", "open_snapshot"]

#: the longest pause between two asks for the write lock
_MAX_PAUSE = 0.05


class OpeningStop:
    """An :func:`open_snapshot`'s stop, from another thread: the wait for the write
    lock ends at once, the statement running is interrupted, and
    :class:`~.pages.SnapshotStopped` is raised. The connections are interrupted only
    under the lock their close takes (:meth:`ended`): never once they are closed."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self._path = ""

    def started(self, path: str, conns: list[sqlite3.Connection]) -> None:
        with self._lock:
            self._path, self._conns = path, list(conns)
        self.check()

    def ended(self) -> None:
        with self._lock:
            self._conns = []

    def check(self) -> None:
        if self._event.is_set():
            raise SnapshotStopped(f"{self._path}: the backup opening it was cancelled")

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until stopped (then :class:`SnapshotStopped`)."""
        self._event.wait(seconds)
        self.check()

    def __call__(self) -> None:
        with self._lock:
            self._event.set()
            for conn in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.interrupt()


def _write_locked(hold: sqlite3.Connection, timeout: float, stop: OpeningStop) -> None:
    """``BEGIN IMMEDIATE`` on ``hold``, waiting up to ``timeout`` for another writer's
    lock as its busy handler would, and stopping at once when ``stop`` is called."""
    hold.execute("PRAGMA busy_timeout = 0")  # (a busy handler's wait: not stoppable)
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        stop.check()
        try:
            hold.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            left = deadline - time.monotonic()
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or left <= 0:
                raise
        stop.pause(min(pause, left))
        pause = min(pause * 2, _MAX_PAUSE)


def open_snapshot(
    path: str, timeout: float, stop: OpeningStop | None = None
) -> PageSnapshot | None:
    """The store at ``path`` as a :class:`PageSnapshot`, or None: the file is not in
    WAL mode with a readable wal-index (a backup then copies its tables instead).
    ``stop`` (:class:`OpeningStop`) ends it early from another thread: the wait for
    the store's write lock (up to ``timeout``) too, by :class:`.pages.SnapshotStopped`."""
    stop = stop if stop is not None else OpeningStop()
    shm = path + "-shm"
    if not os.path.exists(shm):
        return None
    hold = sqlite3.connect(
        "file:" + quote(os.path.abspath(path)) + "?mode=rw",
        uri=True,
        timeout=timeout,
        isolation_level=None,
    )
    # two readers of the one snapshot: the heads (SQL) and the page plan (dbstat) are
    # read at the same time, on two cores (a connection runs one statement at a time)
    conns = [connect_read_only(path, timeout) for _ in range(2)]
    opened: PageSnapshot | None = None
    try:
        stop.started(path, [hold, *conns])
        conn = conns[0]
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            return None
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        for reader in conns:
            reader.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            # the heads' scan of the events through a memory map (no read() per page);
            # set before the read transaction opens (it applies from the next one)
            reader.execute(f"PRAGMA mmap_size = {os.path.getsize(path) + (64 << 20)}")
        _write_locked(hold, timeout, stop)  # no commit until the snapshot is taken
        try:
            for reader in conns:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot
            # (never an open/close of -shm: it would drop the readers' locks on it)
            index = sqlite_wal.read_shm(path, NBACKFILL + 4)
        finally:
            hold.execute("ROLLBACK")
        found = wal_index(index, page_size)
        if found is None:
            return None
        frames_seen, backfilled, salt = found
        (pages,) = conn.execute("PRAGMA page_count").fetchone()  # the snapshot's
        frames = (
            snapshot_frames(path + "-wal", page_size, frames_seen, salt)
            if frames_seen > backfilled
            else {}
        )
        opened = PageSnapshot(path, conns[0], conns[1], page_size, pages, frames)
        return opened
    finally:
        stop.ended()
        hold.close()
        if opened is None:
            for reader in conns:
                reader.close()
