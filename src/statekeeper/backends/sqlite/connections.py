"""The connections of :class:`~.backend.SQLiteBackend`: the writer's lock and its
write transactions (``BEGIN IMMEDIATE`` waiting for a busy file, giving up on a
stalled one), the checks that the file and its WAL are still the ones opened, the
per-thread read connections and reads on the idle writer, and a write run inline or
on the writer thread."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from ...errors import ReadOnlyStore, StatekeeperError, StoreClosed, StoreLocked, StoreLost
from .base import translated as _translated
from .engine import SQLiteEngine, _Executes
from .fileid import file_id as _file_id


class _Held:
    """A thread's reader connection, in the backend's thread-local storage: collected
    when the thread ends, which hands the connection back (see ``_reader``). ``cursor``:
    the thread's kept cursor on it, for a read that fetches its rows at once
    (``_read_cursor``)."""

    __slots__ = ("__weakref__", "conn", "cursor")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.cursor = conn.cursor()


#: a thread's reads made on the idle writer connection before it opens its own reader
#: (SQLiteBackend._rows): a store that writes and reads back little (the key guard's
#: reads before the first write, a fresh process's first load) opens none; a thread that
#: goes on reading opens its reader after these, its reads then costing what they did
WRITER_READS = 8


class _Local(threading.local):
    """The backend's per-thread state. Class-level defaults: a thread that never set
    one reads the default, not a ``getattr`` default after an ``AttributeError`` made
    and dropped (~3k instructions: a read of a thread whose reads run on the idle
    writer connection has no reader, ``held``, every time)."""

    #: the thread's reader connection (see ``_reader``), None until it has one
    held: _Held | None = None
    #: True while the thread runs a write inline (on the event loop)
    inline = False
    #: reads the thread made on the idle writer connection (see ``SQLiteBackend._rows``)
    writer_reads = 0


def _hand_back(backend: weakref.ref[SQLiteConnections], conn: sqlite3.Connection) -> None:
    found = backend()
    if found is not None:
        found._idle_reader(conn)


_SLICE = 0.1  # seconds: the longest pause between two tries for the write lock (see _begin)


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


class _Busy(StatekeeperError):
    """Inline ``BEGIN IMMEDIATE`` found the write lock taken: retry on the writer thread.

    Internal (never leaves this module); a StatekeeperError like every class we define."""


class SQLiteConnections(SQLiteEngine):
    """The writer's lock and transactions, and the per-thread readers."""

    @contextlib.contextmanager
    def _write_transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One write transaction: :meth:`_begin`, the block, ``COMMIT``; on any error
        (the commit's own included) ``ROLLBACK`` if a transaction is still open, and
        the error goes on (one implementation for every write op)."""
        self._begin(conn)
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _writing(self, agent_id: str = "*") -> Iterator[sqlite3.Connection]:
        """The writer connection inside one :meth:`_write_transaction`, sqlite3's errors
        typed by :func:`_translated` (naming ``agent_id``): every write op but the
        appends, which answer a constraint that fired themselves."""
        conn = self._writer
        assert conn is not None
        with _translated(self.path, agent_id), self._write_transaction(conn):
            yield conn

    def _moved(self) -> bool:
        """The store's path no longer names the file the writer opened: deleted,
        renamed, or another file moved over it while this process had it open."""
        return _file_id(self.path) != self._file_id or (
            self._wal_id is not None and _file_id(self._wal_path) != self._wal_id
        )

    def _wal_moved(self) -> bool:
        """The WAL at ``path-wal`` is not the one the writer opened (once it has)."""
        return self._wal_id is not None and _file_id(self._wal_path) != self._wal_id

    def _check_file(self) -> None:
        """:class:`StoreLost` when :meth:`_moved`: SQLite in WAL mode goes on writing
        to the file it opened, so every save after the file was deleted, renamed or
        replaced was acknowledged and kept nowhere (or in another store's place)."""
        if _file_id(self.path) != self._file_id:
            self._empty_wal()
            raise StoreLost(
                self.path,
                "the file this process opened was deleted, renamed or replaced by another"
                " file while open (writes would go to a file no longer at this path);"
                " nothing was written",
            )
        if self._wal_moved():
            raise StoreLost(
                self.path,
                f"its write-ahead log {self.path}-wal was deleted or replaced while open"
                " (commits would go to a log no longer at that path, lost at a crash);"
                " nothing was written — saves made before it was deleted and not yet"
                " checkpointed are in the deleted log: close this store cleanly (its close"
                " checkpoints them into the file) before any other process opens it",
            )

    def _empty_wal(self) -> None:
        """After the store file left its path: checkpoint the WAL — still at
        ``path-wal``, named after a path that is no longer this store's — into the
        file this process opened, and truncate it, so that whatever file is next at
        the path (the one moved over it, or a new store made there) does not take
        this store's pages in as its own when it opens (SQLite applies any WAL beside
        a file, and has no way to tell whose it is; a crash before this store's close
        left it there). A checkpoint is right for every connection to this file.
        Skipped when the WAL at the path is no longer the one opened; the WAL stays
        when the checkpoint cannot finish (a reader of it: no error). Not fixable from
        here: a process that opened the file now at the path before this write shares
        this WAL by name — its reads already mixed the two stores, and its commits in
        the WAL go into this store's file with the checkpoint, as they would at this
        store's close (which checkpoints and deletes the WAL: sqlite3WalClose)."""
        conn = self._writer
        if conn is None or conn.in_transaction:
            return
        if self._wal_moved():
            return
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _begin(self, conn: _Executes) -> None:
        """``BEGIN IMMEDIATE``: take the file's write lock, waiting while its holder
        makes progress (commits), and giving up with :class:`StoreLocked` when the
        holder stalls for ``stall_timeout`` or the wait exceeds ``busy_timeout``.

        Inline (on the event loop), a lock held by another connection raises
        :class:`_Busy` at once instead — nothing has been done yet, and the write goes
        to the writer thread, which waits here (the writer connection's own busy
        timeout is 0 once open: every wait is this loop's, in slices).
        """
        self._check_file()
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            if self._local.inline:
                raise _Busy from exc
        start = progress = time.monotonic()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        pause = 0.001
        while True:
            time.sleep(pause)
            pause = min(pause * 2, _SLICE)
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
            now = time.monotonic()
            current = conn.execute("PRAGMA data_version").fetchone()[0]
            if current != version:  # someone committed: a busy file, not a stalled one
                version, progress = current, now
            elif now - progress >= self.stall_timeout:
                raise StoreLocked(
                    self.path,
                    now - start,
                    f"the connection holding it has committed nothing for "
                    f"{now - progress:.1f} s (a process frozen or stuck inside a write "
                    "transaction?); nothing was written",
                )
            if now - start >= self.busy_timeout:
                raise StoreLocked(
                    self.path,
                    now - start,
                    f"other writers kept it busy for the whole busy_timeout "
                    f"({self.busy_timeout:g} s); nothing was written",
                )

    def _reader(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        held: _Held | None = self._local.held
        if held is not None:
            return held.conn
        # A thread's connection goes back to the pool when the thread ends (its
        # thread-local holder is collected): a sync LangGraph graph reads from a new
        # executor thread at every invoke, and each of them opened a connection kept
        # until the store closed (200 invokes: 201 connections, 400 descriptors)
        with self._readers_lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            with _translated(self.path):
                conn = self._connect()
                conn.execute("PRAGMA query_only = 1")
            with self._readers_lock:
                self._readers.append(conn)
        held = _Held(conn)
        # (the backend by weak reference: a registered finalizer must not keep it alive)
        weakref.finalize(held, _hand_back, weakref.ref(self), conn)
        self._local.held = held
        return conn

    def _read_cursor(self) -> sqlite3.Cursor:
        """The calling thread's kept cursor on its read connection (``_reader``): no
        cursor object made per statement (~1.6k instructions of a cold load's read,
        docs/benchmarks.md "cold0"). Only for a statement whose rows are fetched before
        anything else runs on the thread (a second ``execute`` resets the first)."""
        held: _Held | None = self._local.held
        if held is None or self._closed:
            self._reader()  # (raises when closed; else takes the thread's connection)
            held = self._local.held
            assert held is not None
        return held.cursor

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """The rows of one read statement, on the thread's kept cursor; by a thread that
        has no read connection yet, for its first ``WRITER_READS`` reads, on the writer
        connection when it is idle (its lock free, no transaction open on it, no
        checkpoint queued), else on the thread's reader, opened now. The writer's
        schema is parsed at open, so a store that writes and does not read back — the
        first write reads the key guard's marker and newest heads, a new agent's save
        on a reopened store its head — opens no read connection: its ``connect`` and
        its parse of the schema were ~0.6 M instructions of a fresh store's first save
        (docs/benchmarks.md, "savecpu2"); a thread that goes on reading opens its own
        (a read on the writer costs its lock, ~2.6k instructions more a cold load).
        One statement outside a transaction reads the latest commit on either
        connection; the writer's lock is held until its rows are fetched, and never
        waited for (a busy writer sends the read to the reader, as does SQLite's rare
        busy answer to a read: the writer's own busy timeout is 0)."""
        local = self._local
        held = local.held
        if held is not None and not self._closed:
            return held.cursor.execute(sql, args).fetchall()
        if (
            local.writer_reads < WRITER_READS
            and not self._closed
            and not self._checkpoint_due
            and self._writer_busy.acquire(False)
        ):
            try:
                conn = self._writer
                if conn is not None and not conn.in_transaction:
                    local.writer_reads += 1
                    try:
                        return self._writer_reads.execute(sql, args).fetchall()
                    except sqlite3.OperationalError as exc:
                        if not _busy(exc):
                            raise
            finally:
                self._writer_busy.release()
        return self._read_cursor().execute(sql, args).fetchall()

    def _as_created(self) -> bool:
        """True while the file this backend's open created (:attr:`opened_new`) still
        holds what the open found there, no store-level marker and no agent: nothing
        committed to it since, by this backend's writer (its ``total_changes``, every
        row its statements changed) nor by any other connection (the writer's
        ``PRAGMA data_version``, read now). Then a read of the markers or of the newest
        agents — the key check before a new store's first write — is answered without
        its statement (two statements prepared and run: ~0.12 ms of the first save,
        docs/benchmarks.md "perf-normal"). False, and the read made as before, once
        anything was committed, or when the writer is busy or in a transaction."""
        empty = self._empty_at_open
        if empty is None or self._closed or not self._writer_busy.acquire(False):
            return False
        try:
            conn = self._writer
            if conn is None or conn.in_transaction:
                return False
            if conn.total_changes == empty[1]:
                try:
                    rows = self._writer_reads.execute("PRAGMA data_version").fetchall()
                except sqlite3.Error:
                    return False  # (a busy answer: the read is made as before)
                if rows[0][0] == empty[0]:
                    return True
            self._empty_at_open = None  # something was committed: never again
            return False
        finally:
            self._writer_busy.release()

    def _idle_reader(self, conn: sqlite3.Connection) -> None:
        with self._readers_lock:
            if not self._closed:
                self._idle.append(conn)

    async def _write(self, fn: Any, *args: Any, inline: bool = True) -> Any:
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        if inline and self.inline_writes:
            # one pass of the loop first: a loop of writes never starves other tasks
            await asyncio.sleep(0)
            # A checkpoint queued on the writer thread goes first: writes queue behind it
            # there (FIFO) instead of winning the lock inline again and again, which on a
            # busy machine let the WAL grow without bound.
            if not self._checkpoint_due and self._writer_busy.acquire(blocking=False):
                # The writer is idle: run the transaction here, no thread hop. It
                # blocks the loop for the transaction only — never for a lock another
                # connection holds (_begin raises _Busy instead) nor for a checkpoint
                # (those are queued on the writer thread).
                local = self._local
                local.inline = True
                try:
                    if self._closed:  # (closed during the pass: the writer is gone)
                        raise StoreClosed(f"sqlite backend {self.path} is closed")
                    return fn(*args)
                except _Busy:
                    pass  # nothing was written: wait for the lock on the writer thread
                finally:
                    local.inline = False
                    self._writer_busy.release()
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer_pool, self._locked, fn, *args)

    def _locked(self, fn: Any, *args: Any) -> Any:
        with self._writer_busy:
            return fn(*args)
