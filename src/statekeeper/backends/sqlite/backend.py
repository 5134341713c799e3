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

Where things live (:class:`SQLiteBackend` is this module's engine plus its parts, each a
mixin on :class:`~.base.SQLitePart`):

* here — the connections (the writer, the per-thread readers), the write machinery
  (the writer lock, the inline/writer-thread commit queue, group batches, WAL
  checkpoints), every append, file creation and schema upgrade on open;
* :mod:`.reads` — the read statements; :mod:`.leases` — leases;
  :mod:`.admin` — maintenance (rewrites, prunes, deletes, markers, feed trims,
  exports, health); :mod:`.base` — what the parts share (the typed-error
  translation, the engine's interface);
* :mod:`.feed` — the change feed's tables and statements;
  :mod:`.files` — inspecting a file without changing it;
  :mod:`.export` / :mod:`.pages` — row exports and page images.

(Over 600 lines because what stays here is one engine behind one connection
discipline: the writer connection, its lock, the inline/writer-thread commit queue and
the checkpoint bookkeeping are shared by every append and every other write; the
parts with a seam of their own are in the modules above.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import secrets
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeAlias

from ..._files import place_unless_exists, sync_directory
from ...errors import (
    BackendError,
    ConfigurationError,
    ConflictError,
    LeaseLost,
    NotAStore,
    ReadOnlyStore,
    StatekeeperError,
    StoreClosed,
    StoreLocked,
    StoreLost,
)
from ...records import (
    AppendRequest,
    AppendResult,
    EventType,
    RawSnapshot,
    StreamChange,
)
from ..base import (
    Capability,
    KeptKeys,
    KeyedRow,
    NextRow,
    check_fence,
    check_prune_at,
    validate_from_base,
    validate_from_base_guard,
    validate_next,
    validate_request,
    validate_together,
)
from . import fds as sqlite_fds
from . import feed as sqlite_feed
from . import wal as sqlite_wal
from .admin import SQLiteAdmin
from .base import LENGTH_LIMITS, Synchronous
from .base import translated as _translated
from .fileid import file_id as _file_id
from .files import APPLICATION_ID, connect_read_only, require_store_file
from .importing import KEY_MADE, KEY_MADE_LATER
from .leases import SQLiteLeases
from .loop import nothing_waits as _nothing_waits
from .reads import SQLiteReads

__all__ = ["SQLiteBackend"]

#: 1: the first layout; 2: ``sk_agents.head_tag`` (the authenticated stream head);
#: 3: ``sk_leases`` (leases and fencing tokens); 4: ``sk_feed`` (the change feed, see
#: :mod:`.feed`); 5: ``sk_idempotency.created_at`` (when each idempotency
#: record was made, epoch seconds: what retention's ``keys_ttl`` expires)
SCHEMA_VERSION = 5


def _newer(path: str, version: object) -> ConfigurationError:
    """The error for a file of a schema newer than this statekeeper's."""
    return ConfigurationError(
        f"{path} has schema version {version}; this statekeeper reads up to "
        f"{SCHEMA_VERSION}: upgrade statekeeper"
    )


def _keys_migrated(conn: sqlite3.Connection) -> bool:
    """Whether ``sk_idempotency.created_at`` was added by the migration 4 -> 5 (its
    default 0: a process of schema 4 may write the file, see ``KEY_MADE_LATER``), not
    made with the file (no default: no process of schema 4 ever opened it)."""
    for row in conn.execute("PRAGMA table_info(sk_idempotency)"):
        if row[1] == "created_at":
            return row[4] is not None
    return False


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sk_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sk_agents (
    agent_id   TEXT PRIMARY KEY,
    head_seq   INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    head_tag   BLOB
) WITHOUT ROWID;
-- the agents by last write (the inspector's "recently written" / "idle" sorts)
CREATE INDEX IF NOT EXISTS sk_agents_written ON sk_agents (updated_at, agent_id);
CREATE TABLE IF NOT EXISTS sk_events (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS sk_snapshots (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS sk_idempotency (
    agent_id  TEXT NOT NULL,
    key       TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (agent_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sk_leases (
    agent_id   TEXT PRIMARY KEY,
    holder     TEXT,
    token      INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""


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


def _hand_back(backend: weakref.ref[SQLiteBackend], conn: sqlite3.Connection) -> None:
    found = backend()
    if found is not None:
        found._idle_reader(conn)


_SLICE = 0.1  # seconds: the longest pause between two tries for the write lock (see _begin)
#: whether the file has its feed id (made by a writable open of an older file)
_FEED_ID_SET = "SELECT 1 FROM sk_meta WHERE key = 'feed_id'"
_TABLES = frozenset(
    {"sk_meta", "sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases", "sk_feed"}
)
_HEADER = b"SQLite format 3\x00"


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(exc)


def _rw_uri(path: str) -> str:
    """A ``file:`` URI opening ``path`` read-write without creating it."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"


@contextlib.contextmanager
def _creating(path: str) -> Iterator[None]:
    """SQLite's errors while a new store file is made (in its temporary file) as
    :class:`BackendError` naming ``path``, the store asked for (was: the temporary
    file's name, gone by the time the message was read)."""
    try:
        yield
    except sqlite3.Error as exc:
        folder = os.path.dirname(os.path.abspath(path))
        raise BackendError(
            f"{path}: cannot create the store file in {folder}: {exc}; nothing was created"
        ) from exc


def _foreign_links(path: str) -> int:
    """The names ``path``'s file has, not counting the temporary name of its creation
    (``<path>.sk-new-*``, linked into place by :meth:`SQLiteBackend._create_file` and
    removed right after: a file being created is not a file with two names)."""
    st = os.stat(path)
    if st.st_nlink < 2:
        return st.st_nlink
    folder, base = os.path.split(os.path.abspath(path))
    links = st.st_nlink
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(base + ".sk-new-"):
                with contextlib.suppress(OSError):
                    other = entry.stat(follow_symlinks=False)
                    if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                        links -= 1
    return links


def _check_header(path: str) -> None:
    """Refuse an existing file that cannot be a store, before SQLite touches it."""
    try:
        # (not open/close: another store of this process may hold the file's locks)
        head = sqlite_fds.read_head(path, len(_HEADER))
    except OSError as exc:
        raise BackendError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not head:
        raise NotAStore(
            path,
            "the file is empty (0 bytes): a store truncated to nothing, or a file made by "
            "something else; refusing to make it an empty store (delete it to start anew)",
        )
    if head != _HEADER:
        raise NotAStore(path, "not a SQLite database file; it was left unchanged")
    links = _foreign_links(path)
    if links > 1:
        # SQLite names the WAL and -shm after the path opened: a process writing
        # through another name of the same file keeps another WAL, and the two
        # corrupt the file and lose each other's commits (sqlite.org/howtocorrupt.html
        # section 2.5)
        raise ConfigurationError(
            f"{path} has {links} hard links: a store file must have one name (processes"
            " opening it by different names would keep separate write-ahead logs and"
            " corrupt it); remove the other links, or copy the file, and open it again."
            " It was left unchanged"
        )


#: the page size of a file this backend creates (bytes). Every page a commit dirties is
#: one WAL frame, and SQLite checksums each frame's whole page at the commit: a lone
#: save dirties 5-7 pages (the head row, the by-last-write index, the event row, its
#: primary-key index, the feed row) with a few hundred bytes changed in each, so the
#: checksums and copies of 4 KiB pages were ~25 % of its statements' instructions.
#: Measured with benchmarks/bench_save_pages.py and bench_save_instructions.py
#: (docs/benchmarks.md, "head11"). 2048, not 1024: 1 KiB pages cost more where stores
#: are large (a cold load at 100k agents +9 % instructions against +4.5 % at 2048, at 1M
#: +5.4 % against +1.5 %; a page backup's CPU +32 % / incremental +84 % against
#: +16 % / +27 %), for twice the save gain; benchmarks/bench_pagesize.py,
#: docs/benchmarks.md "pagesize". A file keeps the page size it was created with
#: (files made with 4096 or 1024 open and work as before).
PAGE_SIZE = 2048

#: estimated WAL pages between two checkpoints (SQLite's own auto-checkpoint default)
CHECKPOINT_PAGES = 1000

#: estimated WAL pages after which a backend checks its estimate against the WAL's real
#: size, once (see SQLiteBackend._calibrate)
CALIBRATE_PAGES = 100


#: the longest a loop of lone appends goes without polling its event loop (seconds;
#: see SQLiteBackend._open_commit): the I/O and timers of other tasks wait no longer
#: (a pass of the loop is made when the poll finds one)
PASS_EVERY = 0.001

#: a batch of the commit queue is committed on the event loop itself (BEGIN to COMMIT,
#: its fsync included) when it and the loop's ready callbacks (the saves the last
#: commit woke) are at most this many: then too little could use the loop during the
#: fsync for handing the COMMIT to the commit thread to pay for its two thread hops
#: (the thread's wake-up, then the loop's: ~100-250 us quiet, milliseconds on a loaded
#: machine, against a ~230 us fsync). A few agents then settle into one group a
#: commit, made on the loop, instead of two alternating groups handed off
#: (docs/benchmarks.md, "group3"). A batch of any size is also committed on the loop
#: when nothing else of the loop is ready or waiting (``SQLiteBackend._loop_idle``:
#: 16 or 64 agents in one group, every saver waiting for this commit;
#: docs/benchmarks.md, "group3: a batch committed on the loop"); with other work
#: ready, the batch is handed off so the loop runs it during the fsync.
INLINE_BATCH = 4


class _Busy(StatekeeperError):
    """Inline ``BEGIN IMMEDIATE`` found the write lock taken: retry on the writer thread.

    Internal (never leaves this module); a StatekeeperError like every class we define."""


#: ``Future.set_result`` unbound, for :func:`_settle`'s ``map``
_set_result = asyncio.Future.set_result


def _settle(
    futures: Sequence[asyncio.Future[_Outcome]],
    outcome: Sequence[_Outcome] | BaseException,
) -> None:
    """Hand each queued append's future its result (``outcome[i]``), or the whole
    commit's failure. A future already done (its caller was cancelled) is left as it
    is: the append itself stands. (Futures and outcomes zipped: no index, no
    ``isinstance`` a future.)"""
    if isinstance(outcome, BaseException):
        for future in futures:
            if not future.done():
                future.set_exception(outcome)
        return
    assert len(futures) == len(outcome)
    try:
        # every future set by C code (``map`` of the C method, consumed by ``any``: no
        # bytecode an append); a future already done — its caller was cancelled —
        # raises InvalidStateError, a future of another class TypeError: then the
        # checked loop below settles the rest (those set here are done, skipped there)
        any(map(_set_result, futures, outcome))
        return
    except (asyncio.InvalidStateError, TypeError):
        pass
    for future, result in zip(futures, outcome, strict=True):
        if not future.done():
            future.set_result(result)


#: ``Future.cancelled`` unbound, for :func:`_any_cancelled`'s ``map``
_cancelled = asyncio.Future.cancelled


def _any_cancelled(futures: Sequence[asyncio.Future[_Outcome]]) -> bool:
    """Whether the caller of one of ``futures`` was cancelled: checked by C code (no
    bytecode a future), or a loop for futures of another class."""
    try:
        return any(map(_cancelled, futures))
    except TypeError:
        return any(f.cancelled() for f in futures)


def _outcome(
    future: asyncio.Future[list[_Outcome]],
) -> list[_Outcome] | BaseException:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()


def _start_wal(conn: sqlite3.Connection) -> None:
    """Start the empty WAL of a store file just created, with one commit that changes
    nothing (the header page rewritten as it was: ``user_version`` set to its value;
    an UPDATE to the same value writes no page). The first commit into an empty WAL writes
    the WAL's header and fdatasyncs the WAL and its directory — at ``synchronous=NORMAL``
    too, where no later commit syncs: made here, that cost is the creation's, not the
    first save's (1.2-1.4 ms of a save that takes 0.04 ms after it, the p99 of
    ``bench_hotpath.py --quick``; docs/benchmarks.md, "tail"). Skipped when another
    connection holds the write lock (that one starts the WAL then)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        conn.execute(f"PRAGMA user_version = {version}")
        _prepare_writes(conn)
        conn.execute("COMMIT")
    except sqlite3.Error:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


#: a file's data version (the writer connection's: it changes when another connection
#: commits) read with whether the file holds a store-level marker or an agent, in one
#: statement (one read of one snapshot of the file)
_EMPTY_NOW = (
    "SELECT data_version, EXISTS (SELECT 1 FROM sk_meta WHERE key LIKE 'marker:%')"
    " OR EXISTS (SELECT 1 FROM sk_agents) FROM pragma_data_version"
)


def _empty_now(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """``(data_version, total_changes)`` of the writer connection ``conn`` of a file its
    open just created, when that file holds no store-level marker and no agent (another
    process may have created it and written to it first); None when it holds one, or
    cannot be read now."""
    try:
        row = conn.execute(_EMPTY_NOW).fetchone()
    except sqlite3.Error:
        return None
    return None if row is None or row[1] else (int(row[0]), conn.total_changes)


def _prepare_writes(conn: sqlite3.Connection) -> None:
    """Compile the statements of a save into the writer connection's statement cache, in
    the transaction that starts a new file's WAL, each run so that it changes nothing:
    a create and an event row that a NOT NULL column refuses before any page is
    touched, a head update of no agent. The first create, the first update and the
    first event row of the file's first saves then run compiled statements: their
    compilation (the event row's with its feed trigger) was ~0.1 ms of a new store's
    first save, and what made each agent's second save slower than its third
    (docs/benchmarks.md, "perf-normal"). A file this process opens but did not create
    compiles them on first use, as before."""
    for sql, args in (
        (_CREATE, ("", None, 0.0, 0.0, None)),  # head_seq NOT NULL
        (_INSERT_EVENT, ("", 0, None, 0.0, None, None)),  # kind NOT NULL
        (_CLAIM_TAGGED, (0, 0.0, None, "", 0, None)),  # no agent "" (ids are not empty)
    ):
        with contextlib.suppress(sqlite3.IntegrityError):
            conn.execute(sql, args)
    # the lone append's one statement (_SAVE_NEXT): the head of no agent moved, refused
    # by its trigger — or no such view, when the writer could not make it
    with contextlib.suppress(sqlite3.IntegrityError, sqlite3.OperationalError):
        conn.execute(_SAVE_NEXT, ("", 0, 0.0, None, None, None, None))


def _pages(requests: Sequence[_Queued]) -> int:
    """Estimated WAL pages a commit of ``requests`` writes: two for the commit (head
    and index pages, shared by the requests of a batch), and per event one page plus
    one per half page of payload (a row that large fills a leaf page of its own and
    touches the table's interior pages). Measured: 3.3 frames for a lone small
    one-event append, 5.1 for one with a 3 KB payload. The backend calibrates the
    estimate against the WAL's real size at each checkpoint (``_wal_scale``)."""
    pages = 2
    for request in requests:
        if isinstance(request, tuple):  # (append_next's arguments: one event)
            pages += 1 + ((len(request[3]) + 1100) >> 11)
            continue
        for event in request.events:
            pages += 1 + ((len(event.payload) + 1100) >> 11)
    return pages


#: what runs the statements of a write: the writer connection or its append cursor
_Executes: TypeAlias = sqlite3.Connection | sqlite3.Cursor

#: the head-tag clause of the head compare-and-set (``AppendRequest.check_tag``): the
#: stored head must still be the incarnation the writer folded
_TAG_CHECK = {False: "", True: " AND head_tag IS ?"}

#: the head compare-and-set of an append without a lease, by ``check_tag`` (built once:
#: a string concatenated per append was a new key for the statement cache to hash)
_CLAIM = {
    check: "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
    " WHERE agent_id = ? AND head_seq = ?" + clause
    for check, clause in _TAG_CHECK.items()
}
_CREATE = (
    "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO NOTHING"
)
#: the head compare-and-set of a lone append (append_next's: seq and tag)
_CLAIM_TAGGED = _CLAIM[True]
_HEAD_SEQ = "SELECT head_seq FROM sk_agents WHERE agent_id = ?"
#: an append's idempotency key claimed (rowcount 0: it is there, a duplicate), the
#: range of the append that claimed it, and a claim undone (the head refused); a
#: record's ``created_at`` is its append's first event's timestamp
_CLAIM_KEY = (
    "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT(agent_id, key) DO NOTHING"
)
_KEY_RANGE = "SELECT first_seq, last_seq FROM sk_idempotency WHERE agent_id = ? AND key = ?"
_FORGET_KEY = "DELETE FROM sk_idempotency WHERE agent_id = ? AND key = ?"
_INSERT_EVENT = (
    "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum) VALUES (?, ?, ?, ?, ?, ?)"
)
#: a lone ``append_next`` row as ONE statement, in autocommit (``commit_next``): the
#: head's compare-and-set and the event row made by an ``INSTEAD OF`` trigger on a view,
#: both TEMP — objects of the writer connection alone, not of the file (its schema, its
#: other connections and every other write path are untouched). The head moves only
#: from ``seq - 1`` with the expected tag, else the trigger aborts the statement with
#: :data:`_MOVED` (nothing written); the event's ``INSERT`` fires the feed trigger as
#: before. One statement instead of ``BEGIN IMMEDIATE``, the ``UPDATE``, the
#: ``INSERT`` and ``COMMIT``: three fewer trips through pysqlite (bind, step, reset,
#: the GIL dropped and taken, SQLite's connection mutex), ~12k of a steady save's
#: ~170k instructions (docs/benchmarks.md, "perfsave")
_MOVED = "statekeeper: the head moved"
_SAVE_NEXT_SCHEMA = (
    "CREATE TEMP VIEW IF NOT EXISTS sk_next_row"
    "(agent_id, seq, ts, payload, checksum, tag, expected)"
    " AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    "CREATE TEMP TRIGGER IF NOT EXISTS sk_next_row_append INSTEAD OF INSERT ON sk_next_row"
    " BEGIN"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    f" SELECT RAISE(ABORT, '{_MOVED}') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    f" VALUES (new.agent_id, new.seq, '{EventType.PATCH}', new.ts, new.payload, new.checksum);"
    " END",
)
_SAVE_NEXT = "INSERT INTO sk_next_row VALUES (?, ?, ?, ?, ?, ?, ?)"


def _prepare_save_next(conn: sqlite3.Connection) -> bool:
    """Make :data:`_SAVE_NEXT`'s and :data:`_APPEND_NEXT`'s TEMP views and triggers on
    the writer connection ``conn`` (outside any transaction); False when they cannot be
    made (a lone append then runs its four or five statements, as every other write
    does)."""
    try:
        for sql in (*_SAVE_NEXT_SCHEMA, *_APPEND_NEXT_SCHEMA):
            conn.execute(sql)
    except sqlite3.Error:
        return False
    return True


#: a lone append of one event of any kind on an existing stream, with or without an
#: idempotency key, as ONE statement in autocommit (``SQLiteBackend._commit_statement``):
#: the LangGraph saver's checkpoints and writes (a checkpoint's key is its history
#: index), an ``append``'s event. Its TEMP trigger makes what :meth:`_append_one`
#: makes, in its order: the key claimed first (a plain ``INSERT``: a key already there
#: fails the statement with SQLite's unique-constraint error and nothing written, and
#: its range is then read back: a duplicate, as before), the head's compare-and-set
#: (seq and tag; :data:`_MOVED` when it changed no row, the key's row undone with the
#: statement), the event row (its feed trigger fires). Five statements (``BEGIN
#: IMMEDIATE``, the key, the head, the event, ``COMMIT``) become one
#: (docs/benchmarks.md, "lgsmall")
_APPEND_NEXT_SCHEMA = (
    "CREATE TEMP VIEW IF NOT EXISTS sk_append_row"
    "(agent_id, seq, kind, ts, payload, checksum, tag, expected, key)"
    " AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    "CREATE TEMP TRIGGER IF NOT EXISTS sk_append_row_append INSTEAD OF INSERT ON sk_append_row"
    " BEGIN"
    " INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
    " SELECT new.agent_id, new.key, new.seq, new.seq, new.ts WHERE new.key IS NOT NULL;"
    " UPDATE sk_agents SET head_seq = new.seq, updated_at = new.ts, head_tag = new.tag"
    " WHERE agent_id = new.agent_id AND head_seq = new.seq - 1 AND head_tag IS new.expected;"
    f" SELECT RAISE(ABORT, '{_MOVED}') WHERE changes() = 0;"
    " INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    " VALUES (new.agent_id, new.seq, new.kind, new.ts, new.payload, new.checksum);"
    " END",
)
_APPEND_NEXT = "INSERT INTO sk_append_row VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _one_statement(request: AppendRequest) -> bool:
    """Whether ``request`` is :data:`_APPEND_NEXT`'s case: one event on an existing
    stream (``expected_seq`` > 0), its head tag compared, no lease, no snapshot."""
    return (
        request.expected_seq > 0
        and request.check_tag
        and request.fence is None
        and request.snapshot is None
        and len(request.events) == 1
    )


#: the head compare-and-set and the event row of a batch of ``append_next`` rows
#: (``SQLiteBackend._append_rows``), their parameters a row's columns as they are
#: (seq, timestamp, new tag, agent, expected tag; agent, seq, timestamp, payload, checksum)
_CLAIM_ROWS = (
    "UPDATE sk_agents SET head_seq = ?1, updated_at = ?2, head_tag = ?3"
    " WHERE agent_id = ?4 AND head_seq = ?1 - 1 AND head_tag IS ?5"
)
_INSERT_ROWS = (
    "INSERT INTO sk_events(agent_id, seq, kind, ts, payload, checksum)"
    f" VALUES (?1, ?2, '{EventType.PATCH}', ?3, ?4, ?5)"
)

#: an append in a commit queue: a request, or :meth:`SQLiteBackend.append_next`'s
#: arguments as they are
_Queued: TypeAlias = AppendRequest | NextRow


def _agent_of(path: str, requests: Sequence[_Queued]) -> str:
    """The agent a failed write of ``requests`` names (its refusal as too large: a
    :class:`~statekeeper.errors.StateTooLarge` is about it): the one with a record over
    the file's length limit, else the only one written to; ``"*"`` when several are."""
    limit = LENGTH_LIMITS.get(path)
    agents: list[str] = []
    for queued in requests:
        if isinstance(queued, AppendRequest):
            agent_id, snapshot = queued.agent_id, queued.snapshot
            sizes = [len(e.payload) for e in queued.events]
        else:  # (an append_next's row)
            agent_id, snapshot, sizes = queued[0], queued[7], [len(queued[3])]
        if snapshot is not None:
            sizes.append(len(snapshot.payload))
        if limit is not None and max(sizes) > limit:
            return agent_id
        agents.append(agent_id)
    return agents[0] if len(set(agents)) == 1 else "*"


def _lone(args: tuple[Any, ...]) -> _Queued:
    """The append of :meth:`SQLiteBackend._commit_lone`'s ``args`` (after the cursor:
    a request, or an ``append_next``'s row)."""
    return args[1] if isinstance(args[1], AppendRequest) else args[1:]


#: what a queued append comes back with (None: an ``append_next`` that landed)
_Outcome: TypeAlias = AppendResult | BaseException | None
#: the entry of a commit queue while its first append lets the loop run once
_OPENED: Any = (None, None)
#: what a loop without asyncio's ``_ready`` queue answers for it: "others are ready"
_ALWAYS = (None,)
#: a lone append found the writer busy: nothing was written, the writer thread takes it
_BUSY: Any = object()
_PATCH = EventType.PATCH
#: what a lone append binds its blobs as (see ``SQLiteBackend._append_row``)
_bind = bytearray


def _bind_tag(tag: bytes | None) -> bytearray | None:
    """A head tag bound as :data:`_bind` binds it (None: none, SQL NULL)."""
    return None if tag is None else _bind(tag)


#: a payload shorter than this adds 3 WAL pages to the estimate (``3 + ((n + 1100) >>
#: 11)``, :func:`_pages`)
_SMALL_PAYLOAD = 948

#: the clock of PASS_EVERY (asyncio's ``loop.time()``, without its method call)
_monotonic = time.monotonic

#: the asyncio event loop :meth:`SQLiteBackend.commit_next` (or :func:`_running_loop`)
#: last ran on (None: none yet, or forgotten at a fork). It is the running loop exactly
#: when its ``_thread_id`` is this thread's: asyncio's ``run_forever`` sets that on entry
#: and clears it on exit, and one thread runs one loop at a time. Checked so instead of calling
#: ``asyncio.get_running_loop()`` on every save, which in CPython 3.11 makes a
#: ``getpid`` system call each time (its check against a fork, which the reset below
#: keeps): ~1 us on this project's VMs (docs/benchmarks.md, "normalsave").
_last_loop: list[asyncio.BaseEventLoop | None] = [None]
_get_ident = threading.get_ident


def _forget_loop() -> None:
    _last_loop[0] = None


def _running_loop() -> asyncio.AbstractEventLoop:
    """The running event loop (RuntimeError outside one, as ``asyncio.get_running_loop``):
    :data:`_last_loop` when it runs on this thread, without the ``getpid`` system call
    of ``asyncio.get_running_loop`` — which the group committer's appends made once a
    save (``strace -c``: one ``getpid`` a save at 16 agents) —, else asked and kept
    there when it is an asyncio event loop (uvloop's is asked every time)."""
    loop = _last_loop[0]
    if loop is not None and loop._thread_id == _get_ident():  # type: ignore[attr-defined]
        return loop
    running = asyncio.get_running_loop()
    if isinstance(running, asyncio.BaseEventLoop):
        _last_loop[0] = running
    return running


os.register_at_fork(after_in_child=_forget_loop)


def _make_folder(path: str) -> None:
    """Create the folder of a store file that is to be created, or say why it cannot be."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else folder
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise BackendError(f"{path}: cannot create the folder {where}: {why}") from exc


class SQLiteBackend(SQLiteReads, SQLiteLeases, SQLiteAdmin):
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
        if readonly:
            return
        try:
            self._open_writer()
        except BaseException:
            self._writer_pool.shutdown(wait=False)
            self._commit_pool.shutdown(wait=False)
            raise

    # -- connections -------------------------------------------------------------

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            conn = connect_read_only(self.path, timeout=self.busy_timeout)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            return conn
        # mode=rw: never create the file (one deleted under an open store stays gone)
        conn = sqlite3.connect(
            _rw_uri(self.path),
            uri=True,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL. Switching needs an exclusive lock, and SQLite answers "locked"
        at once, without its busy handler, while another process holds the write lock
        (for instance creating the schema of the same new file): so retry, within the
        busy timeout, like any other writer waits."""
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _open_writer(self) -> None:
        created = not os.path.exists(self.path)
        if created:
            self._create_file()
        else:
            _check_header(self.path)
        with _translated(self.path):
            conn = self._connect()
        #: the file the writer opened (device, inode): a write checks the path still
        #: names it (_moved), as SQLite does not in WAL mode
        self._file_id = _file_id(self.path)
        self._wal_id: tuple[int, int] | None = None  # (the WAL's, once open: below)
        self._wal_path = self.path + "-wal"
        try:
            self._init_writer(conn)
        except BaseException:
            conn.close()
            raise
        # busy timeout 0: _begin waits for the write lock itself — on the writer thread
        # only, so an inline write never sleeps on the event loop — in slices, so that
        # it can tell a busy file from a stalled lock holder
        conn.execute("PRAGMA busy_timeout = 0")
        self._writer = conn
        # the appends' statements run on one cursor of the writer connection (it is
        # only used under _writer_busy): conn.execute made and dropped one per statement
        self._append_cursor = conn.cursor()
        #: a lone append is one statement (_SAVE_NEXT: the TEMP view made)
        self._save_next = _prepare_save_next(conn)
        #: the cursor of the reads made on the writer connection while it is idle, by a
        #: thread that has no read connection yet (see _rows)
        self._writer_reads = conn.cursor()
        if created:
            _start_wal(conn)
            self.opened_new = True  # (Backend.opened_new: the store's first creates)
            self._empty_at_open = _empty_now(conn)
        self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        LENGTH_LIMITS[self.path] = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        self._wal_frames_at_open = self._wal_frames()
        #: the WAL file the writer opened (device, inode), checked by _moved too: SQLite
        #: keeps writing to the WAL it opened, so a WAL deleted or replaced under an
        #: open store took every later commit into an inode no opener reads (all lost
        #: at a crash). While this connection is open the WAL keeps its inode: SQLite
        #: resets and truncates it in place (wal_checkpoint(TRUNCATE),
        #: journal_size_limit), and deletes it only at the close of a connection that
        #: gets the file's EXCLUSIVE lock — never while ours holds SHARED, as every
        #: connection in WAL mode does while open (sqlite3WalClose; pager_unlock)
        self._wal_id = _file_id(self._wal_path)

    def _create_file(self) -> None:
        """Create a new store file whole: schema in a temporary file, linked into place
        (another process creating the same file at the same time wins or loses the
        link; both then open the one complete file)."""
        tmp = f"{self.path}.sk-new-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            try:  # made here, not by SQLite: a failure names the store's path and why
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            except OSError as exc:
                folder = Path(os.path.abspath(self.path)).parent
                raise BackendError(
                    f"{self.path}: cannot create the store file in {folder}: {exc.strerror}"
                ) from exc
            with _creating(self.path):
                conn = sqlite3.connect(tmp, isolation_level=None)
                try:
                    # first: the page size is fixed once the file has its first page
                    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                    # the ownership marker: only a file statekeeper creates carries it
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
                    if mode.lower() != "wal":
                        raise BackendError(f"{self.path}: cannot enable WAL (journal_mode={mode})")
                    conn.execute("PRAGMA synchronous = FULL")
                    conn.execute("BEGIN IMMEDIATE")
                    self._create_schema(conn)
                    conn.execute(
                        "INSERT INTO sk_meta(key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                    conn.execute("COMMIT")
                    # the schema into the file itself, now: close's own checkpoint fails
                    # silently (a full disk), and the file, linked into place without
                    # its WAL, was a malformed store at the path
                    busy, log, done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if busy or done != log:
                        raise BackendError(f"{self.path}: the new file's checkpoint failed")
                finally:
                    conn.close()  # the last connection: removes the WAL
            # never a check and a replace: a file created meanwhile by someone else (who
            # may have written to it already) is theirs, and this process opens it
            place_unless_exists(tmp, self.path)
            sync_directory(Path(os.path.abspath(self.path)).parent)
        finally:
            for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        sqlite_feed.ensure_feed(conn)  # schema step 3 -> 4, its own step
        # the feed's id (Backend.feed_id), made with the file or by its first writable
        # open by this version: so that a store only ever read has one too
        conn.execute(
            "INSERT INTO sk_meta (key, value) VALUES ('feed_id', ?) ON CONFLICT (key) DO NOTHING",
            (secrets.token_hex(8),),
        )

    def _init_writer(self, conn: sqlite3.Connection) -> None:
        with _translated(self.path):
            named = conn.execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger')"
            ).fetchall()
            tables = {name for entry, name in named if entry == "table"}
            if ("index", "sk_agents_written") in named:
                # the last-write index is there (nothing drops it): lists_by_write
                # needs no statement of its own at the first write's key check
                self._by_write = True
            if "sk_meta" not in tables:
                raise NotAStore(
                    self.path,
                    "a SQLite database without statekeeper's tables"
                    + (" (another application's database?)" if tables else " (an empty one)")
                    + "; it was left unchanged",
                )
            mode = self._enable_wal(conn)
            if mode.lower() != "wal":
                raise BackendError(f"{self.path}: cannot enable WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _wrote
            row = conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) == SCHEMA_VERSION and tables >= _TABLES:
                columns = {r[1] for r in conn.execute("PRAGMA table_info(sk_agents)")}
                if (
                    "head_tag" in columns
                    and (("trigger", "sk_idempotency_made") in named or not _keys_migrated(conn))
                    and conn.execute(_FEED_ID_SET).fetchone()
                ):
                    return  # current: no write transaction needed to open the file
            self._begin(conn)
            self._create_schema(conn)
            row = conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO sk_meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif int(row[0]) > SCHEMA_VERSION:
                conn.execute("ROLLBACK")
                raise _newer(self.path, row[0])
            else:
                self._migrate(conn, int(row[0]))
            conn.execute("COMMIT")
            self._by_write = True  # (_create_schema made the last-write index)

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

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int) -> None:
        """Bring an existing file up to :data:`SCHEMA_VERSION` (inside the caller's
        immediate transaction). Each step checks what it adds, so it is idempotent."""
        columns = {r[1] for r in conn.execute("PRAGMA table_info(sk_agents)").fetchall()}
        if "head_tag" not in columns:  # 1 -> 2: streams written before carry no tag
            conn.execute("ALTER TABLE sk_agents ADD COLUMN head_tag BLOB")
        # 2 -> 3: sk_leases is created by _SCHEMA (CREATE TABLE IF NOT EXISTS), which
        # runs on every open before this
        keys = {r[1] for r in conn.execute("PRAGMA table_info(sk_idempotency)").fetchall()}
        if "created_at" not in keys:
            # 4 -> 5: each record made at its append's first event's time (that event
            # compacted away: now, the time of the migration); one pass of the table,
            # each event found by its primary key
            conn.execute("ALTER TABLE sk_idempotency ADD COLUMN created_at REAL NOT NULL DEFAULT 0")
            conn.execute(
                "UPDATE sk_idempotency AS k SET created_at = " + KEY_MADE.format(schema="main"),
                {"now": time.time()},
            )
            conn.execute(KEY_MADE_LATER)  # (a process opened before this goes on writing)
        elif _keys_migrated(conn):
            # a file migrated to 5 before the trigger: the records a process of schema
            # 4 wrote since are dated 0 (its column's default)
            conn.execute(KEY_MADE_LATER)
            conn.execute(
                "UPDATE sk_idempotency AS k SET created_at = "
                + KEY_MADE.format(schema="main")
                + " WHERE k.created_at = 0",
                {"now": time.time()},
            )
        if version < SCHEMA_VERSION:
            conn.execute(
                "UPDATE sk_meta SET value = ? WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
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

    async def initialize(self) -> None:
        """The schema is created when the backend is constructed: nothing left to do."""
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")

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

    def _wrote(self, pages: int, held: bool = False) -> None:
        """Count the WAL pages a commit added (an estimate, see :func:`_pages`); past
        :data:`CHECKPOINT_PAGES`, queue a passive checkpoint on the writer thread, and
        when the WAL's growth says a step is due (:class:`.wal.Growth`), that
        step. The writer connection's own auto-checkpoint is off, so no commit — inline
        on the event loop least of all — ever runs one; writes arriving meanwhile queue
        behind it on the writer thread, as they would behind a commit.

        Not under ``_writer_busy``: a commit counts its pages after releasing it (the
        loop's inline commits, the commit thread's), so this may run on two threads at
        once, and ``_wal_pages`` may lose one commit's pages, or keep them across a
        reset. Harmless, checked (2026-12-04): these fields only schedule work that is
        safe at any time — a PASSIVE checkpoint (queued twice: the second copies
        nothing) or a step of the WAL file's zeros (SQLite ignores them; both run
        under the lock, on the writer thread) — never what is written or read. The
        estimate drifts by a commit's pages at most per race, and each checkpoint
        calibrates it again; a lost count delays the next checkpoint by one commit."""
        self._wal_pages += pages * self._wal_scale
        if self._wal_pages < self._wal_limit:
            return
        growth = self._growth
        if self._wal_pages >= self._checkpoint_at:
            if self._checkpoint_at < CHECKPOINT_PAGES:
                self._checkpoint_at = CHECKPOINT_PAGES
                self._calibrate()
            if self._wal_pages >= CHECKPOINT_PAGES:
                # the WAL restarts after this checkpoint: its file is as large as the
                # commits need from then on, grown or not
                growth.stop()
                self._estimated = self._wal_pages / self._wal_scale
                self._wal_pages = 0.0
                self._wal_limit = self._checkpoint_at
                self._checkpoint_due = True
                with contextlib.suppress(RuntimeError):  # shut down by close()
                    self._writer_pool.submit(self._locked, self._checkpoint)
                return
        if growth.due(self._wal_pages, self.append_commits) and not self._grow_here(held):
            self._checkpoint_due = True  # (the next write queues behind the step)
            with contextlib.suppress(RuntimeError):  # shut down by close()
                self._writer_pool.submit(self._locked, self._grow_wal)
        self._wal_limit = min(self._checkpoint_at, growth.next_at)

    def _grow_here(self, held: bool = False) -> bool:
        """The WAL's growth step made on this thread (the loop's, or the commit
        thread's, right after a commit) when the writer is idle — or its lock is
        ``held`` by this thread already (a commit of :meth:`_append_batch_sync`) — and
        nothing is queued on the writer thread; False, nothing done, else (the caller
        queues it there).
        A step writes zeros to the page cache and syncs nothing (:func:`.wal.grow`:
        the next commit's sync takes them), ~0.15 ms: on the writer thread it cost a
        lone writer that thread's start, the step's own sync and its next save's hop
        to that thread (docs/benchmarks.md, "group11 … issue 11, 2026-12-05
        afternoon")."""
        if self._checkpoint_due or self._closed:
            return False
        if held:
            self._grow_now()
            return True
        if not self._writer_busy.acquire(False):
            return False
        try:
            if self._checkpoint_due:  # queued meanwhile (another thread): it goes first
                return False
            self._grow_now()
        finally:
            self._writer_busy.release()
        return True

    def _grow_now(self) -> None:
        """:meth:`_grow_wal` under the writer lock the caller holds, after a commit:
        an error ends the growth, never the commit that counted it (on the writer
        thread, where the step was only queued, nobody saw it either)."""
        try:
            self._grow_wal()
        except Exception:
            self._growth.stop()

    def _wal_frames(self) -> int:
        """The frames written to the WAL since it last restarted, read off the WAL
        file's frame headers (:func:`.wal.wal_frames`: never the ``-shm``
        file, whose close would drop SQLite's locks on it)."""
        return sqlite_wal.wal_frames(self.path + "-wal", self._page_size)

    def _grow_wal(self) -> None:
        """One step of the WAL file's growth ahead (:class:`.wal.Growth`: how
        far, and why in steps): zeros, left for the next commit to sync
        (:func:`.wal.grow`: why, and why SQLite ignores them), inside a write
        transaction of the writer connection that writes nothing — no other
        connection appends frames meanwhile. Retried a few saves later if another
        connection holds the write lock (busy timeout 0: it never waits). Made by
        :meth:`_wrote`, at ``synchronous`` ``FULL``/``EXTRA`` only (where every commit
        syncs the WAL), on the committing thread when the writer is idle
        (:meth:`_grow_here`), else queued on the writer thread, where the next write
        queues behind it, as behind a checkpoint. Until the WAL first
        restarts, each commit would otherwise extend the file, and on ext4 the
        fdatasync of a grown file also commits the file system's journal. Measured
        (docs/benchmarks.md, "full11b", "group11d"): a few ms once per step, against
        ~0.1 ms and a sleep on each of a new WAL's first ~175 sequential saves."""
        self._checkpoint_due = False
        conn = self._writer
        if conn is None or self._closed:
            return  # (the last connection's close removes the WAL)
        growth = self._growth
        try:
            conn.execute("BEGIN IMMEDIATE")  # busy_timeout 0: never waits
        except sqlite3.Error:
            growth.busy(self._wal_pages)
        else:
            try:
                growth.step(self.path + "-wal", self._page_size, self._wal_pages)
            except OSError:
                growth.stop()  # (no room on the disk, say: the commits grow the file)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
        self._wal_limit = min(self._checkpoint_at, growth.next_at)

    def _calibrate(self) -> None:
        """Check the estimated WAL pages against the frames the WAL holds, once, early
        (at :data:`CALIBRATE_PAGES`), and correct the scale: the first checkpoint then
        comes at CHECKPOINT_PAGES frames written, not estimated. Until the WAL first
        restarts every commit extends its file, and on ext4 an fdatasync that follows
        a file's growth commits the file system's journal too (more system time and one
        more sleep a commit than overwriting a restarted WAL): with the estimate
        uncorrected, the first checkpoint came at ~1,850 frames written, not 1,000
        (5.75 frames a lone save at 2 KiB pages against ~3.5 estimated), and a
        sequential save at ``synchronous=FULL`` paid that growth twice as long as
        SQLite's own auto-checkpoint does (docs/benchmarks.md, "full11"). Each
        checkpoint calibrates the scale again (:meth:`_checkpoint`)."""
        frames = self._wal_frames() - self._wal_frames_at_open
        if frames > 0 and self._wal_pages > 0:
            self._wal_scale = min(max(self._wal_scale * frames / self._wal_pages, 0.5), 4.0)
            self._wal_small = 3 * self._wal_scale
            self._wal_pages = max(self._wal_pages, float(frames))

    def _checkpoint(self) -> None:
        self._checkpoint_due = False
        conn = self._writer
        if conn is None:
            return
        # PASSIVE: copies what no reader still needs, never waits for readers; the
        # next write restarts the WAL from its start when all of it was copied
        with contextlib.suppress(sqlite3.Error):  # a failed checkpoint: the next retries
            row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            # row: (busy, frames in the WAL, frames checkpointed). The WAL restarted at
            # the last checkpoint, so its frames are those written since: calibrate the
            # estimate on them (bounded: a WAL a reader kept from restarting is larger)
            if row is not None and row[1] > 0 and self._estimated > 0:
                self._wal_scale = min(max(row[1] / self._estimated, 0.5), 4.0)
                self._wal_small = 3 * self._wal_scale

    # -- writes ------------------------------------------------------------------

    def _append_one(self, conn: _Executes, request: AppendRequest) -> AppendResult:
        """One append inside the caller's immediate transaction. A refusal
        (:class:`ConflictError`, :class:`LeaseLost`) leaves nothing written (a key
        claimed before the head refused is deleted again); only a constraint
        (``sqlite3.IntegrityError``) can fire after something was.

        Its BLOBs (head tags, payloads, checksums) are bound as ``bytearray``, as
        :meth:`_append_row` binds them (why there): this is the append of a new
        stream, of a save on a state read from storage, of a keyed or fenced write
        and of a batch's several events. The stored values are the same BLOBs."""
        agent_id, key, expected = request.agent_id, request.idempotency_key, request.expected_seq
        fence = request.fence
        tag = _bind_tag(request.head_tag)
        events = request.events
        first, last = events[0], events[-1]
        if key is not None:
            if fence is not None:
                # the fence before the key: a stale writer learns it lost the lease
                check_fence(agent_id, fence, self._lease_row(conn, agent_id))
                fence = None
            # the key claimed first: its SELECT only when it is already there (a
            # duplicate), not on every keyed append; undone below if the head refuses
            claimed = conn.execute(
                _CLAIM_KEY, (agent_id, key, first.seq, last.seq, first.timestamp)
            ).rowcount
            if claimed != 1:
                row = conn.execute(_KEY_RANGE, (agent_id, key)).fetchone()
                return AppendResult(agent_id, row[0], row[1], duplicate=True)
        # Compare-and-set the head first: one statement checks the head (and the fence,
        # inside the immediate transaction: no grant can slip in between) and claims it.
        if fence is None:
            if expected == 0:
                claimed = conn.execute(
                    _CREATE, (agent_id, last.seq, first.timestamp, last.timestamp, tag)
                ).rowcount
            elif request.check_tag:
                claimed = conn.execute(
                    _CLAIM[True],
                    (
                        last.seq,
                        last.timestamp,
                        tag,
                        agent_id,
                        expected,
                        _bind_tag(request.expected_tag),
                    ),
                ).rowcount
            else:
                claimed = conn.execute(
                    _CLAIM[False], (last.seq, last.timestamp, tag, agent_id, expected)
                ).rowcount
        elif expected == 0:
            claimed = conn.execute(
                "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at, head_tag)"
                " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sk_leases"
                " WHERE agent_id = ? AND holder = ? AND token = ?)"
                " ON CONFLICT(agent_id) DO NOTHING",
                (
                    agent_id,
                    last.seq,
                    first.timestamp,
                    last.timestamp,
                    tag,
                    agent_id,
                    *fence,
                ),
            ).rowcount
        else:
            claimed = conn.execute(
                "UPDATE sk_agents SET head_seq = ?, updated_at = ?, head_tag = ?"
                " WHERE agent_id = ? AND head_seq = ?"
                + _TAG_CHECK[request.check_tag]
                + " AND EXISTS (SELECT 1 FROM sk_leases"
                " WHERE agent_id = ? AND holder = ? AND token = ?)",
                (last.seq, last.timestamp, tag, agent_id, expected)
                + ((_bind_tag(request.expected_tag),) if request.check_tag else ())
                + (agent_id, *fence),
            ).rowcount
        if claimed != 1:  # refused: find out why (the fence first), nothing left written
            if key is not None:
                conn.execute(_FORGET_KEY, (agent_id, key))
            if fence is not None:
                check_fence(agent_id, fence, self._lease_row(conn, agent_id))
            row = conn.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            raise ConflictError(agent_id, expected, row[0] if row is not None else 0)
        insert = _INSERT_EVENT
        if len(events) == 1:
            conn.execute(
                insert,
                (
                    agent_id,
                    first.seq,
                    first.type,
                    first.timestamp,
                    _bind(first.payload),
                    _bind(first.checksum),
                ),
            )
        else:
            conn.executemany(
                insert,
                [
                    (agent_id, e.seq, e.type, e.timestamp, _bind(e.payload), _bind(e.checksum))
                    for e in events
                ],
            )
        snap = request.snapshot
        if snap is not None:
            self._put_snapshot(conn, agent_id, snap)
        return AppendResult(agent_id, first.seq, last.seq)

    def _append_row(
        self,
        cur: _Executes,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None,
    ) -> None:
        """:meth:`_append_one` of :meth:`append_next`'s one event, bound from its
        arguments: the head's compare-and-set (seq and tag), then the event row.

        The blobs are bound as ``bytearray``: CPython's ``sqlite3`` binds ``int``,
        ``float``, ``str`` and ``bytearray`` directly but looks every other type —
        ``bytes`` included — up in its adapters first (``__adapt__`` and
        ``__conform__``, each a formatted and cleared ``AttributeError``): 4 bytes
        parameters cost 7.1 us an ``execute`` against 3.6 us as ``bytearray`` copies
        (timeit, ``SELECT ?, ?, ?, ?``), ~10k instructions a save
        (docs/benchmarks.md, "CPU per save: lists that grow, blobs bound as they are").
        Registering an adapter instead would change every ``sqlite3`` user of the
        process. The stored values are the same BLOBs."""
        tag = None if head_tag is None else _bind(head_tag)
        if seq == 1:
            claimed = cur.execute(_CREATE, (agent_id, 1, timestamp, timestamp, tag)).rowcount
        else:
            claimed = cur.execute(
                _CLAIM[True],
                (
                    seq,
                    timestamp,
                    tag,
                    agent_id,
                    seq - 1,
                    None if expected_tag is None else _bind(expected_tag),
                ),
            ).rowcount
        if claimed != 1:  # refused, nothing written
            row = cur.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            raise ConflictError(agent_id, seq - 1, row[0] if row is not None else 0)
        cur.execute(
            _INSERT_EVENT, (agent_id, seq, _PATCH, timestamp, _bind(payload), _bind(checksum))
        )
        if snapshot is not None:
            self._put_snapshot(cur, agent_id, snapshot)

    @staticmethod
    def _put_snapshot(conn: _Executes, agent_id: str, snap: RawSnapshot) -> None:
        """Store ``snap`` (its BLOBs bound as ``bytearray``: see :meth:`_append_row`)."""
        conn.execute(
            "INSERT OR REPLACE INTO sk_snapshots(agent_id, seq, ts, payload, checksum)"
            " VALUES (?, ?, ?, ?, ?)",
            (agent_id, snap.seq, snap.timestamp, _bind(snap.payload), _bind(snap.checksum)),
        )

    def _append_batch_sync(self, requests: Sequence[_Queued]) -> list[_Outcome]:
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:  # (as _translated, without a context manager: this runs on every commit)
            self._begin(cur)
            try:
                try:
                    results = self._append_all(cur, requests)
                except sqlite3.IntegrityError as exc:
                    # a constraint fired after some rows of a request were written
                    cur.execute("ROLLBACK")
                    if len(requests) == 1:  # alone, the transaction was its unit
                        return [self._failure(exc)]
                    self._begin(cur)
                    results = self._append_all(cur, requests, savepoints=True)
                cur.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.append_commits += 1
        except sqlite3.Error:
            with _translated(self.path, _agent_of(self.path, requests)):
                raise
        self._wrote(_pages(requests), held=True)  # (every caller holds _writer_busy)
        return results

    def _append_together_sync(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange]
    ) -> list[AppendResult | None]:
        """All the requests (and changes) in one transaction, rolled back whole when
        one fails or is a duplicate (see :meth:`Backend.append_together`)."""
        conn = self._writer
        assert conn is not None
        results: list[AppendResult | None] = []
        try:
            self._begin(conn)
            try:
                for change in changes:
                    self._change(conn, change)
                for request in requests:
                    result = self._append_one(conn, request)
                    if result.duplicate:
                        conn.execute("ROLLBACK")
                        return [result if r is request else None for r in requests]
                    results.append(result)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.append_commits += 1
        except sqlite3.IntegrityError as exc:
            raise self._failure(exc) from None
        except sqlite3.Error:
            with _translated(self.path, _agent_of(self.path, requests)):
                raise
        self._wrote(_pages(requests), held=True)  # (its caller, _write, holds _writer_busy)
        return results

    def _change(self, conn: sqlite3.Connection, change: StreamChange) -> None:
        """Make ``change`` inside the caller's transaction (ConflictError: nothing of
        it written; the caller rolls back)."""
        agent_id = change.agent_id
        if change.lease is not None:
            self._lease_change(conn, agent_id, change.lease)
            return
        if change.rewrite is not None:
            if not self._rewrite_one(conn, change.rewrite):
                row = conn.execute(
                    "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
                ).fetchone()
                raise ConflictError(agent_id, change.rewrite.expected_seq, row[0] if row else 0)
            return
        row = conn.execute(
            "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        head = row[0] if row else 0
        if change.absent:  # (the writer's transaction: no append can come between)
            if head:
                raise ConflictError(agent_id, 0, head)
            return
        if change.delete_at is None:
            if change.prune_head is not None:  # the stream planned on (same transaction)
                check_prune_at(
                    agent_id,
                    head,
                    change.prune_head,
                    change.prune_checksum,
                    lambda: self._checksum_in(conn, agent_id, head),
                )
            if change.snapshot is not None:
                if not 0 < change.snapshot.seq <= head:
                    raise ConflictError(agent_id, change.snapshot.seq, head)
                self._put_snapshot(conn, agent_id, change.snapshot)
            if change.prune_to is not None:
                self._prune_rows(conn, agent_id, head, change.prune_to, change.drop_snapshots)
            return
        if head != change.delete_at:
            raise ConflictError(agent_id, change.delete_at, head)
        if (  # the head record's identity, same transaction
            change.delete_checksum is not None
            and self._checksum_in(conn, agent_id, head) != change.delete_checksum
        ):
            raise ConflictError(agent_id, head, head)
        self._delete_rows(conn, agent_id)

    @staticmethod
    def _checksum_in(conn: _Executes, agent_id: str, seq: int) -> bytes | None:
        """The stored checksum of ``agent_id``'s event at ``seq`` (None: no such event),
        read in the caller's transaction."""
        found = conn.execute(
            "SELECT checksum FROM sk_events WHERE agent_id = ? AND seq = ?", (agent_id, seq)
        ).fetchone()
        return bytes(found[0]) if found is not None else None

    @staticmethod
    def _delete_rows(conn: _Executes, agent_id: str) -> bool:
        """Delete the agent's rows in the caller's transaction; True if it had a head."""
        existed = conn.execute("DELETE FROM sk_agents WHERE agent_id = ?", (agent_id,)).rowcount > 0
        for table in ("sk_events", "sk_snapshots", "sk_idempotency"):
            conn.execute(f"DELETE FROM {table} WHERE agent_id = ?", (agent_id,))
        return existed

    def _append_all(
        self, conn: _Executes, requests: Sequence[_Queued], savepoints: bool = False
    ) -> list[_Outcome]:
        """Each request succeeds or fails on its own. A refusal is raised before the
        request wrote anything, so it needs no undo; without ``savepoints`` a
        constraint firing mid-request propagates (the caller rolls back and retries
        the batch with one savepoint per request). A request may be the arguments of
        :meth:`append_next` as they are (its result: None).

        Such a row goes to :meth:`_append_row` as it is: that binds its BLOBs as
        ``bytearray`` itself (they were copied twice here before: 62.6 -> 31.6 bytecodes
        a batched save, ``bench_save_instructions.py --bytecodes sk-group-16``)."""
        if not savepoints and len(requests) > 1:
            rows = self._append_rows(conn, requests)
            if rows is None:
                rows = self._append_creates(conn, requests)
            if rows is not None:
                return rows
        results: list[_Outcome] = []
        append_row = self._append_row
        for request in requests:
            if savepoints:
                conn.execute("SAVEPOINT sk_req")
            try:
                if isinstance(request, tuple):
                    append_row(conn, *request)
                    results.append(None)
                else:
                    results.append(self._append_one(conn, request))
            except (ConflictError, LeaseLost) as exc:
                results.append(exc)
            except sqlite3.IntegrityError as exc:
                if not savepoints:
                    raise
                conn.execute("ROLLBACK TO sk_req")
                results.append(self._failure(exc))
            if savepoints:
                conn.execute("RELEASE sk_req")
        return results

    def _append_rows(self, conn: _Executes, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """:meth:`_append_all` of a batch of :meth:`append_next` rows on existing heads
        (``seq > 1``): every head's compare-and-set in one ``executemany`` and every
        event row in another, instead of two ``execute`` calls a row (the group path at
        16 agents: a batch of ~8 rows). None, with nothing written, when a request is not
        such a row. When a head refuses (the claims' summed ``rowcount`` falls short),
        the transaction is rolled back and begun again and None returned: the caller
        writes the batch row by row, which tells each append its own outcome. A
        constraint firing on an event row propagates, as from :meth:`_append_all`.

        The parameters are made by C code, not a Python loop: the rows transposed into
        columns (``zip(*rows)``), the BLOB columns copied to ``bytearray`` by ``map``
        (see :meth:`_append_row` for why ``bytearray``), the columns zipped back into
        each statement's parameter rows, whose numbered parameters take a row's
        columns in place (``?1 - 1``: the expected head) — a fixed number of Python
        calls a batch, none a row (72 bytecodes a batched save before,
        ``bench_save_instructions.py --bytecodes sk-group-16``; docs/benchmarks.md,
        "group11c"). A request that is not a row (an :class:`AppendRequest` cannot be
        transposed) raises ``TypeError`` there; a batch with a row without head tags (a
        store that keeps none) takes :meth:`_append_one_by_one`."""
        try:
            agent_ids, seqs, stamps, payloads, checksums, tags, expected, snaps = zip(
                *requests, strict=True
            )
        except (TypeError, ValueError):  # not every request is a row
            return None
        if 1 in seqs:  # a new stream: created row by row
            return None
        if None in tags or None in expected:
            return self._append_one_by_one(conn, requests)
        claims = list(
            zip(seqs, stamps, map(_bind, tags), agent_ids, map(_bind, expected), strict=True)
        )
        if conn.executemany(_CLAIM_ROWS, claims).rowcount != len(claims):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(
            _INSERT_ROWS,
            zip(agent_ids, seqs, stamps, map(_bind, payloads), map(_bind, checksums), strict=True),
        )
        if snaps.count(None) != len(snaps):  # (a snapshot: one save in snapshot_every)
            for agent_id, snap in zip(agent_ids, snaps, strict=True):
                if snap is not None:
                    self._put_snapshot(conn, agent_id, snap)
        return [None] * len(claims)

    def _append_creates(
        self, conn: _Executes, requests: Sequence[_Queued]
    ) -> list[_Outcome] | None:
        """:meth:`_append_all` of a batch of new streams' first appends — requests of
        one event each, ``expected_seq`` 0, without key, fence nor snapshot: the first
        save of each of N agents arriving together (16 agents: every agent's first
        save shares one commit) —, every head created by one ``executemany`` and every
        event row by another, instead of :meth:`_append_one`'s Python and two
        ``execute`` calls a request. None, with nothing written, when a request is not
        such a create. When a head is there already (the summed ``rowcount`` of the
        heads' ``INSERT … DO NOTHING`` falls short: an agent another writer created,
        or two creates of one agent), the transaction is rolled back and begun again
        and None returned: the caller writes the batch request by request, which
        tells each its own outcome (as :meth:`_append_rows` does). The statements, the
        stored rows and the results are :meth:`_append_one`'s."""
        heads = []
        rows = []
        results: list[_Outcome] = []
        for request in requests:
            if (
                not isinstance(request, AppendRequest)  # (a row: append_next's arguments)
                or request.expected_seq
                or request.idempotency_key is not None
                or request.fence is not None
                or request.snapshot is not None
                or len(events := request.events) != 1
            ):
                return None
            agent_id = request.agent_id
            event = events[0]
            seq, stamp = event.seq, event.timestamp
            heads.append((agent_id, seq, stamp, stamp, _bind_tag(request.head_tag)))
            rows.append(
                (agent_id, seq, event.type, stamp, _bind(event.payload), _bind(event.checksum))
            )
            results.append(AppendResult(agent_id, seq, seq))
        if conn.executemany(_CREATE, heads).rowcount != len(heads):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(_INSERT_EVENT, rows)
        return results

    def _append_one_by_one(
        self, conn: _Executes, requests: Sequence[_Queued]
    ) -> list[_Outcome] | None:
        """:meth:`_append_rows` of a batch of rows that may have no head tags (a store
        without them): the parameters built row by row."""
        claims = []
        events = []
        snapshots = []
        for request in requests:
            agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snap = request  # type: ignore[misc]
            if snap is not None:
                snapshots.append((agent_id, snap))
            claims.append(
                (
                    seq,
                    timestamp,
                    None if head_tag is None else _bind(head_tag),
                    agent_id,
                    seq - 1,
                    None if expected_tag is None else _bind(expected_tag),
                )
            )
            events.append((agent_id, seq, _PATCH, timestamp, _bind(payload), _bind(checksum)))
        if conn.executemany(_CLAIM[True], claims).rowcount != len(claims):
            conn.execute("ROLLBACK")  # nothing of the batch stays
            self._begin(conn)
            return None
        conn.executemany(_INSERT_EVENT, events)
        for agent_id, snap in snapshots:
            self._put_snapshot(conn, agent_id, snap)
        return [None] * len(claims)

    def _failure(self, exc: Exception) -> BaseException:
        if isinstance(exc, ConflictError | LeaseLost):
            return exc
        return BackendError(f"{self.path}: constraint violated: {exc}")

    async def append(self, request: AppendRequest) -> AppendResult:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_request(request)
        if not self.inline_writes:
            result = (await self._write(self._append_batch_sync, [request]))[0]
        else:
            loop = _running_loop()
            if loop in self._queues or loop in self._in_flight:
                result = await self._join_commit(request, loop)
            else:
                result = await self._open_commit(loop, request, None)
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, AppendResult)
        return result

    async def append_next(
        self,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None = None,
    ) -> None:
        """:meth:`Backend.append_next`: as :meth:`append` — the same commit queue, the
        same statements —, and when the append is alone, its row bound from the
        arguments as they are (no request, event or result object; the store's common
        save, ``benchmarks/bench_save_instructions.py``)."""
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_next(agent_id, seq, snapshot)
        row = (agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot)
        if not self.inline_writes:
            result = (await self._write(self._append_batch_sync, [row]))[0]
        else:
            loop = _running_loop()
            if loop in self._queues or loop in self._in_flight:
                result = await self._join_commit(row, loop)
            else:
                result = await self._open_commit(loop, None, row)
        if isinstance(result, BaseException):
            raise result

    def commit_next(self, row: NextRow) -> bool:
        """:meth:`Backend.commit_next`: the lone append :meth:`_open_commit` commits
        without a pass of the loop, as one plain call (no coroutine of its own nor of
        :meth:`append_next`, no argument check: the store's common save). False, with
        nothing done, unless it is that case: the backend writable and open with inline
        writes, no commit queue open nor batch in flight (of any loop), no other task of
        the loop ready, no pass due (:data:`PASS_EVERY` went by and the loop's poll finds
        I/O or a timer waiting), the writer idle; :meth:`append_next` then makes it.

        An existing agent's append without a snapshot is ONE statement in autocommit
        (:data:`_SAVE_NEXT`: the same compare-and-set and event row, made by a TEMP
        view's trigger; a busy write lock fails it with nothing written, and the
        writer thread then makes it). Any other (a create, a snapshot with it) is
        :meth:`_commit_lone` of :meth:`_append_row` written out in this
        one frame (the same statements, errors and accounting): the two calls, the
        row's arguments packed and unpacked twice and the writer's ``threading.local``
        flag set and cleared per save were ~150 of the save's ~1,100 bytecodes
        (docs/benchmarks.md, "seqfloor"). The flag matters only to :meth:`_begin`,
        which is called here only when the first ``BEGIN IMMEDIATE`` failed."""
        if (
            self.readonly
            or self._closed
            or not self.inline_writes
            or self._queues
            or self._in_flight
        ):
            return False
        loop = _last_loop[0]
        if loop is None or loop._thread_id != _get_ident():  # type: ignore[attr-defined]
            running = asyncio.get_running_loop()  # (RuntimeError outside a loop, as before)
            if not isinstance(running, asyncio.BaseEventLoop):
                return False  # no _ready queue (uvloop, say): append_next makes it
            _last_loop[0] = loop = running
        if loop._ready:  # type: ignore[attr-defined]
            return False  # another task is ready: append_next lets it run first
        if (now := _monotonic()) >= self._pass_due:
            if not _nothing_waits(loop):
                return False  # something waits: append_next makes the pass
            self._pass_due = now + PASS_EVERY  # (the clock read once: the poll is short)
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(False):
            return False  # the writer thread takes it (_begin raises StoreLost if moved)
        agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
        cur = self._append_cursor
        execute = cur.execute
        refused: ConflictError | None = None
        failure: BaseException | None = None
        if seq != 1 and snapshot is None and self._save_next:
            # the common save: one statement, its own transaction (_SAVE_NEXT)
            try:
                execute(
                    _SAVE_NEXT,
                    (
                        agent_id,
                        seq,
                        timestamp,
                        _bind(payload),
                        _bind(checksum),
                        None if head_tag is None else _bind(head_tag),
                        None if expected_tag is None else _bind(expected_tag),
                    ),
                )
                self.append_commits += 1
                outcome = None
            except BaseException as exc:
                outcome = self._statement_failed(exc, agent_id, seq, None)
            finally:
                self._writer_busy.release()
            if outcome is not None:  # (rolled back: nothing written)
                if outcome is _BUSY:
                    return False  # the writer thread waits for the lock
                if isinstance(outcome, ConflictError):
                    refused = outcome
                else:
                    failure = outcome
            return self._next_done(payload, failure, refused)
        try:
            try:
                try:
                    execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:
                    local = self._local
                    local.inline = True  # (busy: _begin raises _Busy; else it began)
                    try:
                        self._begin(cur)
                    finally:
                        local.inline = False
                try:
                    try:  # (_append_row, written out)
                        tag = None if head_tag is None else _bind(head_tag)
                        if seq == 1:
                            claimed = execute(
                                _CREATE, (agent_id, 1, timestamp, timestamp, tag)
                            ).rowcount
                        else:
                            claimed = execute(
                                _CLAIM_TAGGED,
                                (
                                    seq,
                                    timestamp,
                                    tag,
                                    agent_id,
                                    seq - 1,
                                    None if expected_tag is None else _bind(expected_tag),
                                ),
                            ).rowcount
                        if claimed == 1:
                            execute(
                                _INSERT_EVENT,
                                (
                                    agent_id,
                                    seq,
                                    _PATCH,
                                    timestamp,
                                    _bind(payload),
                                    _bind(checksum),
                                ),
                            )
                            if snapshot is not None:
                                self._put_snapshot(cur, agent_id, snapshot)
                        else:  # refused, nothing written
                            found = execute(_HEAD_SEQ, (agent_id,)).fetchone()
                            refused = ConflictError(
                                agent_id, seq - 1, found[0] if found is not None else 0
                            )
                    except sqlite3.IntegrityError as exc:
                        execute("ROLLBACK")
                        failure = self._failure(exc)  # (rolled back: no WAL pages)
                    else:
                        execute("COMMIT")  # (a refusal commits the empty transaction)
                        self.append_commits += 1
                except BaseException:
                    conn = self._writer
                    if conn is not None and conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error:
                with _translated(self.path, agent_id):
                    raise
        except _Busy:
            return False  # nothing written: wait for the lock on the writer thread
        finally:
            self._writer_busy.release()
        return self._next_done(payload, failure, refused)

    def _next_done(
        self, payload: bytes, failure: BaseException | None, refused: ConflictError | None
    ) -> bool:
        """:meth:`commit_next`'s accounting once its append's statements ran: the
        failure raised, the WAL pages counted (a checkpoint queued when due), the
        commit listeners told, the refusal raised; True."""
        if failure is not None:
            if self.commit_listeners:
                self._committed(1)
            raise failure
        self._wal_pages += (
            self._wal_small
            if len(payload) < _SMALL_PAYLOAD
            else (3 + ((len(payload) + 1100) >> 11)) * self._wal_scale
        )
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        if self.commit_listeners:
            self._committed(1)
        if refused is not None:
            raise refused
        return True

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None] | None:
        """:meth:`Backend.join_next`: ``row`` joins the running loop's queue when it is
        open (appends waiting, or a batch in flight), as :meth:`append_next` would. The
        row is not checked, as :meth:`commit_next` does not check it (the store hands
        it only rows it built on a cached record; :meth:`append_next` checks): on the
        group committer's common save at 16 agents the check was 46 of ~1,380
        bytecodes a save (``bench_save_instructions.py --bytecodes sk-group-16``).
        :meth:`_join_commit`, written out for a row (one lookup of the queue)."""
        if not self.groups_appends:  # (read-only, or no inline writes: set once)
            return None
        # (_running_loop, written out: once a batched save)
        last = _last_loop[0]
        running = last is not None and last._thread_id == _get_ident()  # type: ignore[attr-defined]
        loop: asyncio.AbstractEventLoop = last if running else _running_loop()  # type: ignore[assignment]
        queue = self._queues.get(loop)
        if queue is None:
            if loop not in self._in_flight:
                return None
            if self._closed:
                raise StoreClosed(f"sqlite backend {self.path} is closed")
            queue = self._queues[loop] = []  # (the batch in flight flushes it)
        elif self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        future: asyncio.Future[BaseException | None] = loop.create_future()
        queue.append((row, future))  # type: ignore[arg-type]
        return future

    # -- the commit queue: group commit of the appends of one event loop ----------------
    #
    # An append joins its loop's queue; the first one schedules a flush with call_soon,
    # so every append made by the tasks ready in the same tick joins before the flush
    # runs (a loop of saves also yields to the loop once per save: it cannot starve
    # other tasks). The flush commits the queue as one transaction: inline, on the
    # loop, when the writer is idle and the batch is one append, a few, or the loop
    # would have nothing else to run during the commit (every saver waits for it: no
    # thread hop, the loop blocked for that transaction only); else its statements on
    # the loop and its COMMIT on the commit thread (or all of it on the writer thread
    # when the writer is busy), so the loop runs its other work while this one is
    # fsync'd. While a batch of a loop is in flight, that loop's new appends wait in
    # its queue and go together as the next batch the moment it is done (group commit:
    # one commit in flight, the next one filling up) — at most MAX_BATCH a commit.

    #: the most appends one commit of the queue takes
    MAX_BATCH = 512

    def _join_commit(
        self, request: _Queued, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[_Outcome]:
        """``request`` joins ``loop``'s queue (the running loop: the caller asked for
        it already — in CPython 3.11 each ``get_running_loop`` is a ``getpid`` system
        call)."""
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        future: asyncio.Future[_Outcome] = loop.create_future()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = []
            if loop not in self._in_flight:  # else the batch in flight flushes it
                loop.call_soon(self._flush, loop)
        queue.append((request, future))
        return future

    async def _open_commit(
        self, loop: asyncio.AbstractEventLoop, request: AppendRequest | None, row: NextRow | None
    ) -> _Outcome:
        """The first append of an empty queue (``request``, or ``row`` from
        :meth:`append_next`). When another task of the loop is ready to run, it lets
        the loop run once (the appends of the tasks ready now join it; a flush
        scheduled with call_soon and a wake-up from its future took two passes), then
        flushes the queue itself. Alone after that pass — or with nothing else ready
        and a pass made less than :data:`PASS_EVERY` ago: no other task could join it
        or is kept waiting for it, and the I/O and timers the pass would poll wait at
        most that long —, it is committed here without the queue's bookkeeping (no
        future, no request list, no _flush or _settle); the result of a ``row`` is
        None. (Whether another task is ready is the loop's ``_ready`` queue: asyncio's
        event loops have one; a loop without it gets a pass every time.) Once
        :data:`PASS_EVERY` went by, the loop is polled first (:func:`_nothing_waits`: one
        poll of its selector and a look at its earliest timer): the pass is made when
        it would run something — I/O ready, a timer due —, and skipped (the bound
        starting again) when it would only have polled: at ``synchronous=FULL`` every
        save outlasts ``PASS_EVERY`` (its fsync) and starts on cold caches, where the
        pass's code (``_run_once``, the task's step) cost 7–11 % of a save's CPU
        (docs/benchmarks.md, "savecpu").

        During the pass the queue holds a placeholder: nothing else flushes a queue
        this method opened (a flush is scheduled only with a queue's first append, and
        no batch of this loop is in flight), so it is replaced by the real entry
        before any flush sees it."""
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        queue = None
        skip = not getattr(loop, "_ready", _ALWAYS)  # no other task is ready
        if skip and _monotonic() >= self._pass_due:  # PASS_EVERY went by: anything waiting?
            skip = _nothing_waits(loop)
            if skip:  # polled: the bound starts again from here
                self._pass_due = _monotonic() + PASS_EVERY
        if not skip:
            queue = self._queues[loop] = [_OPENED]
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                if self._queues.get(loop) is queue:  # the others that joined still go
                    del queue[0]
                    if queue:
                        loop.call_soon(self._flush, loop)
                    else:
                        del self._queues[loop]
                raise
            self._pass_due = _monotonic() + PASS_EVERY
        if queue is None or (len(queue) == 1 and not self._closed):
            if queue is not None:
                del self._queues[loop]
            if request is not None:
                result = (
                    self._commit_statement(request)
                    if self._save_next and _one_statement(request)
                    else self._commit_lone(
                        _pages((request,)), self._append_one, self._append_cursor, request
                    )
                )
            else:
                assert row is not None
                result = self._commit_lone(
                    3 + ((len(row[3]) + 1100) >> 11), self._append_row, self._append_cursor, *row
                )
            if result is not _BUSY:
                self._committed(1)
                return result  # type: ignore[no-any-return]
            # the writer is busy: the thread takes it
            queue = self._queues[loop] = [_OPENED] if queue is None else queue
        future: asyncio.Future[_Outcome] = loop.create_future()
        queue[0] = (request if request is not None else row, future)  # type: ignore[assignment]
        self._flush(loop)
        return await future

    def _commit_statement(self, request: AppendRequest) -> Any:
        """:meth:`_commit_lone` of :meth:`_append_one` for :func:`_one_statement`'s
        case, as ONE statement in autocommit (:data:`_APPEND_NEXT`): what it returns —
        the result, a duplicate's result, the refusal (nothing written), the
        constraint's error, or :data:`_BUSY` (nothing written: the writer or the
        file's lock busy; the writer thread then makes it with its statements)."""
        event = request.events[0]
        row = (
            request.agent_id,
            event.seq,
            event.type,
            event.timestamp,
            event.payload,
            event.checksum,
            request.head_tag,
            request.expected_tag,
            request.idempotency_key,
        )
        return self._one_row(row, _pages((request,)))

    def _one_row(self, row: KeyedRow, pages: int) -> Any:
        """:data:`_APPEND_NEXT` of one event's columns, committed now
        (:meth:`_commit_statement`, :meth:`commit_keyed`): what
        :meth:`_commit_statement` returns."""
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(blocking=False):
            return _BUSY  # (moved: the writer thread's _begin raises StoreLost)
        agent_id, seq, event_type, timestamp, payload, checksum, head_tag, expected_tag, key = row
        cur = self._append_cursor
        try:
            cur.execute(
                _APPEND_NEXT,
                (
                    agent_id,
                    seq,
                    event_type,
                    timestamp,
                    _bind(payload),
                    _bind(checksum),
                    _bind_tag(head_tag),
                    _bind_tag(expected_tag),
                    key,
                ),
            )
        except BaseException as exc:
            return self._statement_failed(exc, agent_id, seq, key)
        finally:
            self._writer_busy.release()
        self.append_commits += 1
        self._wal_pages += pages * self._wal_scale
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        return AppendResult(agent_id, seq, seq)

    def _statement_failed(
        self, exc: BaseException, agent_id: str, seq: int, key: str | None
    ) -> Any:
        """What ONE statement in autocommit (:data:`_SAVE_NEXT`, :data:`_APPEND_NEXT`)
        that raised ``exc`` comes to, the writer still held: the refusal (the head
        moved: :class:`ConflictError`), a duplicate's result (``key`` stored already),
        the constraint's error, or :data:`_BUSY` (the file's lock busy) — nothing
        written in each case (the statement rolled back). Anything else is raised
        (a SQLite error translated), the writer's transaction rolled back if open."""
        try:
            if isinstance(exc, sqlite3.IntegrityError):
                cur = self._append_cursor
                if exc.args and exc.args[0] == _MOVED:  # refused
                    found = cur.execute(_HEAD_SEQ, (agent_id,)).fetchone()
                    return ConflictError(agent_id, seq - 1, found[0] if found is not None else 0)
                row = None if key is None else cur.execute(_KEY_RANGE, (agent_id, key)).fetchone()
                if row is None:
                    return self._failure(exc)
                return AppendResult(agent_id, row[0], row[1], duplicate=True)
            if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                return _BUSY
            conn = self._writer
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            raise exc
        except sqlite3.Error:
            with _translated(self.path, agent_id):
                raise

    def commit_keyed(self, row: KeyedRow) -> AppendResult | None:
        """:meth:`Backend.commit_keyed`: in :meth:`commit_next`'s case (writable, inline
        writes, no commit queue nor batch in flight, no other task of the loop ready, no
        pass due, the writer idle) and on an existing stream (``seq`` > 1), the event
        committed now as ONE statement (:data:`_APPEND_NEXT`: the key claimed, the
        head's compare-and-set, the event row): its result — a duplicate's when the key
        was there (nothing written) —, the refusal raised (nothing written). None, with
        nothing done, otherwise (a busy write lock too): the caller then makes the
        append by :meth:`append`."""
        seq = row[1]
        if (
            seq < 2
            or not self._save_next
            or self.readonly
            or self._closed
            or not self.inline_writes
            or self._queues
            or self._in_flight
        ):
            return None
        loop = _last_loop[0]
        if loop is None or loop._thread_id != _get_ident():  # type: ignore[attr-defined]
            running = asyncio.get_running_loop()
            if not isinstance(running, asyncio.BaseEventLoop):
                return None
            _last_loop[0] = loop = running
        if loop._ready:  # type: ignore[attr-defined]
            return None  # another task is ready: append lets it run first
        if (now := _monotonic()) >= self._pass_due:
            if not _nothing_waits(loop):
                return None
            self._pass_due = now + PASS_EVERY
        result = self._one_row(row, 3 + ((len(row[4]) + 1100) >> 11))
        if result is _BUSY:
            return None
        self._committed(1)
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]

    def _commit_lone(self, pages: int, write: Callable[..., Any], *args: Any) -> Any:
        """``write(*args)`` (one append's statements: :meth:`_append_one` or
        :meth:`_append_row`) committed on this thread when the writer is idle, as
        :meth:`_inline` and :meth:`_append_batch_sync` do it, written out for one
        append (no list of requests, no results list, no per-request loop): what
        ``write`` returns, the refusal it raised (nothing written), or :data:`_BUSY`
        (nothing written) when the writer or the file's lock is busy. ``pages`` are
        the WAL pages it adds (as :func:`_pages`)."""
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(blocking=False):
            return _BUSY  # (moved: the writer thread's _begin raises StoreLost)
        local = self._local
        local.inline = True
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:
            try:
                try:
                    cur.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:
                    self._begin(cur)  # (busy: raises _Busy; else the error, or it began)
                try:
                    try:
                        result = write(*args)
                    except (ConflictError, LeaseLost) as exc:
                        result = exc  # refused before anything was written
                    except sqlite3.IntegrityError as exc:
                        cur.execute("ROLLBACK")
                        return self._failure(exc)
                    cur.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                self.append_commits += 1
            except sqlite3.Error:
                with _translated(self.path, _agent_of(self.path, [_lone(args)])):
                    raise
        except _Busy:
            return _BUSY  # nothing written: wait for the lock on the writer thread
        finally:
            local.inline = False
            self._writer_busy.release()
        self._wal_pages += pages * self._wal_scale  # (_wrote, its common case written out)
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        return result

    def _inline(self, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """Commit ``requests`` on this thread when the writer is idle and no checkpoint
        waits; None (nothing written) when the writer or the file's lock is busy."""
        if self._checkpoint_due or not self._writer_busy.acquire(blocking=False):
            return None
        local = self._local
        local.inline = True
        try:
            return self._append_batch_sync(requests)
        except _Busy:
            return None  # nothing written: wait for the lock on the writer thread
        finally:
            local.inline = False
            self._writer_busy.release()

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        pending = self._queues.pop(loop, None)
        if not pending:
            return
        if len(pending) > self.MAX_BATCH:
            self._queues[loop] = pending[self.MAX_BATCH :]
            del pending[self.MAX_BATCH :]
        # the queue's requests and their futures, apart (one C-level pass: every entry
        # is a pair); an append whose caller was cancelled before this flush is
        # dropped (nothing written)
        requests, futures = zip(*pending, strict=False)
        if _any_cancelled(futures):
            kept = [(r, f) for r, f in pending if not f.cancelled()]
            if not kept:
                return self._next(loop)
            requests, futures = zip(*kept, strict=False)
        if self._closed:
            _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
            return self._next(loop)
        # As in _write: a checkpoint queued on the writer thread goes first, and this
        # commit queues behind it there. (Winning the idle lock inline here instead let
        # a loop of saves starve the checkpoint on a loaded machine: the WAL grew by
        # every commit made while it waited, 14-17 MB instead of ~7 MB in CI.)
        ready = getattr(loop, "_ready", None)  # (None: a loop without it, e.g. uvloop)
        if (
            len(requests) == 1
            or (ready is not None and len(requests) + len(ready) <= INLINE_BATCH)
            or (ready is not None and not ready and self._loop_idle(loop))
        ):
            try:
                results = self._inline(requests)
            except BaseException as exc:
                _settle(futures, exc)
                if not isinstance(exc, Exception):
                    raise
                return self._next(loop)
            if results is not None:
                _settle(futures, results)
                self._committed(len(requests))
                return self._next(loop)
        else:
            try:
                written = self._write_batch(requests)
            except BaseException as exc:
                _settle(futures, exc)
                if not isinstance(exc, Exception):
                    raise
                return self._next(loop)
            if written is not None:  # the transaction is open, _writer_busy held
                if not self._hand_commit(loop, futures, requests, written):
                    _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
                    return self._next(loop)
                self._in_flight.add(loop)  # (its landing runs on this loop: after this)
                return None
        try:
            done = loop.run_in_executor(
                self._writer_pool, self._locked, self._append_batch_sync, requests
            )
        except RuntimeError:  # the writer pool was shut down by close()
            _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
            return self._next(loop)
        self._in_flight.add(loop)
        done.add_done_callback(functools.partial(self._landed_future, loop, futures, len(requests)))
        return None

    def _loop_idle(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether ``loop`` would sit idle during a batch's commit: no other callback
        ready (checked by the caller) and no I/O or timer waiting — not polled when a
        pass of the loop was made less than :data:`PASS_EVERY` ago (as a lone append's
        :meth:`commit_next`). Then the batch is committed on the loop, its fsync
        included (:meth:`_flush`): handing its COMMIT to the commit thread would leave
        the loop nothing to do but wait for the landing, and the two thread hops cost
        more than the overlap they allow (docs/benchmarks.md, "group3: a batch
        committed on the loop")."""
        now = _monotonic()
        if now < self._pass_due:
            return True
        if not _nothing_waits(loop):
            return False
        self._pass_due = now + PASS_EVERY
        return True

    def _landed_future(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        appends: int,
        f: asyncio.Future[list[_Outcome]],
    ) -> None:
        self._landed(loop, futures, appends, _outcome(f))

    def _landed(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        appends: int,
        outcome: list[_Outcome] | BaseException,
    ) -> None:
        """A batch of ``loop``'s queue is done (committed, or failed as a whole): its
        appends learn their outcomes and the appends that queued meanwhile go next."""
        self._in_flight.discard(loop)
        _settle(futures, outcome)
        if not isinstance(outcome, BaseException):
            self._committed(appends)
        self._next(loop)

    def _write_batch(self, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """BEGIN and the statements of several appends, on this thread (the event loop),
        the transaction left open for :meth:`_hand_commit` with ``_writer_busy`` held;
        None (nothing written, nothing held) when the writer or the file's lock is busy
        or a checkpoint waits.

        Why the loop writes the batch itself: on the writer thread, every statement
        releases the GIL and must take it back from the loop, which holds it while it
        prepares the next batch's saves — so the writer's statements ran only once the
        loop went idle, and the commit never overlapped the loop's work
        (docs/benchmarks.md, "group11"). Written here, only the COMMIT (the fsync,
        GIL released) is left for another thread."""
        if self._checkpoint_due or not self._writer_busy.acquire(blocking=False):
            return None
        local = self._local
        local.inline = True
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:
            try:
                self._begin(cur)
                try:
                    try:
                        results = self._append_all(cur, requests)
                    except sqlite3.IntegrityError:
                        # a constraint fired after some rows of a request were written
                        cur.execute("ROLLBACK")
                        self._begin(cur)
                        results = self._append_all(cur, requests, savepoints=True)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error:
                with _translated(self.path, _agent_of(self.path, requests)):
                    raise
        except _Busy:
            local.inline = False
            self._writer_busy.release()
            return None  # nothing written: wait for the lock on the writer thread
        except BaseException:
            local.inline = False
            self._writer_busy.release()
            raise
        local.inline = False
        return results

    def _hand_commit(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        requests: Sequence[_Queued],
        results: list[_Outcome],
    ) -> bool:
        """COMMIT the transaction :meth:`_write_batch` left open, on the commit thread;
        the loop waits until that thread runs (it holds the GIL then, and lets go of it
        in the COMMIT's fsync) instead of letting it wait for the GIL until the loop is
        idle. The thread hands the outcome back to ``loop`` itself (:meth:`_landed`,
        with ``call_soon_threadsafe``: no executor future, nor the asyncio future
        chained to it, nor the extra pass of the loop that chain took). False when the
        commit pool was shut down (rolled back here).

        The wait is a bare lock the thread releases (no ``threading.Event``: its
        condition variable, waiter lock and ``with`` blocks were Python run on both
        threads at every commit)."""
        entered = threading.Lock()
        entered.acquire()
        try:
            self._commit_pool.submit(
                self._commit_written, loop, futures, requests, results, entered
            )
        except RuntimeError:  # shut down by close()
            conn = self._writer
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            self._writer_busy.release()
            return False
        entered.acquire()  # released by the commit thread once it runs
        return True

    def _commit_written(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        requests: Sequence[_Queued],
        results: list[_Outcome],
        entered: threading.Lock,
    ) -> None:
        entered.release()  # first: the loop waits for it
        outcome: list[_Outcome] | BaseException = results
        try:
            conn = self._writer
            try:
                assert conn is not None  # (closing takes _writer_busy first: held here)
                try:
                    try:
                        self._append_cursor.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                except sqlite3.Error:
                    with _translated(self.path, _agent_of(self.path, requests)):
                        raise
                self.append_commits += 1
            finally:
                self._writer_busy.release()
            self._wrote(_pages(requests))
        except BaseException as exc:  # the whole commit failed: every append learns it
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(self._landed, loop, futures, len(requests), outcome)

    def _committed(self, appends: int) -> None:
        for listener in self.commit_listeners:
            listener(appends)

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        """After a commit of ``loop``'s queue: the appends that joined meanwhile go next."""
        if loop in self._queues and loop not in self._in_flight:
            self._flush(loop)

    appends_together = True
    guards_from_base = True  # (_from_base_sync: the guard's check in its transaction)
    guards_renames = True  # (_rename_keys_sync: the same)
    changes_alone_together = True  # (a conditional delete alone: delete_agent_at)
    changes_leases_and_rewrites = True
    prunes_together_at_head = True
    replaces_snapshots = True
    checks_absence_together = True

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_together(requests, changes, self)
        done: list[AppendResult | None] = await self._write(
            self._append_together_sync, requests, changes
        )
        self._committed(len(requests))
        return done

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        valid: list[AppendRequest] = []
        errors: dict[int, BaseException] = {}
        for i, request in enumerate(requests):
            try:
                validate_request(request)
                valid.append(request)
            except ConfigurationError as exc:
                errors[i] = exc
        done: list[AppendResult | BaseException]
        if not valid:
            done = []
        elif len(valid) == 1 and self.inline_writes:
            one = await self._join_commit(valid[0], asyncio.get_running_loop())
            assert one is not None  # (a request's outcome)
            done = [one]
        else:  # several appends: the writer thread, while the loop prepares the next
            done = await self._write(self._append_batch_sync, valid, inline=False)
            self._committed(len(valid))
        it = iter(done)
        return [errors[i] if i in errors else next(it) for i in range(len(requests))]

    def _save_snapshot_sync(self, agent_id: str, snapshot: RawSnapshot) -> None:
        with self._writing(agent_id) as conn:
            row = conn.execute(
                "SELECT head_seq FROM sk_agents WHERE agent_id = ?", (agent_id,)
            ).fetchone()
            head = row[0] if row else 0
            if not 0 < snapshot.seq <= head:
                raise ConflictError(agent_id, snapshot.seq, head)
            self._put_snapshot(conn, agent_id, snapshot)

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await self._write(self._save_snapshot_sync, agent_id, snapshot)

    def _from_base_sync(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys,
        raise_floor: bool,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        with self._writing(request.agent_id) as conn:
            if guard is not None:  # (ConflictError: the transaction rolled back)
                self._change(conn, guard)
            # a new stream's head claimed (refused if the agent exists), its events
            # from base + 1, then its base snapshot: one transaction
            result = self._append_one(conn, dataclasses.replace(request, expected_seq=0))
            self._put_snapshot(conn, request.agent_id, base)
            now = time.time()  # (kept records: stored now, their appends gone)
            conn.executemany(
                "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(request.agent_id, name, first, last, now) for name, first, last in kept_keys],
            )
            if raise_floor:  # in the same transaction (Backend.append_from_base)
                first = sqlite_feed.feed_position(conn, request.agent_id, base.seq + 1)
                if first is not None:
                    sqlite_feed.trim_feed(conn, first)
        return result

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        kept = tuple(kept_keys)
        result: AppendResult = await self._write(
            self._from_base_sync, request, base, kept, raise_floor, guard
        )
        return result

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
        sqlite_fds.sweep(self.path)
