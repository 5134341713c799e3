"""The calls of the scripts and commands: guarded by the shards' identity markers
(:mod:`.identity`), a write's size checked against the server's limits (:mod:`.limits`),
and with ``wait_replicas`` the replication barrier (``WAIT``) after it."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, cast

from ...errors import BackendError
from .base import AsyncScript
from .client import on_node
from .engine import RedisEngine
from .keys import ShardKeys
from .limits import SURELY_TAKEN, oversize, read_limits, request_size

__all__ = ["RedisCalls"]


class RedisCalls(RedisEngine):
    """The guarded calls and the replication barrier (a part of :class:`~.backend.RedisBackend`)."""

    def _guarded(
        self, keys: list[bytes], args: list[Any], shards: Sequence[ShardKeys]
    ) -> tuple[list[bytes], list[Any]]:
        """A script call's KEYS and ARGV with what ``lua/guard.lua`` needs to check the
        identity markers of ``shards`` (see :mod:`.identity`)."""
        more_keys, more_args = self._identity.guard(shards)
        return keys + more_keys, args + more_args

    def _read_run(
        self, agent_id: str, script: AsyncScript, keys: list[bytes], args: list[Any]
    ) -> Awaitable[Any]:
        """A read script's call, guarded by the agent's shard marker (the script's own
        awaitable: no coroutine of ours around it, on every load's path)."""
        keys, args = self._guarded(keys, args, (self.layout.shard(agent_id),))
        return cast(Awaitable[Any], script(keys=keys, args=args))

    async def _checked(self, agent_id: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """``commands`` (plain reads of one agent's keys) in one pipeline with a ``GET``
        of the agent's shard marker after them (same round trip, one node): their
        replies, or :class:`~statekeeper.errors.StoreLost` when the shard lost its data
        (see :mod:`.identity`)."""
        shard = self.layout.shard(agent_id)
        async with self._client.pipeline(transaction=False) as pipe:
            for c in commands:
                pipe.execute_command(*c)
            pipe.get(shard.epoch)
            replies = await pipe.execute()
        self._identity.check(shard, replies[-1])
        return list(replies[:-1])

    def _get_markers(self, pipe: Any) -> None:
        """Queue a ``GET`` of every shard's identity marker at the end of ``pipe`` (a
        store-wide read: the listings, the counts, the feed bounds)."""
        for shard in self.layout.shard_keys:
            pipe.get(shard.epoch)

    def _check_markers(self, replies: list[Any]) -> list[Any]:
        """The replies before the markers :meth:`_get_markers` queued, once the markers
        are checked (:class:`~statekeeper.errors.StoreLost` when a shard lost its data)."""
        shards = self.layout.shard_keys
        found = replies[-len(shards) :]
        for shard, value in zip(shards, found, strict=True):
            self._identity.check(shard, value)
        return replies[: -len(shards)]

    async def _write(
        self,
        agent_id: str,
        script: AsyncScript,
        keys: list[bytes],
        args: list[Any],
        shards: Sequence[ShardKeys] | None = None,
    ) -> Any:
        """Run a write script, guarded by the identity markers of ``shards`` (default:
        the agent's shard; see :mod:`.identity`); with ``wait_replicas``, on the master
        owning the agent, then a write to the shard's ``sync`` counter and ``WAIT``, all
        on one connection (see :mod:`.client`). The counter write makes the ``WAIT``
        cover everything the master applied before it, even when the script itself
        wrote nothing (a duplicate whose first write is not yet replicated)."""
        if request_size(args) > SURELY_TAKEN:  # (a huge record: .limits)
            await self._check_size(agent_id, args)
        if shards is None:  # (inlined: on every save's path)
            layout = self.layout
            tail = self._identity.tail_of[0 if layout.shards is None else layout.shard_of(agent_id)]
        else:
            tail = self._identity.guard(shards)
        keys, args = keys + tail[0], args + tail[1]
        if not self.wait_replicas:
            return await script(keys=keys, args=args)
        reply, acked = await self._barrier(
            agent_id, [("EVAL", script.script, len(keys), *keys, *args)]
        )
        if isinstance(reply, BaseException):
            raise reply
        self._check_acked(acked)
        return reply

    async def _check_size(self, agent_id: str, args: Sequence[Any]) -> None:
        """:class:`StateTooLarge` for a write the server would not read (see .limits)."""
        if self._limits is None:
            self._limits = await self._retrying("config get", lambda: read_limits(self._client))
        refused = oversize(agent_id, args, self._limits)
        if refused is not None:
            raise refused

    async def _barrier(self, agent_id: str, commands: list[tuple[Any, ...]]) -> tuple[Any, Any]:
        """``commands`` (one) then the replication barrier, on the agent's master."""
        sync = self._agent(agent_id).shard.sync
        ms = max(1, round(self.wait_timeout * 1000))
        replies = await on_node(
            self._client,
            sync,
            [*commands, ("INCRBY", sync, 0), ("WAIT", self.wait_replicas, ms)],
        )
        return replies[0], replies[-1]

    def _check_acked(self, acked: Any) -> None:
        if isinstance(acked, BaseException):
            raise acked
        if int(acked) < self.wait_replicas:
            raise BackendError(
                f"redis write applied on the master but acknowledged by {int(acked)} of "
                f"{self.wait_replicas} replicas within {self.wait_timeout:g}s (wait_timeout): "
                "it is lost if that master fails before replicating it",
                maybe_applied=True,
            )
