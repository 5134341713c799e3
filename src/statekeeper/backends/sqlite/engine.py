"""What the parts of :class:`~.backend.SQLiteBackend` declare of each other, for
the type checker only: :class:`SQLiteEngine`, the base of every part of the engine
(its state, set by :meth:`~.backend.SQLiteBackend.__init__` and the writer's open, and
the methods one part calls on another), and the types a queued append is made of."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias

from ...records import (
    AppendRequest,
    AppendResult,
    LeaseChange,
    LeaseInfo,
    RewriteRequest,
)
from ..base import NextRow
from . import wal as sqlite_wal
from .base import SQLitePart

if TYPE_CHECKING:
    from .connections import _Local


#: what runs the statements of a write: the writer connection or its append cursor
_Executes: TypeAlias = sqlite3.Connection | sqlite3.Cursor

#: an append in a commit queue: a request, or :meth:`SQLiteBackend.append_next`'s
#: arguments as they are
_Queued: TypeAlias = AppendRequest | NextRow


#: what a queued append comes back with (None: an ``append_next`` that landed)
_Outcome: TypeAlias = AppendResult | BaseException | None


class SQLiteEngine(SQLitePart):
    """The base of each part of the engine (:mod:`.opening`, :mod:`.connections`, …):
    the state :class:`~.backend.SQLiteBackend` sets up and the methods the parts call on
    each other, declared here for the type checker (each is defined by one part)."""

    stall_timeout: float
    inline_writes: bool
    append_commits: int
    commit_listeners: list[Callable[[int], None]]
    _local: _Local
    _readers: list[sqlite3.Connection]
    _idle: list[sqlite3.Connection]
    _readers_lock: threading.Lock
    _writer_pool: ThreadPoolExecutor
    _commit_pool: ThreadPoolExecutor
    _writer_busy: threading.Lock
    _append_cursor: sqlite3.Cursor
    _writer_reads: sqlite3.Cursor
    _save_next: bool
    _file_id: tuple[int, int] | None
    _wal_id: tuple[int, int] | None
    _wal_path: str
    _page_size: int
    _by_write: bool
    _empty_at_open: tuple[int, int] | None
    _wal_pages: float
    _wal_scale: float
    _wal_small: float
    _estimated: float
    _growth: sqlite_wal.Growth
    _checkpoint_at: float
    _wal_limit: float
    _wal_frames_at_open: int
    _checkpoint_due: bool
    _queues: dict[
        asyncio.AbstractEventLoop,
        list[tuple[_Queued, asyncio.Future[_Outcome]]],
    ]
    _in_flight: set[asyncio.AbstractEventLoop]
    _pass_due: float

    if TYPE_CHECKING:
        # (of the reads', leases' and maintenance parts, used by the appends)
        @staticmethod
        def _lease_row(conn: _Executes, agent_id: str) -> LeaseInfo | None:
            """(:mod:`.leases`)"""

        def _lease_change(
            self, conn: sqlite3.Connection, agent_id: str, lease: LeaseChange
        ) -> None:
            """(:mod:`.leases`)"""

        def _rewrite_one(self, conn: sqlite3.Connection, request: RewriteRequest) -> bool:
            """(:mod:`.admin`)"""

        @staticmethod
        def _prune_rows(
            conn: _Executes, agent_id: str, head: int, base_seq: int, drop: Sequence[int]
        ) -> None:
            """(:mod:`.admin`)"""

        # (of the engine's parts)

        def _append_all(
            self, conn: _Executes, requests: Sequence[_Queued], savepoints: bool = False
        ) -> list[_Outcome]:
            """(:mod:`.appends`)"""

        def _append_batch_sync(self, requests: Sequence[_Queued]) -> list[_Outcome]:
            """(:mod:`.appends`)"""

        def _append_one(self, conn: _Executes, request: AppendRequest) -> AppendResult:
            """(:mod:`.appends`)"""

        def _append_row(self, cur: _Executes, *row: *NextRow) -> None:
            """(:mod:`.appends`; ``row``: a :data:`NextRow`'s fields, as they are)"""

        def _begin(self, conn: _Executes) -> None:
            """(:mod:`.connections`)"""

        def _commit_lone(self, pages: int, write: Callable[..., Any], *args: Any) -> Any:
            """(:mod:`.lone`)"""

        def _commit_statement(self, request: AppendRequest) -> Any:
            """(:mod:`.lone`)"""

        def _row_statement(self, row: NextRow) -> Any:
            """(:mod:`.lone`)"""

        def _commit_one(
            self, request: AppendRequest | None, row: NextRow | None
        ) -> Awaitable[_Outcome]:
            """(:mod:`.commits`)"""

        def _committed(self, appends: int) -> None:
            """(:mod:`.commits`)"""

        def _connect(self) -> sqlite3.Connection:
            """(:mod:`.opening`)"""

        @staticmethod
        def _create_schema(conn: sqlite3.Connection) -> None:
            """(:mod:`.schema`)"""

        def _enable_wal(self, conn: sqlite3.Connection) -> str:
            """(:mod:`.opening`)"""

        def _failure(self, exc: Exception) -> BaseException:
            """(:mod:`.appends`)"""

        def _init_writer(self, conn: sqlite3.Connection) -> None:
            """(:mod:`.schema`)"""

        def _join_commit(
            self, request: _Queued, loop: asyncio.AbstractEventLoop
        ) -> asyncio.Future[_Outcome]:
            """(:mod:`.commits`)"""

        def _locked(self, fn: Any, *args: Any) -> Any:
            """(:mod:`.connections`)"""

        def _moved(self) -> bool:
            """(:mod:`.connections`)"""

        def _wal_frames(self) -> int:
            """(:mod:`.checkpoints`)"""

        def _wrote(self, pages: int, held: bool = False) -> None:
            """(:mod:`.checkpoints`)"""
