"""The PostgreSQL backend's export for backups: the stream tables streamed out by the
server itself (``COPY (SELECT ...) TO STDOUT (FORMAT binary)``), no row becoming a
Python object, under ONE ``REPEATABLE READ`` snapshot (writers keep committing). A
mixin of :class:`~.backend.PostgresBackend`.

The rows are those the connection's role may read: on a store whose policy is
enforced by the database (row-level security, one role per principal) a tenant's
copy holds its namespaces only, and the ``prefix`` filter (a store opened in a
namespace) narrows it further. The sections are written one after the other in
this order: heads (``sk_agents``), events, snapshots, idempotency keys, each ordered
by agent id (``COLLATE "C"``: byte order, Python's ``str`` order) then seq; the
reader is :mod:`statekeeper.governance.backup.pgcopy`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

from ..._joined import run_joined
from ...errors import BackendError
from .part import PostgresPart

__all__ = ["COPIED", "CopyStopped", "Export"]

#: each section: its table and the columns copied, in order (the same as the SQLite
#: copy's rows: a restore reads both the same way)
COPIED = (
    ("sk_agents", "agent_id, head_seq, head_tag", "agent_id", "head_seq > 0"),
    ("sk_events", "agent_id, seq, kind, ts, payload, checksum", "agent_id, seq", ""),
    ("sk_snapshots", "agent_id, seq, ts, payload, checksum", "agent_id, seq", ""),
    ("sk_idempotency", "agent_id, key, first_seq, last_seq", "agent_id, first_seq", ""),
)

_HEADS = """
SELECT a.agent_id, a.head_seq, coalesce(e.checksum, ''::bytea)
FROM {s}.sk_agents a
LEFT JOIN {s}.sk_events e ON e.agent_id = a.agent_id AND e.seq = a.head_seq
WHERE a.head_seq > 0 {a_range}
ORDER BY a.agent_id
"""

_TOTALS = """
SELECT (SELECT count(*) FROM {s}.sk_events WHERE true {range}),
       (SELECT coalesce(sum(head_seq), 0) FROM {s}.sk_agents WHERE head_seq > 0 {range}),
       (SELECT count(DISTINCT agent_id) FROM {s}.sk_snapshots WHERE true {range})
"""

_COMPACTED = """
SELECT a.agent_id, a.head_seq, f.first - 1, s.checksum, f.n
FROM {s}.sk_agents a
JOIN (SELECT agent_id, min(seq) AS first, count(*) AS n FROM {s}.sk_events
      WHERE true {range} GROUP BY agent_id) f ON f.agent_id = a.agent_id
LEFT JOIN {s}.sk_snapshots s ON s.agent_id = a.agent_id AND s.seq = f.first - 1
WHERE a.head_seq > 0 AND (f.first > 1 OR f.n != a.head_seq)
ORDER BY a.agent_id
"""


class CopyStopped(BackendError):
    """A backup's ``COPY`` out was cancelled: its thread stopped before the next piece."""


#: the longest a cancel request waits for the server (its own thread: never the loop)
CANCEL_WAIT = 30.0


