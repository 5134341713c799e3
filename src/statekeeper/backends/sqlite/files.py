"""Looking at a SQLite file without changing it: is it a statekeeper store, and did
statekeeper create it?

* **A statekeeper store** holds the ``sk_meta`` table with a ``schema_version`` row.
* **Created by statekeeper** (the ownership marker): the file's ``application_id``
  (bytes 68-71 of the header, ``PRAGMA application_id``) is :data:`APPLICATION_ID`.
  :class:`~statekeeper.backends.sqlite.SQLiteBackend` sets it only on a file it
  creates itself (the file did not exist when it was opened), before anything else is
  written, so another application's database never carries it — even one statekeeper's
  tables were later added to.

Nothing here writes: the header is read as bytes, and the tables through a
``mode=ro`` connection (which never creates, converts or rewrites the file).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from ...errors import BackendUnavailable, NotAStore
from . import fds as sqlite_fds

__all__ = [
    "APPLICATION_ID",
    "SqliteFile",
    "connect_read_only",
    "inspect_sqlite_file",
    "read_only_uri",
    "require_store_file",
]

#: ``PRAGMA application_id`` of a SQLite file statekeeper created: "SKST"
APPLICATION_ID = 0x534B5354
_MAGIC = b"SQLite format 3\x00"

Kind = Literal["missing", "directory", "empty", "not-sqlite", "foreign", "store"]


@dataclass(frozen=True, slots=True)
class SqliteFile:
    """What a path holds, as far as statekeeper is concerned."""

    path: str
    kind: Kind
    #: the file carries statekeeper's ownership marker (it created the file)
    owned: bool = False
    detail: str = ""

    @property
    def is_store(self) -> bool:
        return self.kind == "store"


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """``path`` as a SQLite ``mode=ro`` URI: opened or attached so, it is never
    created, its journal mode never changed, never written."""
    return "file:" + quote(os.path.abspath(os.fspath(path))) + "?mode=ro"


def connect_read_only(path: str | os.PathLike[str], timeout: float = 30.0) -> sqlite3.Connection:
    """A connection that can only read ``path`` (:func:`read_only_uri`)."""
    return sqlite3.connect(
        read_only_uri(path),
        uri=True,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=False,
    )


def _header(path: str) -> bytes:
    # (not open/close: a connection of this process may hold the file's locks)
    return sqlite_fds.read_head(path, 100)


def inspect_sqlite_file(path: str | os.PathLike[str]) -> SqliteFile:
    """Classify ``path`` without writing to it (see the module documentation).

    Raises :class:`OSError` when the file exists but cannot be read, and
    :class:`~statekeeper.errors.BackendUnavailable` when another process holds it locked
    or SQLite cannot read it now (an I/O error, a full disk: :func:`_unreadable`).
    """
    name = os.fspath(path)
    p = Path(name)
    if not p.exists():
        return SqliteFile(name, "missing")
    if p.is_dir():
        return SqliteFile(name, "directory")
    header = _header(name)
    if not header:
        return SqliteFile(name, "empty")
    if not header.startswith(_MAGIC):
        return SqliteFile(name, "not-sqlite")
    try:
        conn = connect_read_only(name, timeout=5.0)
    except sqlite3.Error as exc:
        _busy(name, exc)
        _unreadable(name, exc)
        return SqliteFile(name, "not-sqlite", detail=str(exc))
    try:
        owned = int(conn.execute("PRAGMA application_id").fetchone()[0]) == APPLICATION_ID
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sk_meta'"
        ).fetchone()
        if has_meta is None:
            return SqliteFile(name, "foreign", owned=owned)
        row = conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            return SqliteFile(name, "foreign", owned=owned)
        return SqliteFile(name, "store", owned=owned, detail=str(row[0]))
    except sqlite3.Error as exc:
        _busy(name, exc)
        _unreadable(name, exc)
        return SqliteFile(name, "not-sqlite", detail=str(exc))
    finally:
        conn.close()


def _busy(path: str, exc: sqlite3.Error) -> None:
    """A SQLite file another process holds locked (writing it) is not thereby "not a
    SQLite database": :class:`~statekeeper.errors.BackendUnavailable` saying so."""
    if getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        raise BackendUnavailable(
            f"{path} is locked by another process that is writing it ({exc}); it could "
            "not be read within 5 s and was left unchanged: try again once it is done"
        ) from None


#: SQLite's own verdicts on a file's content: the file is not (or no longer) a database
_NOT_A_DATABASE = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})


def _unreadable(path: str, exc: sqlite3.Error) -> None:
    """A file with a SQLite header that SQLite could not read for another reason than
    its content — an I/O error, a file it could not open or make (the ``-shm`` of a WAL
    database on a full disk, past a file-size limit, in a read-only folder), no
    memory — is not thereby "not a SQLite database" (whose advice, ``statekeeper
    init``, invites replacing a whole store):
    :class:`~statekeeper.errors.BackendUnavailable` naming SQLite's error."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or code & 0xFF in _NOT_A_DATABASE:
        return
    name = getattr(exc, "sqlite_errorname", "") or f"code {code}"
    raise BackendUnavailable(
        f"{path} cannot be read: {exc} ({name}): a full disk, a file-size limit or a"
        " folder that cannot be written (SQLite makes a -shm file beside a WAL database"
        " to read it)? It was left unchanged"
    ) from None


def _why(info: SqliteFile) -> str:
    return {
        "missing": "does not exist",
        "directory": "is a directory",
        "empty": "is an empty file",
        "not-sqlite": "is not a SQLite database",
        "foreign": "is another application's SQLite database",
        "store": "is a statekeeper store",
    }[info.kind]


def require_store_file(path: str | os.PathLike[str]) -> SqliteFile:
    """``path`` classified; :class:`~statekeeper.errors.NotAStore` unless it is a
    statekeeper store. Nothing is written either way."""
    try:
        info = inspect_sqlite_file(path)
    except OSError as exc:
        raise NotAStore(os.fspath(path), f"it cannot be read ({exc.strerror or exc})") from exc
    if not info.is_store:
        target = os.fspath(path)
        # a missing file can be created where it was asked for; anything else is kept
        url = f"sqlite:///{target}" if info.kind == "missing" else "URL"
        raise NotAStore(target, f"it {_why(info)}; run `statekeeper init {url}` to create one")
    return info


def describe(info: SqliteFile) -> str:
    """A few words on what ``info`` is (for messages)."""
    return _why(info)
