"""PostgreSQL backend (extra ``postgres``): many workers, one database.

* psycopg 3 (async) with a :class:`psycopg_pool.AsyncConnectionPool`. Every connection
  option — TLS (``sslmode``, ``sslrootcert``…), ``connect_timeout``,
  ``application_name``, ``options`` — goes through the standard DSN
  (``postgresql://user:pass@host:5432/db?sslmode=verify-full``); statekeeper's own
  options (``schema``, ``pool_min_size``, ``pool_max_size``, ``pool_timeout``,
  ``retry_timeout``) are taken out of the query string before psycopg sees it.
* The schema is created and upgraded by numbered migrations recorded in
  ``<schema>.sk_migrations``; concurrent starters serialise on a transaction-scoped
  advisory lock, so exactly one of them applies each migration.
* Compare-and-append is one call to the ``sk_append`` SQL function (one round trip,
  one implicit transaction): the head row of ``sk_agents`` is advanced with
  ``UPDATE … WHERE head_seq = expected`` (or created with
  ``INSERT … ON CONFLICT DO NOTHING`` for the first append), and
  ``PRIMARY KEY (agent_id, seq)`` on ``sk_events`` backs it up. Row locks make two
  writers of one agent serialise in the database; writers of different agents never
  wait for each other — there is no process-wide lock.
* :meth:`PostgresBackend.append_batch` sends the whole batch as ONE statement
  (``sk_append_batch``: one round trip, one transaction, one commit — the store's
  ``group`` durability mode). A request that conflicts writes nothing and does not
  disturb the others; if a constraint fires, the batch is rolled back and its requests
  are applied one by one, so only the faulty one fails.
* Leases (``sk_leases``, expiry on the server's clock) with fencing: a fenced append
  locks the lease row ``FOR SHARE``, checks the token and appends in one transaction.
  The authenticated head tag is stored by the statement that moves the head, and
  ``rewrite`` (key rotation) replaces record bytes in one transaction under the locked
  head row.
* The first use (or :meth:`PostgresBackend.open`) dials the server once, bounded by
  ``connect_timeout``, before any pool exists: a server that is down, an unknown
  host or database, a refused login or a bad connection option raises
  :class:`~statekeeper.errors.BackendUnavailable` at once with the server's (or
  libpq's) own reason — no retries, no pool warnings.
* Only failures of the connection are retried: SQLSTATE class 08, an administrator
  or crash shutdown (57P01-57P03), a session ended by the server's idle timeouts
  (57P05, 25P03), a connection the client library found broken (no
  SQLSTATE), a pool timeout, and serialization failures / deadlocks. Every other
  error (``statement_timeout``, a size limit, a permission, a constraint) raises
  :class:`~statekeeper.errors.BackendRejected` at once with the server's message;
  nothing was written.
* Broken connections (server restart, ``pg_terminate_backend``, network cut) are
  detected when a connection is taken from the pool and replaced. An operation that
  fails on a lost connection is retried until ``retry_timeout``: reads always; an
  append after checking whether its commit landed — its events are compared with
  what is stored at their seqs — so an acknowledged write is never doubled and an
  unacknowledged one is never silently lost. When the outcome cannot be established
  the append raises :class:`~statekeeper.errors.BackendError` with
  ``maybe_applied=True``. When a group-commit batch fails, its requests are settled
  concurrently (one agent's requests in order): the good ones commit, the faulty one
  gets its own error, and none waits behind another's retries.

The backend is one class assembled from modules with one job each: ``connection.py``
(the URL's options, which failures are retried), ``schema.py`` (migrations,
partitioning, the read-only check), the mixins ``lifecycle.py`` (open, close, health),
``appends.py``, ``removals.py`` (prune, deletes), ``rewrites.py``, ``reads.py``,
``export.py``, ``leases.py``, ``keyexpiry.py``, ``markers.py`` and ``feed_api.py``,
``feed.py`` (the change feed's frontier and wake-ups), ``replica.py`` (read replicas);
this module holds the settings, the pool, the connections and the retry plumbing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ...errors import (
    BackendError,
    BackendRejected,
    BackendUnavailable,
    ConfigurationError,
)
from ...records import (
    RawEvent,
)
from ..base import Backend, Capability
from ..recovery import Reconnecting
from ..redact import mask_url, one_line, scrub
from ..scripts import named_blocks, read_script

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailable(
        "the PostgreSQL backend needs psycopg 3 and psycopg_pool: "
        "pip install 'statekeeper[postgres]'"
    ) from exc

from . import schema as _schema
from .appends import Appends
from .arrays import ADAPTERS as ARRAY_ADAPTERS
from .coalesce import Coalesced
from .connection import (
    KeepsCursors,
    check_connection,
    check_schema,
    kept_cursor,
    parse_postgres_url,
    regrow_while_waited,
    session_setup,
    transient,
)
from .export import Export
from .feed import FeedReader
from .feed_api import FeedApi
from .keyexpiry import KeyExpiry
from .leases import Leases
from .lifecycle import Lifecycle
from .loop_end import POOL_PREFIX, LoopEnd
from .markers import Markers
from .reads import Reads
from .refusals import audit_locked, denied, feed_locked, label, read_only
from .removals import Removals
from .replica import REPLICA_QUERIES, ReplicaReads
from .rewrites import Rewrites
from .schema import MIGRATIONS, SCHEMA_VERSION
from .watchdog import Watchdog

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresBackend", "parse_postgres_url"]

logger = logging.getLogger("statekeeper.backends.postgres")

T = TypeVar("T")


_PACKAGE = "statekeeper.backends.postgres"

#: every statement, by name (sql/queries.sql)
_QUERIES: dict[str, str] = named_blocks(read_script(_PACKAGE, "sql/queries.sql"))


#: group-commit batches committing at once (see ``Backend.batches_in_flight``)
BATCHES_IN_FLIGHT = 4


#: the longest audit_lock_timeout, seconds: PostgreSQL's lock_timeout (milliseconds,
#: an int4) set to it
_LOCK_TIMEOUT_MAX = 2147483.647


class PostgresBackend(
    Lifecycle,
    FeedApi,
    Removals,
    Markers,
    Appends,
    Export,
    KeyExpiry,
    Leases,
    Reads,
    Rewrites,
    Backend,
):
    """Streams and snapshots in PostgreSQL (``postgresql://user@host/db``).

    Args:
        dsn: a libpq connection string or URL (TLS and connection options included).
        schema: the schema holding statekeeper's tables (created if missing); give each
            application, tenant or test its own.
        min_size / max_size: connection pool bounds.
        pool_timeout: seconds to wait for a free connection.
        retry_timeout: seconds an operation keeps retrying after lost connections
            (server restart, killed backend) before it gives up.
        reconnect_timeout: seconds the pool keeps re-dialling (with backoff) to replace
            one lost connection before it frees the slot; the next request (or one
            already waiting) then dials afresh, so a long outage does not leave the
            pool in a long backoff.
        connect_timeout: seconds one connection attempt may take. The first use
            dials once within it and raises
            :class:`~statekeeper.errors.BackendUnavailable` with the reason if that
            fails; later (lost connections) the ``retry_timeout`` budget applies.
        socket_timeout: seconds the statements of one operation may take before the
            server counts as lost (a frozen server, a network that drops packets
            without a reset: neither ever closes the connection). The connection is
            given up and the operation retried like any lost connection, within
            ``retry_timeout``; an append whose outcome stays unknown raises
            :class:`~statekeeper.errors.BackendError` with ``maybe_applied=True``.
            Schema migrations are not bounded by it.
        idle_transaction_timeout: seconds a transaction of several statements may sit
            idle between them before the server ends its session and rolls it back
            (``idle_in_transaction_session_timeout``; 0 keeps the server's setting). A
            client frozen inside one otherwise held the change feed's lock — every
            subscriber stalled — and its agents' rows until its connection died.
        audit_lock_timeout: seconds a write waits for the audit log's head row, and
            under row-level security for the change feed's lock. Any role that may
            write can hold the row locked (``SELECT ... FOR UPDATE`` of it under
            row-level security, a governed write left uncommitted) and any role can
            take the feed's advisory lock, and every governed write (every write of
            events) of the store waits on them; past this the write raises
            :class:`~statekeeper.errors.AuditLogLocked`
            (:class:`~statekeeper.errors.FeedLocked`), nothing written. Must be below
            ``socket_timeout`` (else the watchdog ends the wait first, as a lost
            connection whose write may have been applied: a
            :class:`~statekeeper.errors.ConfigurationError` names both), and at
            most 2147483.647 (PostgreSQL's ``lock_timeout``); by default 10 s, or half
            of a ``socket_timeout`` under 20 s.
        prepare_threshold: psycopg's server-side prepare threshold (None disables it,
            e.g. behind PgBouncer in transaction mode).
        partitions: create a new schema hash-partitioned by agent id into this many
            partitions per table (see :mod:`.schema`); an existing schema keeps its
            layout, and one created otherwise raises
            :class:`~statekeeper.errors.ConfigurationError`. None (the default)
            creates plain tables and opens either layout.
        replica_url: a streaming replica of the same server (``postgresql://`` URL)
            that serves loads, listings and the feed while writes go to the primary,
            with read-your-writes for this process (see :mod:`.replica`).
        readonly: read only: no DDL (the schema is checked, never created or
            migrated), sessions run with ``default_transaction_read_only``, every write
            raises :class:`~statekeeper.errors.ReadOnlyStore`; a role with only
            ``USAGE`` on the schema and ``SELECT`` on its tables is enough. A schema
            without statekeeper's tables raises :class:`~statekeeper.errors.NotAStore`.

    The pool opens (and migrations run) on first use, or explicitly with
    :meth:`open`.
    """

    name = "postgresql"
    supports_leases = True
    #: True under row-level security whose policy knows the namespaces' feed tombstone
    #: streams (:mod:`statekeeper.store.feed_deletes`; and their forget intents:
    #: :mod:`statekeeper.store.feed_intents`), set as the backend opens
    tombstones_by_namespace = intents_by_namespace = False
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
    feed_poll_interval = 1.0  # a fallback: NOTIFY wakes subscribers up
    #: the head tag is compared inside ``sk_append`` (no read before a write)
    compares_head_tag = True
    #: full backups by ``COPY ... TO STDOUT`` (:mod:`.export`)
    copies_out = True

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        pool_timeout: float = 30.0,
        retry_timeout: float = 30.0,
        reconnect_timeout: float = 5.0,
        prepare_threshold: int | None = 5,
        connect_timeout: float = 10.0,
        socket_timeout: float = 60.0,
        idle_transaction_timeout: float = 30.0,
        audit_lock_timeout: float | None = None,
        readonly: bool = False,
        partitions: int | None = None,
        replica_url: str | None = None,
    ) -> None:
        check_schema(schema)
        if min_size < 0 or max_size < max(1, min_size):
            raise ConfigurationError("need 0 <= min_size <= max_size and max_size >= 1")
        if not connect_timeout > 0:
            raise ConfigurationError("connect_timeout must be > 0 seconds")
        if not socket_timeout > 0:
            raise ConfigurationError("socket_timeout must be > 0 seconds")
        if not idle_transaction_timeout >= 0:
            raise ConfigurationError("idle_transaction_timeout must be >= 0 seconds")
        if audit_lock_timeout is None:
            audit_lock_timeout = min(10.0, socket_timeout / 2)
        elif not 0 < audit_lock_timeout < socket_timeout:
            raise ConfigurationError(
                f"audit_lock_timeout ({audit_lock_timeout!r} s) must be above 0 and below"
                f" socket_timeout ({socket_timeout!r} s): a wait for a lock another role"
                " holds would otherwise end at socket_timeout, as a lost connection whose"
                " write may have been applied"
            )
        elif audit_lock_timeout > _LOCK_TIMEOUT_MAX:  # (was: accepted, every write refused)
            raise ConfigurationError(
                f"audit_lock_timeout ({audit_lock_timeout!r} s) must be at most"
                f" {_LOCK_TIMEOUT_MAX} s: PostgreSQL's lock_timeout, which it sets, is"
                " milliseconds in an integer (a larger one refused every governed write)"
            )
        _schema.check_partitions(partitions)
        self.dsn = dsn
        self.schema = schema
        self.partitions = partitions
        self.readonly = readonly
        self.retry_timeout = retry_timeout
        self.connect_timeout = connect_timeout
        self.socket_timeout = socket_timeout
        self._watchdog = Watchdog(socket_timeout)
        # libpq counts whole seconds (and treats 1 as 2); the probe is bounded exactly
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
            "connect_timeout": max(2, math.ceil(connect_timeout)),
            "context": ARRAY_ADAPTERS,  # the batch's arrays dumped by .arrays
            # ids and text are str: a role's or database's client_encoding (LATIN1...)
            # could not carry them (was: the store unusable for such a role)
            "client_encoding": "UTF8",
        }
        #: each new connection's settings (read only, the idle transaction timeout)
        self._configure = session_setup(readonly, idle_transaction_timeout, audit_lock_timeout)
        self.audit_lock_timeout = audit_lock_timeout
        # one wait for a connection never outlasts the retry budget
        self._wait = min(pool_timeout, max(retry_timeout, 0.5))
        ident = sql.Identifier(schema)
        self._sql: dict[str, bytes] = {
            name: sql.SQL(text).format(s=ident).as_bytes(None) for name, text in _QUERIES.items()
        }
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=pool_timeout,
            reconnect_timeout=reconnect_timeout,
            reconnect_failed=regrow_while_waited,
            open=False,
            kwargs=self._connect_kwargs,
            name=f"{POOL_PREFIX}{schema}",
            configure=self._configure,
            connection_class=KeepsCursors,
        )
        # group commit: a second batch commits on another connection while the first
        # waits for its WAL flush; half the pool at most, so reads keep connections
        self.batches_in_flight = max(1, min(BATCHES_IN_FLIGHT, max_size // 2))
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._closed = False
        #: how it was closed (by close(), or at its event loop's end: .loop_end)
        self._closed_why = "is closed"
        self._end = LoopEnd(self)  # an unclosed backend whose loop ends (see .loop_end)
        self._reconnect = Reconnecting(
            engine="postgresql",
            timeout=lambda: self._end.budget(),
            errors=(psycopg.Error,),
            transient=transient,
            reason=self._reason,
            reject=lambda what, exc: self._failure(what, exc),
            is_closed=lambda: self._closed,
            check_open=self._check_open,
            logger=logger,
            prepare=self._prepare,
            before_retry=self._purge,
            unsent=lambda exc: isinstance(exc, PoolTimeout),
        )
        self._replica: ReplicaReads | None = None
        if replica_url is not None:
            self._replica = ReplicaReads(self, parse_postgres_url(replica_url)[0], max_size)
        self._feed = FeedReader(self)
        #: the newest feed position committed: at or past feed_bounds()'s (safe) head
        self.feed_committed_head = self._feed.committed
        #: the last feed position handed out (deleted or not): what a cursor of this
        #: store may reach (store/feed.py refuses a resume point beyond it)
        self.feed_handed_out_head = self._feed.handed_out
        # read coalescing (see :meth:`read`)
        self._reading = False
        self._read_queue: list[tuple[tuple[Any, ...], asyncio.Future[list[RawEvent]]]] = []
        self._read_runner: asyncio.Task[None] | None = None
        self._heads: Coalesced[tuple[str, bool], tuple[int, bytes | None]] = Coalesced(
            self._head_one, self._head_many
        )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> PostgresBackend:
        """Build from a ``postgresql://`` URL (see :func:`parse_postgres_url`)."""
        dsn, kwargs = parse_postgres_url(url)
        kwargs.update(overrides)
        return cls(dsn, **kwargs)

    def __repr__(self) -> str:
        return f"PostgresBackend({mask_url(self.dsn)!r}, schema={self.schema!r})"

    # -- failures (see .refusals) ----------------------------------------------------

    def _reason(self, exc: BaseException) -> str:
        """The server's or driver's message on one line, with the DSN's secrets masked."""
        return one_line(scrub(str(exc), self.dsn)) or type(exc).__name__

    def _failure(self, what: str, exc: BaseException) -> Exception:
        """A failure that is not retried (any more), typed by its cause (:mod:`.refusals`)."""
        what = label(what, exc, self.schema, self.readonly)
        if transient(exc):
            return BackendError(f"{what}: {self._reason(exc)}")
        locked = audit_locked(what, exc, self.audit_lock_timeout) or feed_locked(
            what, exc, self.audit_lock_timeout
        )
        if locked is not None:
            return locked
        if (refused := denied(what, exc, self.dsn) or read_only(what, exc)) is not None:
            return refused
        return BackendRejected(
            f"{what}: {self._reason(exc)}", sqlstate=getattr(exc, "sqlstate", None)
        )

    # -- plumbing ------------------------------------------------------------------

    async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` (safe to repeat), retrying on lost connections until the deadline."""
        return await self._reconnect.run(what, op)

    async def _prepare(self) -> None:
        if not self._opened:
            await self._ensure_open()

    async def _purge(self) -> None:
        """After a lost connection, test the idle ones at once and replace the dead
        (a server restart or ``pg_terminate_backend`` usually takes them all), so the
        retry does not meet them one by one — the pool backs off after two in a row."""
        with contextlib.suppress(Exception):
            await self._pool.check()

    @contextlib.asynccontextmanager
    async def _connection(
        self, bounded: bool = True
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A live connection from the pool, its statements answered within
        ``socket_timeout`` (when ``bounded``) or the connection counts as lost.

        Each one is tested as it is taken (:func:`.connection.check_connection`: a ``poll`` on
        its socket, a round trip only when the server wrote to an idle connection); a
        dead one is closed — the pool replaces it in the background — and the next is
        taken at once, without the pool's backoff between failed checks. A server that
        stops answering (SIGSTOP, a silent network) never closes the connection: without
        the bound an operation waited for ever, whatever ``retry_timeout`` said.
        """
        if self._end.ending:
            async with self._end.connection() as conn:
                yield conn
            return
        self._end.check_loop()  # (the pool's loop closed under it: StoreClosed)
        conn = await self._pool.getconn(timeout=self._wait)
        for _ in range(self._pool.max_size):
            try:
                await check_connection(conn)
                break
            except psycopg.Error:
                with contextlib.suppress(Exception):
                    await conn.close()
                await self._pool.putconn(conn)
                conn = await self._pool.getconn(timeout=self._wait)
        watch = self._watchdog if bounded else None
        token = watch.start() if watch is not None else 0
        try:
            yield conn
        except asyncio.CancelledError as exc:
            if watch is None or not watch.fired(token):
                raise
            # psycopg cancelled the statement (or closed the connection); retried as lost
            raise psycopg.OperationalError(
                f"no answer within {self.socket_timeout:g}s (socket_timeout)"
            ) from exc
        finally:
            if watch is not None:
                watch.stop(token)
            await self._pool.putconn(conn)

    async def _query(
        self, name: str, params: Sequence[Any], *, lsn: int = 0
    ) -> list[tuple[Any, ...]]:
        """Run the statement ``name``: on the replica when there is one and it may
        answer it (having replayed this process's writes and ``lsn``), else on the
        primary."""
        if self._replica is not None and name in REPLICA_QUERIES:
            if not self._opened:
                await self._ensure_open()
            return await self._replica.query(name, params, lsn=lsn)
        return await self._primary_query(name, params)

    async def _primary_query(self, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return await self._primary_query_sql(name, self._sql[name], params)

    async def _primary_query_sql(
        self, name: str, query: bytes, params: Sequence[Any]
    ) -> list[tuple[Any, ...]]:
        async def op() -> list[tuple[Any, ...]]:
            async with self._connection() as conn:
                cur = kept_cursor(conn, query, binary=True)
                await cur.execute(query, params)
                return await cur.fetchall()

        return await self._retrying(name, op)

    def _wrote(self) -> None:
        """A write ended (or may have committed, or met another writer's): replica
        reads of this process must see it from now on (see :mod:`.replica`)."""
        if self._replica is not None:
            self._replica.wrote()
