"""What the parts of :class:`~.backend.RedisBackend` declare of each other, for the type
checker only: :class:`RedisEngine`, the base of every part (:mod:`.store`,
:mod:`.connection`, :mod:`.retrying`, :mod:`.calls`, :mod:`.appends`...): the state
:meth:`~.backend.RedisBackend.__init__` sets up and the methods one part calls on
another (each defined by one part, named in its stub)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import StoreLost
from ...records import AgentInfo, AppendRequest
from ..base import Backend
from ..recovery import Reconnecting
from .base import AsyncScript, T
from .client import Client
from .identity import Identity
from .keys import AgentKeys, Layout, ShardKeys

__all__ = ["RedisEngine"]


class RedisEngine(Backend):
    """The base of each part of the Redis backend: its settings and state (set by
    :meth:`~.backend.RedisBackend.__init__`) and the methods the parts call on each
    other, declared here for the type checker (each is defined by one part)."""

    if TYPE_CHECKING:
        # (set by RedisBackend.__init__; declared for the type checker only: the class
        # keeps its annotations as they were)
        cluster: bool
        url: str
        connect_timeout: float
        _reached: bool
        prefix: str
        ttl: float | None
        touch: bool
        readonly: bool
        retry_timeout: float
        wait_replicas: int
        wait_timeout: float
        evictable: bool
        _tokens_checked: bool
        _tier_of_record: bool
        _pfx: bytes
        layout: Layout
        _identity: Identity
        _recheck_eviction: bool
        _own_ttls: bool
        _limits: tuple[int, int] | None
        feed: bool
        _block_limit: float
        _ttl_ms: str
        _touch: str
        _client: Client
        _append_script: AsyncScript
        _read_script: AsyncScript
        _seq_at_script: AsyncScript
        _latest_script: AsyncScript
        _read_latest_script: AsyncScript
        _save_snapshot_script: AsyncScript
        _delete_script: AsyncScript
        _ttl_script: AsyncScript
        _hold_script: AsyncScript
        _rewrite_script: AsyncScript
        _prune_script: AsyncScript
        _replace_snapshot_script: AsyncScript
        _from_base_script: AsyncScript
        _together_script: AsyncScript
        _trim_feed_script: AsyncScript
        _rename_keys_script: AsyncScript
        _acquire_script: AsyncScript
        _renew_script: AsyncScript
        _release_script: AsyncScript
        _carry_script: AsyncScript
        _closed: bool
        _loop: asyncio.AbstractEventLoop | None
        _reconnect: Reconnecting

        # (the methods the parts call on each other)

        def _agent(self, agent_id: str) -> AgentKeys:
            """(:mod:`.store`)"""

        def _ttl_of(self, agent_id: str) -> str:
            """(:mod:`.store`)"""

        def _keys(self, agent_id: str) -> tuple[bytes, bytes]:
            """(:mod:`.store`)"""

        def _lease_key(self, agent_id: str) -> bytes:
            """(:mod:`.store`)"""

        def _check_writable(self) -> None:
            """(:mod:`.store`)"""

        async def open(self) -> None:
            """(:mod:`.connection`)"""

        async def _adopt(self) -> None:
            """(:mod:`.connection`)"""

        def _reject(self, what: str, exc: BaseException) -> BaseException:
            """(:mod:`.retrying`)"""

        async def _explained(self, lost: StoreLost) -> StoreLost:
            """(:mod:`.retrying`)"""

        async def _after_failure(self) -> None:
            """(:mod:`.retrying`)"""

        def _check_open(self) -> None:
            """(:mod:`.retrying`)"""

        def _reason(self, exc: BaseException) -> str:
            """(:mod:`.retrying`)"""

        async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
            """(:mod:`.retrying`)"""

        async def _prepare(self) -> None:
            """(:mod:`.retrying`)"""

        def _guarded(
            self, keys: list[bytes], args: list[Any], shards: Sequence[ShardKeys]
        ) -> tuple[list[bytes], list[Any]]:
            """(:mod:`.calls`)"""

        def _read_run(
            self, agent_id: str, script: AsyncScript, keys: list[bytes], args: list[Any]
        ) -> Awaitable[Any]:
            """(:mod:`.calls`)"""

        async def _checked(self, agent_id: str, commands: list[tuple[Any, ...]]) -> list[Any]:
            """(:mod:`.calls`)"""

        def _get_markers(self, pipe: Any) -> None:
            """(:mod:`.calls`)"""

        def _check_markers(self, replies: list[Any]) -> list[Any]:
            """(:mod:`.calls`)"""

        async def _write(
            self,
            agent_id: str,
            script: AsyncScript,
            keys: list[bytes],
            args: list[Any],
            shards: Sequence[ShardKeys] | None = None,
        ) -> Any:
            """(:mod:`.calls`)"""

        async def _check_size(self, agent_id: str, args: Sequence[Any]) -> None:
            """(:mod:`.calls`)"""

        async def _barrier(self, agent_id: str, commands: list[tuple[Any, ...]]) -> tuple[Any, Any]:
            """(:mod:`.calls`)"""

        def _check_acked(self, acked: Any) -> None:
            """(:mod:`.calls`)"""

        async def _settle_ttl(self) -> None:
            """(:mod:`.ttls`)"""

        @property
        def _expiring(self) -> bool:
            """(:mod:`.ttls`)"""

        def _append_call(self, request: AppendRequest) -> tuple[list[bytes], list[Any]]:
            """(:mod:`.appends`)"""

        async def _landed(self, request: AppendRequest) -> bool:
            """(:mod:`.appends`)"""

        async def _granted(self) -> None:
            """(:mod:`.leases`)"""

        async def _absent(self, agent_id: str) -> None:
            """(:mod:`.reads`)"""

        def _queue_proofs(self, pipe: Any) -> None:
            """(:mod:`.reads`)"""

        def _check_proofs(self, found: list[Any]) -> None:
            """(:mod:`.reads`)"""

        async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
            """(:mod:`.reads`)"""

        async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
            """(:mod:`.listing`)"""
