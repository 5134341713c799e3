"""SQLite backend: the embedded default. One file, WAL, many readers, one writer.

* One write connection. A write runs inline, on the caller's thread, when that
  connection is idle and the write lock is free (``inline_writes``, the default),
  else on one dedicated writer thread; each append is one ``BEGIN IMMEDIATE`` …
  ``COMMIT`` (or, through :meth:`SQLiteBackend.append_batch`, many appends share one
  commit — the store's ``group`` durability mode uses that; and the store's common
  save, a lone append of an existing agent, is one statement in autocommit:
  ``_SAVE_NEXT``). WAL checkpoints run on the writer thread, never inside a commit.
* Compare-and-append: the head is checked and the rows written inside the same
  write transaction, and ``PRIMARY KEY(agent_id, seq)`` backs it up, so two
  processes writing the same file can never both win.
* Reads use a per-thread read connection and run inline: WAL readers never wait for
  the writer, and a point read costs microseconds (:mod:`.reads`).
* ``synchronous`` is ``FULL`` by default (a committed append survives power loss);
  ``NORMAL`` survives a process crash but may lose the last commits on power loss.
* Leases live in ``sk_leases`` (one row per agent, never deleted, so a fencing token
  never goes back); a fenced append checks the lease row inside its own ``BEGIN
  IMMEDIATE`` transaction, so the token check and the append are one atomic step
  (:mod:`.leases`). Expiry is measured on ``clock`` — the wall clock of the
  process doing the write (SQLite has no server; every process sharing the file runs
  on the same machine and so reads the same system clock). A clock step moves
  expiries, but never lets a stale token write: tokens, not clocks, decide writes.
* SQLite has one write lock per file. A write transaction is one short, bounded
  unit (one append, one batch of at most the group committer's size, one lease
  operation — never user code), and a writer waiting for the lock watches the file:
  while other connections commit, it keeps waiting (up to ``busy_timeout``); when the
  holder commits nothing for ``stall_timeout`` seconds (a process frozen or stuck
  inside its transaction), the wait ends with :class:`~statekeeper.errors.StoreLocked`.
* A new file is created whole (schema written to a temporary file, then linked into
  place), so an existing file that is empty, not SQLite, or lacks statekeeper's tables
  is never a store in the making: it is refused with
  :class:`~statekeeper.errors.NotAStore` and left untouched.

Where things live: :class:`SQLiteBackend` (here: its settings, construction and
close) is assembled from parts, each a mixin with one job — the file opened or
created (:mod:`.opening`) and its schema checked and upgraded (:mod:`.schema`); the
connections, the writer's lock and its transactions (:mod:`.connections`); WAL
checkpoints and growth (:mod:`.checkpoints`); the appends (:mod:`.appends`), the
changes and snapshots written beside them (:mod:`.changes`), the lone append as one
statement (:mod:`.lone`) and the commit queue that groups a loop's appends
(:mod:`.commits`); the statements they run are in :mod:`.statements`, the running
event loop is found by :mod:`.running`, and what the parts declare of each other is
in :mod:`.engine`. The reads (:mod:`.reads`), leases (:mod:`.leases`) and maintenance
(:mod:`.admin`) are parts on :class:`~.base.SQLitePart`; the package's other modules
(the feed, file inspection, exports, page images) are named in its ``__init__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ...errors import ConfigurationError, ReadOnlyStore
from ..base import Capability
from . import fds as sqlite_fds
from . import feed as sqlite_feed
from . import wal as sqlite_wal
from .admin import SQLiteAdmin
from .appends import SQLiteAppends
from .base import Synchronous
from .changes import SQLiteChanges
from .checkpoints import CALIBRATE_PAGES, SQLiteCheckpoints
from .commits import SQLiteCommitQueue
from .connections import SQLiteConnections, _Local
from .engine import _Outcome, _Queued
from .files import require_store_file
from .leases import SQLiteLeases
from .lone import SQLiteLoneAppends
from .opening import PAGE_SIZE, SQLiteOpening, _make_folder
from .reads import SQLiteReads
from .schema import SCHEMA_VERSION, SQLiteSchema, _newer

__all__ = ["SQLiteBackend"]


class SQLiteBackend(
    SQLiteOpening,
    SQLiteSchema,
    SQLiteConnections,
    SQLiteCheckpoints,
    SQLiteAppends,
    SQLiteChanges,
    SQLiteLoneAppends,
    SQLiteCommitQueue,
    SQLiteReads,
    SQLiteLeases,
    SQLiteAdmin,
):
    """Streams and snapshots in one SQLite file (``sqlite:///path/to/file.db``).

    Args:
        path: database file (created with its folder if missing), or ``":memory:"``
            is refused — use :class:`~statekeeper.backends.memory.MemoryBackend`.
        synchronous: SQLite's ``synchronous`` pragma for the writer.
        busy_timeout: the longest a writer waits for another process's write lock
            while that process keeps committing (a busy file).
        stall_timeout: how long a writer waits for a lock holder that commits
            nothing (frozen or stuck inside a write transaction) before it raises
            :class:`~statekeeper.errors.StoreLocked`.
        clock: the clock lease expiry is measured on (seconds since the epoch); all
            processes sharing the file should use the same one (the default,
            ``time.time``, is the machine's wall clock).
        inline_writes: run a lone write on the calling thread (the event loop) when
            the writer is idle (the default), instead of handing it to the writer
            thread: no thread hop and no wake-up, so less latency and CPU per write.
            Every append first yields to the loop once, and the appends made in one
            pass of the loop share one commit (several: on the writer thread). The
            loop is blocked for a lone transaction only (with ``synchronous=FULL``,
            that includes the commit's ``fsync``): a write lock held by another
            connection sends the write to the writer thread instead of waiting on the
            loop, and WAL checkpoints run on the writer thread, never inside a
            commit. ``False``: every write on the writer thread (the loop never waits
            for an ``fsync``).
        readonly: open the file for reading only (SQLite ``mode=ro``): nothing is ever
            created, converted or written, every write raises
            :class:`~statekeeper.errors.ReadOnlyStore`, and a file that is not a
            statekeeper store (missing, empty, another application's database) raises
            :class:`~statekeeper.errors.NotAStore` at construction.

    A file this backend creates carries statekeeper's ownership marker
    (``PRAGMA application_id``, see :mod:`~statekeeper.backends.sqlite.files`); a file
    it did not create never gets it.
    """

    name = "sqlite"
    supports_leases = True
    capabilities = frozenset(
        {
            Capability.LEASES,
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.DROP_ALL,
            Capability.MIGRATIONS,
            Capability.PRUNE,
            Capability.BASE_IMPORT,
            Capability.FEED,
            Capability.LEASE_LIST,
            Capability.KEY_EXPIRY,
            Capability.KEY_RENAME,
        }
    )
    compares_head_tag = True
    feed_poll_interval = sqlite_feed.FEED_POLL

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        inline_writes: bool = True,
        clock: Callable[[], float] = time.time,
        stall_timeout: float = 2.0,
        readonly: bool = False,
    ) -> None:
        path = os.fspath(path)
        if path in ("", ":memory:"):
            raise ConfigurationError("SQLiteBackend needs a file path; use memory:// instead")
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(f"unknown synchronous mode {synchronous!r}")
        for name, value in (("busy_timeout", busy_timeout), ("stall_timeout", stall_timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds")
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.stall_timeout = stall_timeout
        self.clock = clock
        self.readonly = readonly
        if readonly:
            info = require_store_file(path)  # reads the header and tables only
            # a file a newer statekeeper migrated is refused read-only as it is for
            # writing: its rows may mean what this version cannot know (was: read as
            # if of this version, whatever the newer one changed)
            if info.detail.isdigit() and int(info.detail) > SCHEMA_VERSION:
                raise _newer(self.path, info.detail)
        else:
            _make_folder(path)
        self._closed = False
        self._local = _Local()
        self._readers: list[sqlite3.Connection] = []
        #: reader connections whose thread ended, for the next thread that reads
        self._idle: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sk-sqlite-w")
        #: runs the COMMIT of a batch the event loop wrote (see _flush); never queues:
        #: one such batch at a time, it holds _writer_busy from BEGIN to COMMIT
        self._commit_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sk-sqlite-c")
        self._writer: sqlite3.Connection | None = None
        self._save_next = False  # (set when the writer opens: _prepare_save_next)
        self.inline_writes = inline_writes
        #: concurrent appends share commits through the commit queue (see _join_commit)
        self.groups_appends = inline_writes and not readonly
        #: transactions of appends committed (one per batch)
        self.append_commits = 0
        #: called on the event loop with the number of appends of each commit of the
        #: commit queue (the observability module counts shared commits with it)
        self.commit_listeners: list[Callable[[int], None]] = []
        self._wal_pages = 0.0
        #: WAL frames written per estimated page, measured by each checkpoint (the
        #: estimate of :func:`_pages` is rough: 3 KB payloads write ~1.7 frames a page)
        self._wal_scale = 1.0
        #: 3 * _wal_scale: the estimate of a lone append whose payload is under
        #: _SMALL_PAYLOAD bytes (3 pages: see _pages), kept with the scale so that
        #: commit_next adds it without an int shift and a mixed multiplication
        self._wal_small = 3.0
        self._estimated = 0.0  # estimated pages at the last queued checkpoint
        #: when the WAL file is grown ahead (_grow_wal): where every commit syncs it
        self._growth = sqlite_wal.Growth(synchronous in ("FULL", "EXTRA") and not readonly)
        #: the count of WAL pages at which :meth:`_wrote` next checkpoints:
        #: CALIBRATE_PAGES (the estimate checked against the WAL's frames:
        #: :meth:`_calibrate`), then CHECKPOINT_PAGES
        self._checkpoint_at: float = CALIBRATE_PAGES
        #: the count of WAL pages at which :meth:`_wrote` next acts: the smaller of
        #: _checkpoint_at and the WAL's next growth step
        self._wal_limit: float = min(CALIBRATE_PAGES, self._growth.next_at)
        self._wal_frames_at_open = 0  # frames the WAL held when the writer opened
        #: (data_version, total_changes) of the writer connection when the file its
        #: open created was found without a marker and an agent; None otherwise, and
        #: from the first commit on (see _as_created)
        self._empty_at_open: tuple[int, int] | None = None
        self._page_size = PAGE_SIZE  # the file's (read when the writer opens)
        #: a checkpoint (or the WAL's growth) is queued on the writer thread; inline
        #: writes wait behind it
        self._checkpoint_due = False
        self._queues: dict[
            asyncio.AbstractEventLoop,
            list[tuple[_Queued, asyncio.Future[_Outcome]]],
        ] = {}
        #: the loops with a batch of their queue on the writer thread
        self._in_flight: set[asyncio.AbstractEventLoop] = set()
        #: loop time by which a lone append polls its loop (PASS_EVERY; a pass if needed)
        self._pass_due = 0.0
        # held while the writer connection is in use, by the writer thread or inline
        self._writer_busy = threading.Lock()
        # Create the schema synchronously so a failure (not a database, no permission)
        # surfaces at construction: on the constructing thread, which waited for the
        # writer thread to do it anyway. The writer thread is started by the first
        # work handed to it (a write, a checkpoint): a store that only reads starts
        # none (a new LangGraph saver's cold read: the thread's start was ~14 ms of
        # wall time at open on a loaded machine, its pool ~0.3 M instructions).
        # (where descriptors cannot be listed, the file then counts as held: fds.py)
        self._counted_as = sqlite_fds.attach(path)  # (absolute: a chdir meanwhile)
        if readonly:
            return
        try:
            self._open_writer()
        except BaseException:
            sqlite_fds.detach(self._counted_as)
            self._writer_pool.shutdown(wait=False)
            self._commit_pool.shutdown(wait=False)
            raise

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    async def initialize(self) -> None:
        """The schema is created when the backend is constructed: nothing left to do."""
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")

    appends_together = True
    guards_from_base = True  # (_from_base_sync: the guard's check in its transaction)
    guards_renames = True  # (_rename_keys_sync: the same)
    changes_alone_together = True  # (a conditional delete alone: delete_agent_at)
    changes_leases_and_rewrites = True
    prunes_together_at_head = True
    replaces_snapshots = True
    checks_absence_together = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def _close_writer() -> None:
            with self._writer_busy:  # after a write running inline on another thread
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None

        if self._writer_pool._threads:  # after the work queued on the writer thread
            try:
                self._writer_pool.submit(_close_writer).result()
            except RuntimeError:  # an atexit close: Python's thread pools stopped
                _close_writer()
        else:  # nothing was ever handed to it: no thread started to close a connection
            _close_writer()
        self._writer_pool.shutdown(wait=True)
        self._commit_pool.shutdown(wait=True)

        with self._readers_lock:
            for conn in self._readers:
                with contextlib.suppress(Exception):
                    conn.close()
            self._readers.clear()
            self._idle.clear()
        # a page backup's descriptors kept while this store's connections held the
        # file: closed now if no other store of this process holds it (only this
        # store's file looked at: a close costs no /proc/self/fd look otherwise)
        sqlite_fds.detach(self._counted_as)