class _Stop:
    """A backup copy's stop, from another thread: the statement its thread runs is
    cancelled by the server (a ``COPY`` cut off mid-stream, a sort before its first
    row as well) and :meth:`check` raises :class:`CopyStopped` before the next one.

    The cancel request is a network round trip of its own (a new connection to the
    server, which answers when it has acted): made on the event loop it stopped every
    other task for as long (forever, with a server that accepts and never answers).
    It is sent from a thread of its own, bounded by :data:`CANCEL_WAIT`
    (``cancel_safe``: libpq's non-blocking cancel); the stop returns at once."""

    def __init__(self, schema: str) -> None:
        self._schema = schema
        self._lock = threading.Lock()
        self._stopped = False
        self._conn: psycopg.Connection[Any] | None = None
        self._request: Any = None  # (psycopg 3.1, no ``cancel_safe``: libpq's PQcancel)
        #: the thread sending the cancel request, once one is sent (tests join it)
        self.sending: threading.Thread | None = None

    @contextlib.contextmanager
    def running(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Within (the copy's thread): a stop cancels what ``conn`` runs; never once
        the block is left (the connection is closed after it)."""
        # psycopg 3.1 (pyproject allows >= 3.1.18) has no ``cancel_safe`` (3.2): its
        # blocking cancel, sent from the thread below all the same (made here, by the
        # copy's thread: libpq's rule); was an AttributeError there, nothing cancelled
        request = None if hasattr(conn, "cancel_safe") else conn.pgconn.get_cancel()
        with self._lock:
            self._conn, self._request = conn, request
        try:
            self.check()
            yield
        finally:
            with self._lock:
                self._conn = self._request = None

    def check(self) -> None:
        if self._stopped:
            raise CopyStopped(f"the backup copy of schema {self._schema} was cancelled")

    def __call__(self) -> None:
        with self._lock:
            self._stopped = True
            conn, request = self._conn, self._request
            if conn is None or self.sending is not None:
                return
            self.sending = threading.Thread(
                target=_cancel, args=(conn, request), name="sk-pg-cancel", daemon=True
            )
        self.sending.start()


def _cancel(conn: psycopg.Connection[Any], request: Any) -> None:
    """Ask the server to cancel what ``conn`` runs (its own thread); a connection closed
    meanwhile, a server that does not answer in time: nothing more to do (the copy's
    thread meets the stop before its next statement). ``request``: psycopg 3.1's."""
    with contextlib.suppress(psycopg.Error):
        if request is not None:
            request.cancel()
        else:
            conn.cancel_safe(timeout=CANCEL_WAIT)


def _range(prefix: str, column: str) -> tuple[sql.Composable, list[str]]:
    """The ``AND`` clause keeping ids that start with ``prefix`` (none if empty)."""
    if not prefix:
        return sql.SQL(""), []
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    clause = sql.SQL(" AND {c} >= %s AND {c} < %s").format(c=sql.SQL(column))
    return clause, [prefix, upper]


class Export(PostgresPart):
    """Backups' export of :class:`~.backend.PostgresBackend`."""

    async def copy_out(self, prefix: str, write: Callable[[bytes], None]) -> dict[str, Any] | None:
        """See :meth:`~statekeeper.backends.base.Backend.copy_out`.

        On a connection of its own (same server, role and settings as the pool's),
        driven synchronously in a thread: libpq hands ``COPY`` data over one row per
        message, and psycopg's async wait per message cost 3x the CPU of its
        synchronous one (0.35 against 0.11 CPU-s for 150,000 event rows, 69 MB;
        docs/benchmarks.md, fourth pass); the pool's connections stay free.

        Cancelled, the thread is stopped (:class:`_Stop`: the statement running is
        cancelled by the server, none started after) and waited for before the
        cancellation goes on: it never feeds ``write`` after this returns (the caller
        closes what ``write`` writes to), and its connection is closed by then."""
        self._check_open()
        stop = _Stop(self.schema)
        try:
            return await run_joined(stop, self._copy_out, prefix, write, stop)
        except psycopg.Error as exc:
            raise self._failure("backup copy", exc) from None

    def _copy_out(self, prefix: str, write: Callable[[bytes], None], stop: _Stop) -> dict[str, Any]:
        s = sql.Identifier(self.schema)
        plain, params = _range(prefix, "agent_id")
        on_a, a_params = _range(prefix, "a.agent_id")
        sizes: list[list[Any]] = []
        with (
            psycopg.connect(self.dsn, **self._connect_kwargs) as conn,
            stop.running(conn),
            conn.transaction(),
        ):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur = conn.cursor(binary=True)
            # the first query fixes the snapshot: every section and the heads below
            # read the same point in time
            cur.execute(sql.SQL(_TOTALS).format(s=s, range=plain), params * 3)
            row = cur.fetchone()
            assert row is not None
            events, accounted, snapshots = (int(v) for v in row)
            for table, columns, order, where in COPIED:
                statement = sql.SQL(
                    "COPY (SELECT {cols} FROM {s}.{t} WHERE true {w}{range}"
                    " ORDER BY {order}) TO STDOUT (FORMAT binary)"
                ).format(
                    cols=sql.SQL(columns),
                    s=s,
                    t=sql.Identifier(table),
                    w=sql.SQL(" AND " + where if where else ""),
                    range=plain,
                    order=sql.SQL(order),
                )
                size = 0
                stop.check()  # (per statement: no cost per row)
                with cur.copy(statement, params) as copy:
                    for piece in copy:
                        size += len(piece)
                        write(bytes(piece))
                sizes.append([table, size])
            stop.check()
            cur.execute(sql.SQL(_HEADS).format(s=s, a_range=on_a), a_params)
            heads = [(a, int(h), bytes(c)) for a, h, c in cur.fetchall()]
            compacted: list[tuple[str, int, int, bytes | None, int]] = []
            if events != accounted:
                cur.execute(sql.SQL(_COMPACTED).format(s=s, range=plain), params)
                compacted = [
                    (a, int(h), int(b), bytes(c) if c is not None else None, int(n))
                    for a, h, b, c, n in cur.fetchall()
                ]
        return {
            "tables": sizes,
            "heads": heads,
            "events": events,
            "snapshots": snapshots,
            "compacted": compacted,
        }
