"""Connecting to PostgreSQL: the URL's own options, which failures are worth a retry,
and the checks made on a pooled connection before it is used."""

from __future__ import annotations

import contextlib
import re
import select
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import ConfigurationError
from ..redact import mask_url, scrub
from ..url_options import float_option, int_option, split_query

__all__ = [
    "KeepsCursors",
    "check_connection",
    "check_schema",
    "kept_cursor",
    "milliseconds",
    "parse_postgres_url",
    "read_only_session",
    "regrow_while_waited",
    "session_setup",
    "transient",
]

#: statekeeper's own query-string options in a ``postgresql://`` URL
_OWN_OPTIONS = (
    "schema",
    "pool_min_size",
    "pool_max_size",
    "pool_timeout",
    "retry_timeout",
    "reconnect_timeout",
    "connect_timeout",
    "socket_timeout",
    "idle_transaction_timeout",
    "audit_lock_timeout",
    "partitions",
    "replica_url",
)
SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_schema(schema: str) -> None:
    """Refuse a schema name that is not a plain identifier, or that names one of
    PostgreSQL's own schemas (``information_schema``, ``pg_catalog``, ``pg_toast``,
    ``pg_temp_N``: the ``pg_`` prefix is reserved for them): a store there would mix
    its tables with the server's catalog, and dropping it would reach into it."""
    if type(schema) is not str or not SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema must be a plain identifier (letters, digits, _), not {schema!r}"
        )
    if schema.startswith("pg_") or schema == "information_schema":
        raise ConfigurationError(
            f"schema {schema!r} is one of PostgreSQL's system schemas (information_schema, "
            "pg_*): name a schema of the application's own"
        )


def parse_postgres_url(url: str) -> tuple[str, dict[str, Any]]:
    """Split a ``postgresql://`` URL into the DSN psycopg gets and statekeeper's options.

    ``postgres://`` and ``postgresql+psycopg://`` are accepted spellings. Returns the
    DSN (with every other query option left in place) and keyword arguments for
    :class:`PostgresBackend`. ``connect_timeout`` (seconds, fractions allowed) is
    taken out too: it bounds the first connection (see :class:`PostgresBackend`);
    ``socket_timeout`` bounds the statements of one pool checkout.
    ``partitions=N`` hash-partitions a new schema by agent id; ``replica_url=`` (a
    percent-encoded ``postgresql://`` URL) is a streaming replica that serves loads
    and the feed.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise ConfigurationError(
            f"bad PostgreSQL URL {mask_url(url)!r}: {scrub(str(exc), url)}"
        ) from None
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {mask_url(url)!r}")
    kwargs: dict[str, Any] = {}
    mine, keep = split_query(parts.query, _OWN_OPTIONS)
    for key, value in mine:
        if key in ("schema", "replica_url"):
            kwargs[key] = value
        elif key in ("partitions", "pool_min_size", "pool_max_size"):
            kwargs[key.removeprefix("pool_")] = int_option(key, value, url)
        else:
            positive = key in ("connect_timeout", "socket_timeout")
            kwargs[key] = float_option(key, value, url, positive=positive)
    dsn = urlunsplit(
        # libpq does not read "+" as a space: percent-encode (options=-c%20statement_timeout=…)
        ("postgresql", parts.netloc, parts.path, urlencode(keep, quote_via=quote), parts.fragment)
    )
    return dsn, kwargs


#: SQLSTATEs outside class 08 that mean "the connection went away", not "the statement
#: is wrong": admin_shutdown, crash_shutdown, cannot_connect_now, and the sessions the
#: server ends on its own timers (idle_session_timeout, idle_in_transaction_session_
#: timeout: the session and its transaction are gone, nothing of it committed)
_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})


async def read_only_session(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``configure`` hook of a read-only backend: the server refuses any write."""
    await conn.execute("SET default_transaction_read_only = on")


def session_setup(
    readonly: bool, idle_transaction_timeout: float, audit_lock_timeout: float = 10.0
) -> Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]:
    """The pool's ``configure`` hook: run once per new connection, in one round trip.

    ``idle_transaction_timeout`` (seconds, 0: the server's own setting) becomes the
    session's ``idle_in_transaction_session_timeout``. A transaction of several
    statements (``append_together``, ``append_from_base``, a rewrite) holds the change
    feed's advisory lock and its agents' row locks between them; a client frozen
    there (SIGSTOP, a paused VM, a partition) held them until its TCP connection died,
    and every subscriber's frontier stopped at its position meanwhile. The server
    itself now ends such a session, rolling its transaction back; single-statement
    appends run in autocommit and are never idle in a transaction. Set per session,
    not by ``SET LOCAL`` in each transaction: the hot path pays no statement at all.
    Only the pool's connections: a backup's ``COPY`` transaction (:mod:`.export`)
    waits on its own writer between statements and keeps the server's setting.

    ``extra_float_digits = 3``: floats read as text (a lease's expiry) carry every
    digit, whatever the role's or database's setting (a negative one rounded a lease's
    expiry, epoch seconds, to as little as one significant digit).
    ``audit_lock_timeout`` (seconds, 0: no bound) becomes the session's
    ``statekeeper.audit_lock_timeout`` (milliseconds): the longest a write waits for
    the audit log's head row (``sk_audit_head_lock``, migration 24), which any role
    that may write can hold locked.
    """
    statements = [
        "SET extra_float_digits = 3",
        f"SET statekeeper.audit_lock_timeout = '{milliseconds(audit_lock_timeout)}'",
    ]
    if readonly:
        statements.append("SET default_transaction_read_only = on")
    if idle_transaction_timeout > 0:
        ms = milliseconds(idle_transaction_timeout)
        statements.append(f"SET idle_in_transaction_session_timeout = {ms}")
    query = "; ".join(statements).encode()

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(query)

    return configure


