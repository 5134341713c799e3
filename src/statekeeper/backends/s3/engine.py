"""What the parts of :class:`~.backend.S3Backend` declare of each other, for the type
checker only: :class:`S3Engine`, the base of every part (:mod:`.store`, :mod:`.keys`,
:mod:`.objects`, :mod:`.stream`, :mod:`.appends`...): the state
:meth:`~.backend.S3Backend.__init__` sets up and the methods one part calls on
another (each defined by one part, named in its stub)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ...errors import ConflictError
from ...records import RawEvent, RawSnapshot, RewriteRequest
from ..base import Backend
from .base import ClientError, T
from .claims import TakenBy
from .landed import Landed
from .layout import _Layout

__all__ = ["S3Engine"]


class S3Engine(Backend):
    """The base of each part of the S3 backend: its settings and state (set by
    :meth:`~.backend.S3Backend.__init__`) and the methods the parts call on each other,
    declared here for the type checker (each is defined by one part)."""

    if TYPE_CHECKING:
        # (set by S3Backend.__init__; declared for the type checker only: the class keeps
        # its annotations as they were)
        bucket: str
        prefix: str
        endpoint_url: str | None
        readonly: bool
        create_bucket: bool
        connect_timeout: float
        read_timeout: float
        rewrite_claim_timeout: float
        max_id_bytes: int
        _clock: Callable[[], float]
        _taken_by: TakenBy
        _root: str
        _marker: str
        _markers: str
        _id_key: str
        _s3: Any
        _pool: ThreadPoolExecutor
        _wave: int
        _cache: OrderedDict[tuple[str, str], tuple[Any, int]]
        _cache_bytes: int
        _cached_bytes: int
        _cache_lock: threading.Lock
        _seen_mark: threading.local
        _ready: bool
        _closed: bool
        _versioning: bool | None
        _landed: Landed

        # (the methods the parts call on each other)

        def _check_writable(self) -> None:
            """(:mod:`.store`)"""

        def _agent_root(self, agent_id: str) -> str:
            """(:mod:`.keys`)"""

        def longest_key(self, agent_id: str) -> str:
            """(:mod:`.keys`)"""

        @staticmethod
        def _seq_name(seq: int) -> str:
            """(:mod:`.keys`)"""

        @staticmethod
        def _key_hash(key: str) -> str:
            """(:mod:`.keys`)"""

        def _check_open(self) -> None:
            """(:mod:`.objects`)"""

        async def _run(self, fn: Callable[..., T], *args: Any) -> T:
            """(:mod:`.objects`)"""

        async def _call(self, fn: Callable[..., T], *args: Any) -> T:
            """(:mod:`.objects`)"""

        def _where(self) -> str:
            """(:mod:`.objects`)"""

        def _list(self, prefix: str, start_after: str | None = None) -> list[str]:
            """(:mod:`.objects`)"""

        def _list_tagged(
            self, prefix: str, start_after: str | None = None
        ) -> list[tuple[str, str]]:
            """(:mod:`.objects`)"""

        def _cached(self, key: str, tag: str, load: Callable[[], T]) -> T:
            """(:mod:`.objects`)"""

        def _get(self, key: str) -> tuple[bytes, dict[str, str]] | None:
            """(:mod:`.objects`)"""

        def _head_meta(self, key: str) -> dict[str, str] | None:
            """(:mod:`.objects`)"""

        def _object(self, call: Callable[..., dict[str, Any]], key: str) -> dict[str, Any] | None:
            """(:mod:`.objects`)"""

        def _put_new(self, key: str, body: bytes, metadata: dict[str, str] | None = None) -> bool:
            """(:mod:`.objects`)"""

        def _ours(self, exc: ClientError, key: str, token: str) -> bool:
            """(:mod:`.objects`)"""

        def _put_if_match(
            self, key: str, events: Sequence[RawEvent], metadata: dict[str, str], etag: str
        ) -> ClientError | None:
            """(:mod:`.objects`)"""

        def _delete_if_match(self, key: str, etag: str) -> bool:
            """(:mod:`.objects`)"""

        def _commits(self, agent_id: str) -> list[int]:
            """(:mod:`.stream`)"""

        def _commits_tagged(self, agent_id: str) -> list[tuple[int, str]]:
            """(:mod:`.stream`)"""

        def _layout(self, agent_id: str) -> _Layout:
            """(:mod:`.stream`)"""

        def _tip_layout(
            self, agent_id: str, *, check: bool = True
        ) -> tuple[_Layout, dict[str, str] | None]:
            """(:mod:`.stream`)"""

        def _raise_mark(self, root: str, inc: str, last: int) -> None:
            """(:mod:`.stream`)"""

        def _tip(self, agent_id: str) -> tuple[list[int], dict[str, str] | None]:
            """(:mod:`.stream`)"""

        def _base_sync(self, agent_id: str) -> int:
            """(:mod:`.stream`)"""

        @staticmethod
        def _tip_first(commits: Sequence[int], meta: dict[str, str]) -> int:
            """(:mod:`.stream`)"""

        def _head_sync(self, agent_id: str) -> int:
            """(:mod:`.stream`)"""

        def _snapshot_key(self, agent_id: str, seq: int) -> str:
            """(:mod:`.snapshots`)"""

        def _put_snapshot(self, agent_id: str, snapshot: RawSnapshot, inc: str | None) -> None:
            """(:mod:`.snapshots`)"""

        def _claim_rewrite(self, request: RewriteRequest) -> tuple[str, str, int]:
            """(:mod:`.claiming`)"""

        def _hold(self, request: RewriteRequest, held: tuple[str, str]) -> None:
            """(:mod:`.claiming`)"""

        def _conflict(
            self,
            agent_id: str,
            expected: int,
            found: dict[str, str] | None,
            head: int | None = None,
        ) -> ConflictError:
            """(:mod:`.claiming`)"""

        def _break_stale_claim(self, key: str, finished: str | None = None) -> bool:
            """(:mod:`.claiming`)"""

        def _release_rewrite(self, key: str, token: str) -> None:
            """(:mod:`.claiming`)"""

        def _delete_keys(self, keys: Sequence[str]) -> None:
            """(:mod:`.objects`)"""

        def _drop_older_versions(self, keys: Sequence[str]) -> None:
            """(:mod:`.objects`)"""

        def _withdraw_claim(self, agent_id: str, head: int) -> None:
            """(:mod:`.deletes`)"""

        def _finish_delete(self, agent_id: str) -> None:
            """(:mod:`.deletes`)"""

        async def head(self, agent_id: str) -> int:
            """(:mod:`.reads`)"""

        def _latest_sync(self, agent_id: str, at_or_below: int | None) -> RawSnapshot | None:
            """(:mod:`.snapshots`)"""

        def _agent_ids(self, after: str | None, limit: int) -> list[str]:
            """(:mod:`.listing`)"""
