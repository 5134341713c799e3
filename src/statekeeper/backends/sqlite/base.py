"""What the parts of :class:`~statekeeper.backends.sqlite.SQLiteBackend` stand on.

The backend is one class assembled from parts, one job each:

* the engine — the connections, the write machinery (the writer connection and its
  lock, the inline/writer-thread commit queue, group batches, WAL checkpoints) and
  every append: :mod:`.backend` and its parts on :class:`~.engine.SQLiteEngine`
  (:mod:`.opening`, :mod:`.schema`, :mod:`.connections`, :mod:`.checkpoints`,
  :mod:`.appends`, :mod:`.changes`, :mod:`.lone`, :mod:`.commits`);
* :mod:`.reads` — the read statements (streams, heads, listings, the feed);
* :mod:`.leases` — leases and their fencing tokens;
* :mod:`.admin` — maintenance: rewrites, prunes, deletes, markers, feed trims,
  exports and file copies, schema version and health.

Each part is a mixin deriving from :class:`SQLitePart`, which declares (for the type
checker only) what the engine provides: the per-thread read connection, the write
entry points and the settings. Here too: :func:`translated`, sqlite3's errors as
statekeeper's typed ones, which every part uses.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ...errors import BackendError, IntegrityError, StateTooLarge
from ...records import RawSnapshot, StreamChange
from ..base import Backend

__all__ = ["LENGTH_LIMITS", "Executes", "SQLitePart", "Synchronous", "translated"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

#: what runs the statements of a write: the writer connection or its append cursor
Executes: TypeAlias = sqlite3.Connection | sqlite3.Cursor


@contextlib.contextmanager
def translated(path: str, agent_id: str = "*", seq: int | None = None) -> Iterator[None]:
    """Turn sqlite3 errors into statekeeper's typed errors (naming the agent, and the
    first seq of the range, a failed read was for)."""
    try:
        yield
    except sqlite3.IntegrityError as exc:  # a constraint we rely on for CAS fired
        raise BackendError(f"{path}: constraint violated: {exc}") from exc
    except sqlite3.DataError as exc:
        if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_TOOBIG:
            raise IntegrityError(
                agent_id, seq, f"database file {path} is unreadable: {exc}"
            ) from exc
        # a value over the connection's length limit, refused when it was bound (was:
        # "database file ... is unreadable", an IntegrityError: a sound file taken for
        # a damaged one); the write's transaction was rolled back
        raise StateTooLarge(
            agent_id, "record", 0, _length_limit(path), engine="SQLite SQLITE_LIMIT_LENGTH"
        ) from exc
    except sqlite3.OperationalError as exc:
        if "Could not decode to UTF-8" in str(exc):  # a BLOB rewritten as (bad) TEXT
            raise IntegrityError(agent_id, seq, f"a stored record is not bytes: {exc}") from exc
        raise BackendError(f"{path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:  # "file is not a database", "malformed"
        raise IntegrityError(agent_id, seq, f"database file {path} is unreadable: {exc}") from exc


#: each store file's writer connection's ``SQLITE_LIMIT_LENGTH`` (the longest value it
#: stores, in bytes), set when the writer opens: what :func:`translated` names when
#: SQLite refuses a value as too big
LENGTH_LIMITS: dict[str, int] = {}


def _length_limit(path: str) -> int:
    limit = LENGTH_LIMITS.get(path)
    if limit is None:  # (no writer of this process opened the file: SQLite's default)
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            limit = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    return limit


class SQLitePart(Backend):
    """The base of each part of :class:`~statekeeper.backends.sqlite.SQLiteBackend`:
    what a part uses of the engine, declared for the type checker (the engine,
    :mod:`.sqlite`, defines all of it)."""

    path: str
    readonly: bool
    synchronous: Synchronous
    busy_timeout: float
    clock: Callable[[], float]
    _closed: bool
    _writer: sqlite3.Connection | None

    if TYPE_CHECKING:

        def _reader(self) -> sqlite3.Connection:
            """The calling thread's read connection."""

        def _read_cursor(self) -> sqlite3.Cursor:
            """The calling thread's kept cursor on its read connection."""

        def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
            """The rows of one read statement (on the idle writer connection before
            the thread has a read connection)."""

        def _as_created(self) -> bool:
            """True while the file this backend's open created holds no marker and no
            agent, nothing committed to it since (then such a read needs no statement)."""

        async def _write(self, fn: Any, *args: Any, inline: bool = True) -> Any:
            """Run ``fn(*args)`` holding the writer connection (inline or on the writer
            thread)."""

        def _writing(
            self, agent_id: str = "*"
        ) -> contextlib.AbstractContextManager[sqlite3.Connection]:
            """The writer connection inside one write transaction."""

        @staticmethod
        def _put_snapshot(conn: Executes, agent_id: str, snap: RawSnapshot) -> None:
            """Store a snapshot row in the caller's transaction."""

        @staticmethod
        def _checksum_in(conn: Executes, agent_id: str, seq: int) -> bytes | None:
            """The stored checksum of ``agent_id``'s event at ``seq`` (None: no such
            event), read in the caller's transaction."""

        def _change(self, conn: sqlite3.Connection, change: StreamChange) -> None:
            """Make ``change`` inside the caller's transaction (ConflictError: the
            caller rolls back)."""

        @staticmethod
        def _delete_rows(conn: Executes, agent_id: str) -> bool:
            """Delete an agent's rows in the caller's transaction; True if it existed."""
