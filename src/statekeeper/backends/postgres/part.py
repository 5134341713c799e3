"""What the PostgreSQL backend's mixins (:mod:`.appends`, :mod:`.reads`, :mod:`.leases`,
:mod:`.rewrites`, :mod:`.lifecycle`, :mod:`.removals`...) and the functions they call
(:mod:`.schema`, :mod:`.feed_id`, :mod:`.deletes`) may use of
:class:`~.backend.PostgresBackend`, declared once for the type checker. At run time
this class adds nothing to :class:`~..base.Backend`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..base import Backend

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from ...records import LeaseInfo, RawEvent, RewriteRequest, StreamChange
    from ..recovery import Reconnecting
    from .coalesce import Coalesced
    from .feed import FeedReader
    from .loop_end import LoopEnd
    from .replica import ReplicaReads
    from .watchdog import Watchdog

T = TypeVar("T")

__all__ = ["PostgresPart"]


class PostgresPart(Backend):
    """The base of the PostgreSQL backend's mixins (see the module docstring)."""

    if TYPE_CHECKING:  # provided by PostgresBackend
        _sql: dict[str, bytes]
        schema: str
        dsn: str
        partitions: int | None
        readonly: bool
        connect_timeout: float
        tombstones_by_namespace: bool
        audit_lock_timeout: float
        intents_by_namespace: bool
        _pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
        _end: LoopEnd
        _watchdog: Watchdog
        _replica: ReplicaReads | None
        _closed: bool
        _closed_why: str
        _open_lock: asyncio.Lock | None
        _connect_kwargs: dict[str, Any]
        _opened: bool
        _feed: FeedReader
        _reconnect: Reconnecting
        _reading: bool
        _read_queue: list[tuple[tuple[Any, ...], asyncio.Future[list[RawEvent]]]]
        _read_runner: asyncio.Task[None] | None
        _heads: Coalesced[tuple[str, bool], tuple[int, bytes | None]]
        _lease_floor: int

        def _check_open(self) -> None: ...
        def _check_writable(self) -> None: ...
        def _check_can_write(self) -> None: ...
        async def _ensure_open(self) -> None: ...
        def _wrote(self) -> None: ...
        def _reason(self, exc: BaseException) -> str: ...
        def _failure(self, what: str, exc: BaseException) -> Exception: ...
        def _connection(
            self, bounded: bool = True
        ) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...
        async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T: ...
        async def _query(
            self, name: str, params: Sequence[Any], *, lsn: int = 0
        ) -> list[tuple[Any, ...]]: ...
        async def _primary_query(
            self, name: str, params: Sequence[Any]
        ) -> list[tuple[Any, ...]]: ...
        async def _prune_in(
            self,
            conn: Any,
            agent_id: str,
            base_seq: int,
            drop_snapshots: Sequence[int],
            expected: int | None = None,
            checksum: bytes | None = None,
        ) -> None: ...
        async def get_lease(self, agent_id: str) -> LeaseInfo | None: ...
        async def _rewrite_in(
            self, conn: Any, request: RewriteRequest, retry: bool = False
        ) -> None: ...
        async def _change(self, conn: Any, change: StreamChange) -> None: ...
