"""Loads and the change feed from a streaming read replica (``replica_url=``), writes
to the primary, and read-your-writes for the writing process.

How a read finds a replica fresh enough, without a round trip per append:

* After a write of this process commits (or fails in a way that may have committed, or
  finds a conflict: another writer's append this process now knows of), after a
  lease is granted to it (its holder must see the previous holder's work) and after
  an idempotency key lookup finds a write (its events are read next), the backend
  calls :meth:`ReplicaReads.wrote` — a flag, no I/O.
* The next replica read sees the flag, clears it, and asks the primary for
  ``pg_current_wal_lsn()`` once: every write this process saw complete is in the WAL
  before that position. That LSN becomes the read's floor.
* On the replica, ``pg_last_wal_replay_lsn()`` and the read go in one pipeline (one
  round trip); the read's snapshot is taken after the check, so it sees everything
  replayed up to the LSN checked. If the replica has replayed the floor, its answer
  is used (later reads on that connection need no check until the next write); if
  not, the read goes to the primary (no waiting: a lagging replica costs one extra
  round trip, never a stall). The replayed position is kept per pooled connection,
  not per URL: a ``replica_url`` may lead to several standbys (several hosts, a load
  balancer's read-only service, a name moved to another standby), each at its own
  position, and the floor is kept until the next write raises it (was: the position
  one standby had reached was taken for every standby's and the floor forgotten, so
  after the URL led to a lagging standby the writer read its own writes back older).
* The feed's frontier is computed on the primary (it reads the primary's lock table),
  in the same statement as ``pg_current_wal_lsn()``: the events up to the frontier
  are committed before that LSN, so the feed page is read from the replica only once
  it has replayed it — the same check as above.
* A replica that cannot be reached is skipped: the read goes to the primary and a
  warning is logged once per outage.

Reads that decide a write (``head``, the head tag, idempotency keys, leases) always go
to the primary: a stale answer there would only turn into a conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ...errors import StatekeeperError
from ..redact import mask_url
from .connection import check_connection, read_only_session, transient
from .loop_end import POOL_PREFIX, open_pool

if TYPE_CHECKING:
    from .backend import PostgresBackend

__all__ = ["REPLICA_QUERIES", "ReplicaReads"]

logger = logging.getLogger("statekeeper.backends.postgres")

#: the statements a replica may answer (sql/queries.sql): loads, listings and the feed
REPLICA_QUERIES = frozenset(
    {
        "read",
        "read_many",
        "read_latest",
        "read_state",
        "read_latest_many",
        "read_heads",
        "seq_at",
        "snap_latest",
        "keys",
        "list",
        "list_all",
        "list_before",
        "list_last",
        "list_newest_written",
        "list_newest_written_after",
        "list_oldest_written",
        "list_oldest_written_after",
        "count",
        "count_prefix",
        "feed_read",
        "feed_read_id",
    }
)

#: the replica's replayed WAL position, as a number; -1 from a server that is not
#: replaying (not in recovery: a standby promoted, a former primary back on its own —
#: it never catches up, whatever position it answers)
_REPLAYED = (
    b"SELECT CASE WHEN pg_is_in_recovery()"
    b" THEN (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint ELSE -1 END"
)
_PRIMARY_LSN = b"SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"


#: what a replica answers for a store whose schema it has not replayed yet
_NOT_REPLAYED = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.InvalidSchemaName,
)

#: seconds the primary serves every read after the replica could not be reached
#: (so a replica that is down costs one failed dial per interval, not one per read)
DOWN_RETRY = 1.0


class _NotStandby(StatekeeperError):
    """The replica's server is not replaying the primary's WAL (internal)."""


class ReplicaReads:
    """The replica's pool and the read-your-writes floor of one backend."""

    def __init__(self, backend: PostgresBackend, dsn: str, max_size: int) -> None:
        self.backend = backend
        self.dsn = dsn
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=0,
            max_size=max_size,
            timeout=backend.connect_timeout,
            reconnect_timeout=backend.connect_timeout,
            open=False,
            kwargs=backend._connect_kwargs,
            name=f"{POOL_PREFIX}{backend.schema}-replica",
            configure=read_only_session,
        )
        self._written = False
        #: this process's floor: the replica must have replayed it to serve a read
        self._floor = 0
        #: the replay position each pooled connection's server was seen at (the
        #: servers behind one URL may differ; one server's position never goes back
        #: while a connection to it is open)
        self._replayed: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], int] = (
            weakref.WeakKeyDictionary()
        )
        self._down = False
        self._retry_at = 0.0
        #: reads served by the replica / by the primary instead (lagging or down)
        self.served = {"replica": 0, "primary": 0}

    def __repr__(self) -> str:
        return f"ReplicaReads({mask_url(self.dsn)!r})"

    async def open(self) -> None:
        await open_pool(self.pool)

    async def close(self) -> None:
        await self.pool.close()

    def wrote(self) -> None:
        """A write of this process ended (committed, maybe committed, or conflicted):
        the next replica read must see it."""
        self._written = True

    async def _own_floor(self) -> int:
        if self._written:
            self._written = False
            rows = await self.backend._primary_query_sql("primary_lsn", _PRIMARY_LSN, ())
            self._floor = max(self._floor, int(rows[0][0]))
        return self._floor

    async def query(self, name: str, params: Any, *, lsn: int = 0) -> list[tuple[Any, ...]]:
        """Run the statement ``name`` on the replica if it has replayed this process's
        writes (and ``lsn``), else on the primary."""
        floor = max(await self._own_floor(), lsn)
        if self._down and time.monotonic() < self._retry_at:
            return await self._primary(name, params)
        query = self.backend._sql[name]
        try:
            async with self._connection() as conn:
                cur = conn.cursor(binary=True)
                known = self._replayed.get(conn)  # (None: a connection not checked yet)
                replayed = known if known is not None else -1
                if known is not None and floor <= known:
                    await cur.execute(query, params)
                    rows = await cur.fetchall()
                else:
                    check = conn.cursor()
                    async with conn.pipeline():
                        await check.execute(_REPLAYED)
                        await cur.execute(query, params)
                    row = await check.fetchone()
                    replayed = max(replayed, int(row[0]) if row else -1)
                    self._replayed[conn] = replayed
                    rows = await cur.fetchall()
            if replayed < 0:
                raise _NotStandby(f"{mask_url(self.dsn)} is not a standby (not in recovery)")
        except _NotStandby as exc:
            return await self._skip(name, params, str(exc))
        except psycopg.Error as exc:
            if not transient(exc):
                if floor > 0 or isinstance(exc, _NOT_REPLAYED):
                    # the replica has not replayed this process's writes (or the
                    # store's tables) yet, and the statement failed there: the
                    # primary answers, and a real error is raised from there
                    return await self._primary(name, params)
                raise
            return await self._skip(name, params, self.backend._reason(exc))
        self._down = False
        if floor > replayed:  # lagging: the primary answers
            return await self._primary(name, params)
        self.served["replica"] += 1
        return rows

    async def _skip(self, name: str, params: Any, why: str) -> list[tuple[Any, ...]]:
        """The replica cannot serve (unreachable, or no standby any more): the primary
        answers, and every read for :data:`DOWN_RETRY` seconds; a warning once."""
        if not self._down:
            logger.warning(
                "read replica %s unusable, reading from the primary: %s", mask_url(self.dsn), why
            )
        self._down = True
        self._retry_at = time.monotonic() + DOWN_RETRY
        return await self._primary(name, params)

    async def _primary(self, name: str, params: Any) -> list[tuple[Any, ...]]:
        self.served["primary"] += 1
        return await self.backend._primary_query(name, params)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await self.pool.getconn(timeout=self.backend.connect_timeout)
        try:
            await check_connection(conn)
        except psycopg.Error:
            with contextlib.suppress(Exception):
                await conn.close()
            await self.pool.putconn(conn)
            raise
        watch = self.backend._watchdog  # a frozen replica is an unreachable one
        token = watch.start()
        try:
            yield conn
        except asyncio.CancelledError as exc:
            if not watch.fired(token):
                raise
            raise psycopg.OperationalError(
                f"no answer within {self.backend.socket_timeout:g}s (socket_timeout)"
            ) from exc
        finally:
            watch.stop(token)
            await self.pool.putconn(conn)
