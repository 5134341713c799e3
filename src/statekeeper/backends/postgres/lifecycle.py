"""The PostgreSQL backend's lifecycle: the first contact (one dial bounded by
``connect_timeout``, then the pool and the schema's migrations or read-only check),
the schema's version, ``drop_all``, ``close`` and ``health``. A mixin of
:class:`~.backend.PostgresBackend`."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from ...errors import BackendUnavailable, ReadOnlyStore, StoreClosed
from ..base import Health
from ..redact import mask_url
from . import feed_id as feed_ids
from . import schema as _schema
from .loop_end import open_pool
from .part import PostgresPart
from .refusals import mark_opening

__all__ = ["Lifecycle"]


class Lifecycle(PostgresPart):
    """Opening, closing and health of :class:`~.backend.PostgresBackend`."""

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
            await open_pool(self._pool)
            self._end.watch()
            try:
                await self._open_schema()
            except psycopg.Error as exc:  # labelled as the opening (.refusals.label)
                mark_opening(exc)
                raise
            if self._replica is not None:
                await self._replica.open()
            self._opened = True

    async def _open_schema(self) -> None:
        if self.readonly:
            await _schema.check_store(self)
        else:
            await _schema.migrate(self)
            self._wrote()  # the schema may be new: a replica read must first see it replayed
        await _schema.opened(self)

    async def ensure_store(self) -> None:
        await self.open()

    async def initialize(self) -> None:
        self._check_writable()
        await self.open()
        await feed_ids.feed_id(self)  # so that a store only ever read has one too

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
        """Delete everything this backend stored: its tables, sequence and functions, and
        its schema when the store created it and nothing else is in it (another
        application's tables in the schema are left alone). For tests and benchmarks;
        irreversible."""
        self._check_writable()
        self._check_open()
        await open_pool(self._pool)
        self._end.watch()
        await self._retrying("drop_all", lambda: _schema.drop_all(self))
        self._opened = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"postgresql backend (schema {self.schema!r}) {self._closed_why}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watchdog.close()
        if self._end.dead():  # (its loop closed under it: nothing of it can run again)
            self._end.bury(
                "was closed after the event loop it ran on was closed (a LangGraph saver's"
                " own loop, or a loop per job)"
            )
            return
        await self._end.stop()
        await self._feed.close()
        if self._replica is not None:
            await self._replica.close()
        await self._pool.close()

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
            detail["partitions"] = await _schema.partition_count(self)
            if self._replica is not None:
                detail["replica"] = {"reads": dict(self._replica.served)}
            stats = self._pool.get_stats()
            detail["pool"] = {
                k: stats.get(k, 0) for k in ("pool_size", "pool_available", "requests_waiting")
            }
        except Exception as exc:  # health reports, it does not raise
            return Health(ok=False, backend=self.name, detail={**detail, "error": str(exc)})
        return Health(ok=True, backend=self.name, detail=detail)
