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
  or crash shutdown (57P01-57P03), a connection the client library found broken (no
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ...arguments import check_stored_id
from ...errors import (
    BackendError,
    BackendRejected,
    BackendUnavailable,
    ConfigurationError,
    ConflictError,
    LeaseHeld,
    LeaseLost,
    ReadOnlyStore,
    StoreClosed,
)
from ...records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    FeedRecord,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
)
from ..base import (
    Backend,
    Capability,
    Health,
    LatestRead,
    check_prune,
    validate_request,
    validate_rewrite,
    validate_ttl,
)
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
from .connection import (
    SCHEMA_RE,
    check_connection,
    parse_postgres_url,
    read_only_session,
    transient,
)
from .feed import FeedReader
from .replica import REPLICA_QUERIES, ReplicaReads
from .schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresBackend", "parse_postgres_url"]

logger = logging.getLogger("statekeeper.backends.postgres")

T = TypeVar("T")


_PACKAGE = "statekeeper.backends.postgres"

#: every statement, by name (sql/queries.sql)
_QUERIES: dict[str, str] = named_blocks(read_script(_PACKAGE, "sql/queries.sql"))
_NO_LIMIT = 2**62


class PostgresBackend(Backend):
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
            one lost connection before it frees the slot; the next request then dials
            afresh, so a long outage does not leave the pool in a long backoff.
        connect_timeout: seconds one connection attempt may take. The first use
            dials once within it and raises
            :class:`~statekeeper.errors.BackendUnavailable` with the reason if that
            fails; later (lost connections) the ``retry_timeout`` budget applies.
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
    capabilities = frozenset(
        {
            Capability.LEASES,
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.DROP_ALL,
            Capability.MIGRATIONS,
            Capability.PRUNE,
            Capability.FEED,
        }
    )
    feed_poll_interval = 1.0  # a fallback: NOTIFY wakes subscribers up
    #: the head tag is compared inside ``sk_append`` (no read before a write)
    compares_head_tag = True

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
        readonly: bool = False,
        partitions: int | None = None,
        replica_url: str | None = None,
    ) -> None:
        if not SCHEMA_RE.match(schema):
            raise ConfigurationError(
                f"schema must be a plain identifier (letters, digits, _), not {schema!r}"
            )
        if min_size < 0 or max_size < max(1, min_size):
            raise ConfigurationError("need 0 <= min_size <= max_size and max_size >= 1")
        if not connect_timeout > 0:
            raise ConfigurationError("connect_timeout must be > 0 seconds")
        _schema.check_partitions(partitions)
        self.dsn = dsn
        self.schema = schema
        self.partitions = partitions
        self.readonly = readonly
        self.retry_timeout = retry_timeout
        self.connect_timeout = connect_timeout
        # libpq counts whole seconds (and treats 1 as 2); the probe is bounded exactly
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": prepare_threshold,
            "connect_timeout": max(2, math.ceil(connect_timeout)),
        }
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
            open=False,
            kwargs=self._connect_kwargs,
            name=f"statekeeper-{schema}",
            configure=read_only_session if readonly else None,
        )
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._closed = False
        self._reconnect = Reconnecting(
            engine="postgresql",
            timeout=lambda: self.retry_timeout,
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
        # read coalescing (see :meth:`read`)
        self._reading = False
        self._read_queue: list[tuple[tuple[Any, ...], asyncio.Future[list[RawEvent]]]] = []
        self._read_runner: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> PostgresBackend:
        """Build from a ``postgresql://`` URL (see :func:`parse_postgres_url`)."""
        dsn, kwargs = parse_postgres_url(url)
        kwargs.update(overrides)
        return cls(dsn, **kwargs)

    # -- lifecycle -----------------------------------------------------------------

    def __repr__(self) -> str:
        return f"PostgresBackend({mask_url(self.dsn)!r}, schema={self.schema!r})"

    async def open(self) -> None:
        """Connect, open the pool and bring the schema up to date (idempotent).

        Raises :class:`~statekeeper.errors.BackendUnavailable` with the server's reason
        when it cannot be reached within ``connect_timeout`` or refuses the connection,
        and :class:`~statekeeper.errors.BackendRejected` when a migration is refused.
        """
        try:
            await self._ensure_open()
        except psycopg.Error as exc:
            raise self._failure(f"cannot open PostgreSQL schema {self.schema!r}", exc) from exc

    def _reason(self, exc: BaseException) -> str:
        """The server's or driver's message on one line, with the DSN's secrets masked."""
        return one_line(scrub(str(exc), self.dsn)) or type(exc).__name__

    def _failure(self, what: str, exc: BaseException) -> BackendError:
        """A failure that is not retried (any more), typed by its cause."""
        if transient(exc):
            return BackendError(f"{what}: {self._reason(exc)}")
        return BackendRejected(
            f"{what}: {self._reason(exc)}", sqlstate=getattr(exc, "sqlstate", None)
        )

    async def _dial(self) -> None:
        """Connect once, within ``connect_timeout``, before the pool exists: a server
        that cannot be reached fails here, fast, with its reason."""
        try:
            async with asyncio.timeout(self.connect_timeout):
                conn = await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs)
        except TimeoutError:
            reason = f"no answer within {self.connect_timeout:g}s (connect_timeout)"
        except (psycopg.Error, OSError) as exc:
            reason = self._reason(exc)
        else:
            await conn.close()
            return
        raise BackendUnavailable(f"cannot connect to PostgreSQL at {mask_url(self.dsn)}: {reason}")

    async def _ensure_open(self) -> None:
        self._check_open()
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._opened:
                return
            # a server that cannot be reached at all fails here, before the pool
            # (which would keep re-dialling in the background, with warnings) opens
            await self._dial()
            # the pool keeps (re)connecting in the background once opened; a failed
            # migration is simply tried again by the next call
            await self._pool.open(wait=False)
            if self.readonly:
                await _schema.check_store(self)
            else:
                await _schema.migrate(self)
            await _schema.check_layout(self)
            if self._replica is not None:
                await self._replica.open()
            self._opened = True

    async def ensure_store(self) -> None:
        await self.open()

    async def initialize(self) -> None:
        self._check_writable()
        await self.open()

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore(f"postgresql schema {self.schema!r} is open read-only")

    async def migrations(self) -> list[int]:
        """The migration versions applied to this schema."""
        rows = await self._query("migrations", ())
        return [int(r[0]) for r in rows]

    async def schema_version(self) -> int:
        """The newest migration applied to this schema (see :data:`MIGRATIONS`)."""
        return max(await self.migrations(), default=0)

    async def drop_all(self) -> None:
        """Delete everything this backend stored: its schema (or, in ``public``, only
        statekeeper's tables and function). For tests and benchmarks; irreversible."""
        self._check_writable()
        self._check_open()
        await self._pool.open(wait=False)
        await self._retrying("drop_all", lambda: _schema.drop_all(self))
        self._opened = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"postgresql backend (schema {self.schema!r}) is closed")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._feed.close()
        if self._replica is not None:
            await self._replica.close()
        await self._pool.close()

    # -- the change feed (see .feed) -------------------------------------------------

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        self._check_open()
        return await self._feed.read(after, limit)

    async def feed_bounds(self) -> tuple[int, int]:
        self._check_open()
        return await self._feed.bounds()

    async def trim_feed(self, through: int) -> int:
        self._check_open()
        return await self._feed.trim(through)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self._check_open()
        await self._feed.wait(after, max_wait)

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
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A live connection from the pool.

        Each one is tested as it is taken (:func:`.connection.check_connection`: a ``select`` on
        its socket, a round trip only when the server wrote to an idle connection); a
        dead one is closed — the pool replaces it in the background — and the next is
        taken at once, without the pool's backoff between failed checks.
        """
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
        try:
            yield conn
        finally:
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
                cur = conn.cursor(binary=True)
                await cur.execute(query, params)
                return await cur.fetchall()

        return await self._retrying(name, op)

    # -- appends -------------------------------------------------------------------

    def _statement(self, request: AppendRequest) -> tuple[bytes, tuple[Any, ...]]:
        """The ``sk_append`` (or, for one event, ``sk_append1``) call for ``request``."""
        events = request.events
        snap = request.snapshot
        fence = request.fence
        tail = (
            request.idempotency_key,
            snap.seq if snap is not None else None,
            snap.timestamp if snap is not None else None,
            snap.payload if snap is not None else None,
            snap.checksum if snap is not None else None,
            request.head_tag,
            request.check_tag,
            request.expected_tag,
            fence[0] if fence is not None else None,
            fence[1] if fence is not None else None,
        )
        if len(events) == 1:
            e = events[0]
            one = (request.agent_id, request.expected_seq, e.seq, e.kind, e.timestamp)
            return self._sql["append1"], (*one, e.payload, e.checksum, *tail)
        return self._sql["append"], (
            request.agent_id,
            request.expected_seq,
            [e.seq for e in events],
            [e.kind for e in events],
            [e.timestamp for e in events],
            [e.payload for e in events],
            [e.checksum for e in events],
            *tail,
        )

    @staticmethod
    def _result(request: AppendRequest, row: tuple[Any, ...]) -> AppendResult:
        status, a, b = int(row[0]), int(row[1]), int(row[2])
        if status == 0:
            return AppendResult(request.agent_id, a, b)
        if status == 1:
            return AppendResult(request.agent_id, a, b, duplicate=True)
        if status == 3:
            assert request.fence is not None
            holder, token = request.fence
            raise LeaseLost(request.agent_id, holder, token, a, row[3])
        raise ConflictError(request.agent_id, request.expected_seq, a)

    async def _append_once(self, request: AppendRequest) -> tuple[Any, ...]:
        async with self._connection() as conn:
            cur = await conn.execute(*self._statement(request))
            row: tuple[Any, ...] | None = await cur.fetchone()
        assert row is not None
        return row

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_open()
        self._check_writable()
        validate_request(request)
        try:
            if not self._opened:
                await self._ensure_open()
            row = await self._append_once(request)
        except psycopg.Error as exc:
            return await self._recover(request, exc)
        self._wrote()
        self._feed.poke()
        return self._result(request, row)

    def _wrote(self) -> None:
        """A write ended (or may have committed, or met another writer's): replica
        reads of this process must see it from now on (see :mod:`.replica`)."""
        if self._replica is not None:
            self._replica.wrote()

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_open()
        self._check_writable()
        out: list[AppendResult | BaseException | None] = [None] * len(requests)
        valid: list[tuple[int, AppendRequest]] = []
        for i, request in enumerate(requests):
            try:
                validate_request(request)
                valid.append((i, request))
            except ConfigurationError as exc:
                out[i] = exc
        if len(valid) == 1:
            i, request = valid[0]
            try:
                out[i] = await self.append(request)
            except Exception as exc:
                out[i] = exc
        elif valid:
            try:
                if not self._opened:
                    await self._ensure_open()
                rows = await self._batch_once([r for _, r in valid])
            except psycopg.Error as exc:
                # Either the whole transaction committed or none of it: settle each
                # request on its own (checking whether it landed when that is unknown).
                await self._settle(valid, exc, out)
            else:
                self._wrote()
                self._feed.poke()
                for (i, request), row in zip(valid, rows, strict=True):
                    try:
                        out[i] = self._result(request, row)
                    except (ConflictError, LeaseLost) as exc:
                        out[i] = exc
        return [r if r is not None else BackendError("not attempted") for r in out]

    async def _settle(
        self,
        valid: list[tuple[int, AppendRequest]],
        exc: psycopg.Error,
        out: list[AppendResult | BaseException | None],
    ) -> None:
        """Settle the requests of a failed batch statement, each on its own.

        A permanent error (a constraint, a ``statement_timeout``) rolled the whole
        statement back: every request is sent again alone, so the good ones commit
        and the faulty one gets its own error. After a lost connection each request
        is recovered (did it land?). Agents are settled concurrently — one agent's
        requests in their order — so no request waits behind another's failure.
        """
        ambiguous = transient(exc)
        chains: dict[str, list[tuple[int, AppendRequest]]] = {}
        for item in valid:
            chains.setdefault(item[1].agent_id, []).append(item)

        async def settle(chain: list[tuple[int, AppendRequest]]) -> None:
            for i, request in chain:
                try:
                    if ambiguous:
                        out[i] = await self._recover(request, exc)
                    else:
                        out[i] = await self.append(request)
                except Exception as inner:
                    out[i] = inner

        await asyncio.gather(*(settle(chain) for chain in chains.values()))

    async def _batch_once(self, requests: Sequence[AppendRequest]) -> list[tuple[Any, ...]]:
        """Every request in ONE ``sk_append_batch`` statement: one round trip, one commit."""
        snaps = [r.snapshot for r in requests]
        events = [e for r in requests for e in r.events]
        params: tuple[list[Any], ...] = (
            [r.agent_id for r in requests],
            [r.expected_seq for r in requests],
            [len(r.events) for r in requests],
            [r.idempotency_key for r in requests],
            [s.seq if s is not None else None for s in snaps],
            [s.timestamp if s is not None else None for s in snaps],
            [s.payload if s is not None else None for s in snaps],
            [s.checksum if s is not None else None for s in snaps],
            [e.seq for e in events],
            [e.kind for e in events],
            [e.timestamp for e in events],
            [e.payload for e in events],
            [e.checksum for e in events],
            [r.head_tag for r in requests],
            [r.check_tag for r in requests],
            [r.expected_tag for r in requests],
            [r.fence[0] if r.fence is not None else None for r in requests],
            [r.fence[1] if r.fence is not None else None for r in requests],
        )
        query = self._sql["append_batch"]
        async with self._connection() as conn:
            cur = await conn.execute(query, params)
            rows = await cur.fetchall()
        if len(rows) != len(requests):
            raise psycopg.DataError(f"sk_append_batch answered {len(rows)} of {len(requests)}")
        return [tuple(row[1:]) for row in rows]

    async def _recover(self, request: AppendRequest, exc: psycopg.Error) -> AppendResult:
        """Settle an append whose outcome is unknown (its connection failed): see
        :meth:`Reconnecting.settle_append` — what is stored at the request's seqs is
        compared with its events. A constraint violation is final."""
        self._wrote()
        if isinstance(exc, psycopg.errors.IntegrityError):
            raise BackendRejected(
                f"postgresql: constraint violated appending to {request.agent_id!r}: "
                f"{self._reason(exc)}",
                sqlstate=exc.sqlstate,
            ) from exc
        return await self._reconnect.settle_append(
            request,
            exc,
            landed=self._landed,
            submit=self._submit,
            # a request that never got a connection was never sent
            maybe_applied=self._opened and not isinstance(exc, PoolTimeout),
        )

    async def _submit(self, request: AppendRequest) -> AppendResult:
        return self._result(request, await self._append_once(request))

    async def _landed(self, request: AppendRequest) -> bool:
        first, last = request.events[0].seq, request.events[-1].seq
        async with self._connection() as conn:
            cur = conn.cursor(binary=True)
            await cur.execute(
                self._sql["read"], (request.agent_id, first - 1, last, len(request.events))
            )
            rows = await cur.fetchall()
            stored = [RawEvent(r[0], r[1], r[2], bytes(r[3]), bytes(r[4])) for r in rows]
            if stored != list(request.events):
                return False
            if request.idempotency_key is None:
                return True
            await cur.execute(self._sql["key"], (request.agent_id, request.idempotency_key))
            row = await cur.fetchone()
        return row is not None and (int(row[0]), int(row[1])) == (first, last)

    # -- other writes ---------------------------------------------------------------

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        query = self._sql["snap_save"]
        params = (
            agent_id,
            snapshot.seq,
            snapshot.timestamp,
            snapshot.payload,
            snapshot.checksum,
            agent_id,
            snapshot.seq,
        )

        async def op() -> int:
            async with self._connection() as conn:
                cur = await conn.execute(query, params)
                return cur.rowcount

        saved = await self._retrying("save_snapshot", op)
        self._wrote()
        if saved == 0:
            raise ConflictError(agent_id, snapshot.seq, await self.head(agent_id))

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace stored record bytes in one transaction, if the head row (locked
        ``FOR UPDATE``) is still ``(expected_seq, expected_tag)``."""
        self._check_open()
        self._check_writable()
        validate_rewrite(request)
        agent_id = request.agent_id
        attempts = 0

        async def op() -> None:
            nonlocal attempts
            attempts += 1
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._sql["rw_lock"], (agent_id,))
                row = await cur.fetchone()
                head = int(row[0]) if row is not None else 0
                tag = bytes(row[1]) if row is not None and row[1] is not None else None
                if row is None or head != request.expected_seq or tag != request.expected_tag:
                    # a retry after a lost commit finds its own new tag: done already
                    if (
                        attempts > 1
                        and head == request.expected_seq
                        and request.head_tag is not None
                        and tag == request.head_tag
                    ):
                        return
                    raise ConflictError(agent_id, request.expected_seq, head)
                if request.events:
                    events = request.events
                    await conn.execute(
                        self._sql["rw_events"],
                        (
                            [e.seq for e in events],
                            [e.payload for e in events],
                            [e.checksum for e in events],
                            agent_id,
                        ),
                    )
                for snap in request.snapshots:
                    params = (agent_id, snap.seq, snap.timestamp, snap.payload, snap.checksum)
                    await conn.execute(self._sql["rw_snap"], params)
                if request.head_tag is not None:
                    await conn.execute(self._sql["rw_tag"], (request.head_tag, agent_id))

        try:
            await self._retrying("rewrite", op)
        finally:
            self._wrote()

    async def prune(self, agent_id: str, base_seq: int, drop_snapshots: Sequence[int] = ()) -> None:
        """Remove history below a snapshot in one transaction (the head row locked
        ``FOR UPDATE``); a retry after a lost commit finds nothing left to remove."""
        self._check_open()
        self._check_writable()
        drop = sorted(set(drop_snapshots))

        async def op() -> None:
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._sql["prune_lock"], (agent_id, base_seq, agent_id))
                row = await cur.fetchone()
                head = int(row[0]) if row is not None else 0
                check_prune(agent_id, head, base_seq, bool(row and row[1]), drop)
                if base_seq:
                    for name in ("prune_events", "prune_snaps_below", "prune_keys"):
                        await conn.execute(self._sql[name], (agent_id, base_seq))
                if drop:
                    await conn.execute(self._sql["prune_snaps"], (agent_id, drop))

        await self._retrying("prune", op)
        self._wrote()

    async def delete_agent(self, agent_id: str) -> bool:
        self._check_writable()

        async def op() -> bool:
            async with self._connection() as conn, conn.transaction():
                cur = await conn.execute(self._sql["del_agent"], (agent_id,))
                existed = cur.rowcount > 0
                for name in ("del_events", "del_snaps", "del_keys"):
                    await conn.execute(self._sql[name], (agent_id,))
            return existed

        try:
            return await self._retrying("delete_agent", op)
        finally:
            self._wrote()

    # -- leases --------------------------------------------------------------------
    # One row per agent in sk_leases, never deleted (tokens only grow, also across
    # delete_agent). Expiry is on the database server's clock. A fenced append locks
    # the row FOR SHARE while it checks the fence, so no grant slips in before it commits.

    async def _lease_row(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        query = self._sql[name]

        async def op() -> tuple[Any, ...] | None:
            async with self._connection() as conn:
                cur = await conn.execute(query, params)
                row: tuple[Any, ...] | None = await cur.fetchone()
            return row

        return await self._retrying(name, op)

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        self._check_open()
        self._check_writable()
        ttl = validate_ttl(ttl)
        params = {"agent": agent_id, "holder": holder, "ttl": ttl}
        row = await self._lease_row("lease_acquire", params)
        if row is not None:
            return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))
        current = await self.get_lease(agent_id)
        if current is None or current.holder is None:  # released meanwhile: try again
            return await self.acquire_lease(agent_id, holder, ttl)
        raise LeaseHeld(agent_id, current.holder, current.expires_at)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        self._check_open()
        self._check_writable()
        ttl = validate_ttl(ttl)
        params = {"agent": agent_id, "holder": holder, "token": token, "ttl": ttl}
        row = await self._lease_row("lease_renew", params)
        if row is not None:
            return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))
        current = await self.get_lease(agent_id)
        raise LeaseLost(
            agent_id,
            holder,
            token,
            current.token if current is not None else 0,
            current.holder if current is not None else None,
        )

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        self._check_open()
        self._check_writable()
        params = {"agent": agent_id, "holder": holder, "token": token}
        return await self._lease_row("lease_release", params) is not None

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        self._check_open()
        row = await self._lease_row("lease_get", {"agent": agent_id})
        if row is None:
            return None
        return LeaseInfo(agent_id, row[0], int(row[1]), float(row[2]))

    # -- reads ---------------------------------------------------------------------

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        rows = await self._query("key", (agent_id, key))
        if not rows:
            return None
        return AppendResult(agent_id, int(rows[0][0]), int(rows[0][1]), duplicate=True)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        rows = await self._query("keys", (agent_id,))
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        rows = await self._query("head_tag", (agent_id,))
        if not rows:
            return 0, None
        tag = rows[0][1]
        return int(rows[0][0]), bytes(tag) if tag is not None else None

    async def head(self, agent_id: str) -> int:
        rows = await self._query("head", (agent_id,))
        return int(rows[0][0]) if rows else 0

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        """Events of one agent. Reads issued while another read is in flight are sent
        together in one statement (like group commit, for reads): concurrent agents
        validating their heads cost one round trip, not one each."""
        self._check_open()
        if limit is not None and limit <= 0:
            return []
        args = (
            agent_id,
            after_seq,
            _NO_LIMIT if to_seq is None else to_seq,
            _NO_LIMIT if limit is None else limit,
        )
        if self._reading:
            future: asyncio.Future[list[RawEvent]] = asyncio.get_running_loop().create_future()
            self._read_queue.append((args, future))
            return await future
        self._reading = True
        try:
            rows = await self._query("read", args)
        finally:
            if self._read_queue:
                self._read_runner = asyncio.get_running_loop().create_task(self._read_drain())
            else:
                self._reading = False
        return [RawEvent(int(r[0]), r[1], float(r[2]), bytes(r[3]), bytes(r[4])) for r in rows]

    async def _read_drain(self) -> None:
        """Serve queued reads, many per statement, until none is left."""
        try:
            while self._read_queue:
                batch, self._read_queue = self._read_queue[:512], self._read_queue[512:]
                columns = list(zip(*(args for args, _ in batch), strict=True))
                try:
                    rows = await self._query("read_many", [list(c) for c in columns])
                except BaseException as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                results: list[list[RawEvent]] = [[] for _ in batch]
                for r in rows:
                    results[int(r[0]) - 1].append(
                        RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5]))
                    )
                for (_, future), events in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(events)
        finally:
            self._reading = False

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        rows = await self._query("seq_at", (agent_id, timestamp))
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        bound = _NO_LIMIT if at_or_below is None else at_or_below
        rows = await self._query("snap_latest", (agent_id, bound))
        if not rows:
            return None
        r = rows[0]
        return RawSnapshot(int(r[0]), float(r[1]), bytes(r[2]), bytes(r[3]))

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The newest snapshot and the events after it: one statement, one round trip."""
        self._check_open()
        rows = await self._query("read_latest", (agent_id, agent_id))
        snap: RawSnapshot | None = None
        if rows and rows[0][1] is None:
            r = rows.pop(0)
            snap = RawSnapshot(int(r[0]), float(r[2]), bytes(r[3]), bytes(r[4]))
        return snap, [
            RawEvent(int(r[0]), r[1], float(r[2]), bytes(r[3]), bytes(r[4])) for r in rows
        ]

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """The head, the newest snapshot and the events after it: one statement (one
        snapshot of the database), one round trip."""
        self._check_open()
        rows = await self._query("read_state", (agent_id, agent_id, agent_id))
        if not rows or rows[0][0] != 0 or not rows[0][1]:
            return 0, None, None, []
        first = rows[0]
        snap: RawSnapshot | None = None
        start = 1
        if len(rows) > 1 and rows[1][0] == 1:
            r = rows[1]
            snap = RawSnapshot(int(r[1]), float(r[3]), bytes(r[4]), bytes(r[5]))
            start = 2
        tag = first[4]
        return (
            int(first[1]),
            bytes(tag) if tag is not None else None,
            snap,
            [
                RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5]))
                for r in rows[start:]
            ],
        )

    reads_latest_many = True

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        """Heads, head tags, latest snapshots and the events after them of many agents:
        one statement (one snapshot of the database), one round trip."""
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        if not agent_ids:
            return []
        rows = await self._query("read_latest_many", (list(dict.fromkeys(agent_ids)),))
        heads: dict[str, tuple[int, bytes | None]] = {}
        snaps: dict[str, RawSnapshot] = {}
        events: dict[str, list[RawEvent]] = {}
        for part, agent_id, seq, kind, ts, payload, checksum in rows:
            if part == 0:
                heads[agent_id] = (int(seq), bytes(payload) if payload is not None else None)
            elif part == 1:
                snaps[agent_id] = RawSnapshot(int(seq), float(ts), bytes(payload), bytes(checksum))
            else:
                events.setdefault(agent_id, []).append(
                    RawEvent(int(seq), kind, float(ts), bytes(payload), bytes(checksum))
                )
        out: list[LatestRead | None] = []
        for agent_id in agent_ids:
            head = heads.get(agent_id)
            out.append(
                None
                if head is None
                else LatestRead(head[0], head[1], snaps.get(agent_id), events.get(agent_id, []))
            )
        return out

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        if after is None:
            rows = await self._query("list_all", (limit,))
        else:
            rows = await self._query("list", (after, limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        if not agent_ids:
            return []
        rows = await self._query("read_heads", (list(agent_ids),))
        found = {
            r[0]: RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5])) for r in rows
        }
        return [found.get(agent_id) for agent_id in agent_ids]

    lists_by_write = True

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        if cursor is None:
            name = "list_newest_written" if newest_first else "list_oldest_written"
            rows = await self._query(name, (limit,))
        else:
            name = "list_newest_written_after" if newest_first else "list_oldest_written_after"
            rows = await self._query(name, (float(cursor[0]), cursor[1], limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    lists_backwards = True

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        if before is None:
            rows = await self._query("list_last", (limit,))
        else:
            rows = await self._query("list_before", (before, limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    async def count_agents(self) -> int:
        rows = await self._query("count", ())
        return int(rows[0][0])

    async def health(self) -> Health:
        detail: dict[str, Any] = {"schema": self.schema}
        if self._closed:
            return Health(ok=False, backend=self.name, detail={**detail, "error": "closed"})
        try:
            await asyncio.wait_for(self._ensure_open(), timeout=max(self._pool.timeout, 1.0))
            async with self._connection() as conn:
                cur = await conn.execute("SELECT current_setting('server_version')")
                row = await cur.fetchone()
            detail["server_version"] = row[0] if row else None
            detail["migration"] = max(await self.migrations(), default=0)
            stats = self._pool.get_stats()
            detail["pool"] = {
                k: stats.get(k, 0) for k in ("pool_size", "pool_available", "requests_waiting")
            }
        except Exception as exc:  # health reports, it does not raise
            return Health(ok=False, backend=self.name, detail={**detail, "error": str(exc)})
        return Health(ok=True, backend=self.name, detail=detail)
