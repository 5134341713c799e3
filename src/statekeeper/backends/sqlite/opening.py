"""A store file opened or created: the checks of an existing file before SQLite
touches it, a new file made whole (schema in a temporary file, linked into place),
the writer connection opened and its WAL started."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from ..._files import place_unless_exists, sync_directory
from ...errors import BackendError, ConfigurationError, NotAStore
from . import fds as sqlite_fds
from .base import LENGTH_LIMITS
from .base import translated as _translated
from .engine import SQLiteEngine
from .fileid import file_id as _file_id
from .files import APPLICATION_ID, connect_read_only
from .schema import SCHEMA_VERSION
from .statements import _prepare_save_next, _prepare_writes

_HEADER = b"SQLite format 3\x00"


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


def _make_folder(path: str) -> None:
    """Create the folder of a store file that is to be created, or say why it cannot be."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else folder
        why = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise BackendError(f"{path}: cannot create the folder {where}: {why}") from exc


class SQLiteOpening(SQLiteEngine):
    """Opening the store file: the writer connection, and a new file created whole."""

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
