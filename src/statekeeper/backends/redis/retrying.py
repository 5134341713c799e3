"""Retries and errors: an operation retried after connection errors until ``retry_timeout``
(:class:`~..recovery.Reconnecting`), with the cluster's topology read again after a
failed try; what a failure no retry cures becomes; the checks of an open backend on its
event loop."""

from __future__ import annotations

import asyncio
import logging
from asyncio import current_task
from collections.abc import Awaitable, Callable

from ...errors import (
    AgentLost,
    BackendError,
    BackendRejected,
    ConfigurationError,
    FeedLost,
    StoreClosed,
    StoreLost,
)
from ..redact import one_line, scrub
from .base import RedisClusterException, RedisError, T, _part_way
from .client import WaitingCluster
from .engine import RedisEngine
from .eviction import check_eviction, evicting_policy

__all__ = ["RedisRetrying"]

logger = logging.getLogger("statekeeper.backends.redis")


class RedisRetrying(RedisEngine):
    """Retries and errors (a part of :class:`~.backend.RedisBackend`)."""

    async def _retrying(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` (safe to repeat), retrying connection errors until the deadline;
        a :class:`StoreLost` comes with its likely cause (:meth:`_explained`), a
        cancellation the client lost is raised again (see :mod:`.client`)."""
        task = current_task()  # a lost cancel: see .client
        asked = task.cancelling() if task is not None else 0
        try:
            result = await self._reconnect.run(what, op)
        except StoreLost as lost:
            raise await self._explained(lost) from lost.__cause__
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        return result

    async def _prepare(self) -> None:
        if not self._reached:
            await self.open()
        elif self._recheck_eviction:
            await check_eviction(self._client, self.url, self._expiring)
            self._recheck_eviction = False

    async def _refresh_topology(self) -> None:
        """After a failed try on a cluster: re-read which master owns which slots (a
        failover moved them), so the retry goes to the new master."""
        if isinstance(self._client, WaitingCluster):
            try:
                async with self._client.admitted():  # (it takes a node's connection)
                    await self._client.nodes_manager.initialize()
            except (RedisError, OSError, BackendError) as exc:  # the retry reports it
                logger.debug("redis cluster topology refresh failed: %s", self._reason(exc))

    def _reject(self, what: str, exc: BaseException) -> BaseException:
        """The error a failure no retry can cure becomes: :class:`StoreLost` for a
        script's identity check (``lua/guard.lua``), else :class:`BackendRejected`."""
        lost = self._identity.lost(exc)
        if lost is not None:
            return lost
        # a command a script ran refused (an ACL changed since the open, a key of the
        # wrong type, memory): Redis keeps what the script wrote before it, so a write
        # may be half applied — never reported as a clean refusal
        return BackendRejected(f"{what}: {self._reason(exc)}", maybe_applied=_part_way(exc))

    async def _explained(self, lost: StoreLost) -> StoreLost:
        """``lost`` with the likely cause when the server now evicts any key when full
        (a ``CONFIG SET`` since the backend checked, see :mod:`.eviction`): the policy
        is read again here, where it costs nothing on the way of a normal operation."""
        try:
            policy = await evicting_policy(self._client)
        except (RedisError, RedisClusterException, OSError):  # the loss is the news
            policy = None
        if policy is None:
            return lost
        reason = (
            f"{lost.reason}; the server now evicts any key when full ({policy}), the likely "
            "cause: set maxmemory-policy noeviction"
        )
        if isinstance(lost, AgentLost):
            return AgentLost(lost.location, lost.agent_id, reason)
        if isinstance(lost, FeedLost):
            return FeedLost(
                lost.location,
                lost.what,
                reason,
                lost.recovery,
                after=lost.after,
                through=lost.through,
                shard=lost.shard,
            )
        return StoreLost(lost.location, reason, shard=lost.shard)

    async def _after_failure(self) -> None:
        """After a failed try: a cluster's topology is read again; and the next try
        first checks the eviction policy again (a server restarted, or failed over,
        may have come back with another one)."""
        self._recheck_eviction = not self.evictable
        await self._refresh_topology()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"redis backend (prefix {self.prefix!r}) is closed")
        if (loop := asyncio._get_running_loop()) is not self._loop and loop is not None:
            self._check_loop(loop)

    def _check_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The client's connections, and its pool's waits, belong to the event loop
        that first used them: from another loop redis-py failed with an untyped
        ``RuntimeError`` ("attached to a different loop", "Event loop is closed") and
        left the connection it broke to the first loop. So the first loop is kept and
        another refused with why (``tests/backends/test_redis_two_loops.py``)."""
        first = self._loop
        if first is None:
            self._loop = loop
            return
        if first.is_closed():
            raise StoreClosed(
                f"redis backend (prefix {self.prefix!r}): the event loop it ran on has "
                "ended, and its connections with it. A store serves one event loop: "
                "open a new store in this one (for example one per asyncio.run)"
            )
        raise ConfigurationError(
            f"redis backend (prefix {self.prefix!r}) is in use on another event loop: "
            "a store serves one event loop; open a second store for this one"
        )

    def _reason(self, exc: BaseException) -> str:
        """The driver's message on one line, with the URL's secrets masked."""
        return one_line(scrub(str(exc), self.url)) or type(exc).__name__