def milliseconds(seconds: float) -> int:
    """A timeout in whole milliseconds (0 stays 0: no bound; any other at least 1)."""
    return max(1, round(seconds * 1000)) if seconds > 0 else 0


def transient(exc: BaseException) -> bool:
    """True for failures of the connection (not of the statement): worth a retry.

    SQLSTATE class 08, 57P01-57P03, and 57P05 / 25P03 (the server's idle timeouts
    ended the session); a pool timeout; an error the client library
    raised itself about its connection (no SQLSTATE: a broken socket, a closed
    connection); serialization failures and deadlocks (the transaction was rolled
    back, so running it again is safe). Anything else — ``statement_timeout``
    (57014), a size limit (54000), a permission, a constraint — is permanent.
    """
    if isinstance(exc, PoolTimeout):
        return True
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return True
    state = getattr(exc, "sqlstate", None)
    if state:
        return state.startswith("08") or state in _CONNECTION_STATES
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


async def check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Refuse a connection that is closed or whose server went away.

    A connection the server terminated (restart, ``pg_terminate_backend``) has an
    unread error or EOF waiting on its socket; only then is a round trip spent to
    confirm, so a healthy checkout costs one ``poll`` call, not a query.

    ``poll``, not ``select``: ``select`` refuses a descriptor numbered 1024 or more
    (``FD_SETSIZE``; "filedescriptor out of range"), so in a process with that many
    files and sockets open every checkout counted as a dead connection — closed,
    logged by psycopg_pool ("discarding closed connection") and dialled again, on
    every operation.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("connection is closed")
    try:
        ready = _readable(conn.pgconn.socket)
    except (OSError, ValueError, psycopg.Error) as exc:
        raise psycopg.OperationalError(f"connection socket is unusable: {exc}") from exc
    if ready:
        await conn.execute("")


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read (data, an error, EOF) now, without waiting;
    any descriptor number (``select.select`` only where there is no ``poll``: Windows,
    whose ``select`` limits how many sockets, not their numbers)."""
    if _poll is None:
        return bool(select.select([fd], [], [], 0)[0])
    poller = _poll()
    poller.register(fd, select.POLLIN)
    events = poller.poll(0)
    if events and events[0][1] & select.POLLNVAL:
        raise ValueError(f"descriptor {fd} is not open")
    return bool(events)


_poll = getattr(select, "poll", None)


class KeepsCursors(psycopg.AsyncConnection[Any]):
    """The pool's connections: each keeps a cursor per hot statement (:func:`kept_cursor`)."""

    _kept: dict[tuple[bytes, bool], psycopg.AsyncCursor[Any]] | None = None


def kept_cursor(
    conn: psycopg.AsyncConnection[Any], query: bytes, *, binary: bool = False
) -> psycopg.AsyncCursor[Any]:
    """The cursor ``conn`` keeps for ``query`` (a new one on other connections), its
    results in binary when ``binary``.

    psycopg makes a cursor's transformer — the parameters' dumpers — anew for every new
    cursor, and keeps it while the cursor runs the same query object again: for the group
    commit's 18 arrays that is ~15 µs of client CPU a batch (docs/benchmarks.md, "pg:").
    A connection serves one task at a time (a pool checkout), and so do its cursors.
    """
    if not isinstance(conn, KeepsCursors):
        return conn.cursor(binary=binary)
    kept = conn._kept
    if kept is None:
        kept = conn._kept = {}
    cur = kept.get((query, binary))
    if cur is None or cur.closed:
        cur = kept[query, binary] = conn.cursor(binary=binary)
    return cur


async def regrow_while_waited(pool: AsyncConnectionPool[Any]) -> None:
    """The pool's ``reconnect_failed`` callback: it gave up reconnecting after
    ``reconnect_timeout`` (the server still down); when operations are waiting for a
    connection, try again (``check()`` grows an empty pool).

    psycopg's pool grows only when a client starts to wait: without this, the appends
    already waiting sat until their own wait (``pool_timeout``) ran out even though the
    server was back, and a restart longer than ``reconnect_timeout`` (5 s; seen at load
    26 in a server-restart test) used up their whole retry budget."""
    if pool.closed or not pool.get_stats().get("requests_waiting"):
        return
    with contextlib.suppress(Exception):  # closed meanwhile: nobody waits any more
        await pool.check()
