"""The redis-py client behind a backend: one server (``Redis``) or a cluster
(``RedisCluster``), and the one place that knows the difference.

* redis-py's own command retries are off in both (a re-sent append could be applied
  twice): the backend retries reads and settles lost appends itself.
* A cancellation the client lost: redis-py sends every command under
  ``asyncio.wait_for(..., socket_timeout)``, and before Python 3.12 ``wait_for``
  returns the inner result instead of raising ``CancelledError`` when the task is
  cancelled just as the send completes (CPython gh-86296). A live feed subscription
  cancelled at that moment went on waiting for ever (its loop sends a command every
  second). The backend compares the task's pending cancellations
  (``Task.cancelling()``) before and after a call: more after a call that returned
  normally is a swallowed ``cancel()``, raised again as ``CancelledError``. One that
  was delivered and taken back (``asyncio.timeout``, ``uncancel``) leaves the count
  as it was.
* A caller waits for a free connection of the pool (:class:`WaitingPool`, redis-py's
  ``BlockingConnectionPool``) for up to ``pool_timeout`` seconds, as PostgreSQL's
  pool makes it wait: redis-py's plain pool fails at once with "Too many
  connections", a ``ConnectionError`` the backend took for a lost server (and
  retried, and reported as one). A wait that runs out raises
  :class:`~statekeeper.errors.BackendError` naming the pool's size and the two options
  that raise it, and is not retried: nothing was sent.
  A cluster's nodes have no such pool (redis-py's ``ClusterNode`` raises "Too many
  connections" at once, and builds its nodes itself), so :class:`WaitingCluster`
  admits at most ``max_connections`` calls at a time (:attr:`WaitingCluster.gate`):
  a call (a command, a pipeline, :func:`on_node`) takes at most one connection of
  each node, so no node is ever asked for more. The others wait, up to
  ``pool_timeout``, then the same ``BackendError``. A call made inside one (a
  pipeline's redirected command, a topology refresh) goes through the gate its caller
  holds.
* :func:`on_node` runs a few commands back to back on ONE connection to the master
  that owns a key. That is what ``WAIT`` needs: it waits for the replication of the
  writes made on its own connection, so a script and the ``WAIT`` after it must share
  a connection (the cluster client would send them over two).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, PipelineCommand, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...errors import BackendError, ConfigurationError
from ..redact import mask_url, scrub
from .urls import cluster_nodes, is_cluster

__all__ = ["Client", "WaitingCluster", "WaitingPool", "make_client", "on_node", "transient"]

Client = aioredis.Redis | RedisCluster


def transient(exc: BaseException) -> bool:
    """A failure a retry can cure: a lost connection, and on a cluster the moments of a
    failover (``CLUSTERDOWN``, ``TRYAGAIN``, a slot that moved or is not covered yet)."""
    return isinstance(
        exc,
        RedisConnectionError
        | RedisTimeoutError
        | OSError
        | ClusterDownError
        | TryAgainError
        | AskError  # MovedError too
        | SlotNotCoveredError,
    )


class WaitingPool(aioredis.BlockingConnectionPool):
    """A connection pool whose callers wait (up to ``timeout`` seconds) for a free
    connection when all ``max_connections`` are in use; then
    :class:`~statekeeper.errors.BackendError` says so."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if not isinstance(exc.__cause__, asyncio.TimeoutError):
                raise  # (a connection that failed to open: the server's)
            raise _no_free_connection(self.timeout, self.max_connections) from exc


def _no_free_connection(timeout: float | None, size: int) -> BackendError:
    return BackendError(
        f"redis: no free connection within {timeout:g}s: all "
        f"{size} connections of the pool (max_connections) "
        "were in use; raise max_connections or pool_timeout (nothing was sent)"
    )


# the client whose gate the running call holds (the calls redis-py makes inside it,
# in this task or in tasks it starts, go through on that place)
_inside: ContextVar[WaitingCluster | None] = ContextVar(
    "statekeeper_redis_cluster_gate", default=None
)


class WaitingCluster(RedisCluster):
    """redis-py's cluster client, whose callers wait (up to ``pool_timeout`` seconds)
    for one of ``max_connections`` places (:attr:`gate`) rather than fail with "Too
    many connections"; then :class:`~statekeeper.errors.BackendError` says so."""

    def __init__(self, *args: Any, pool_timeout: float = 30.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_size: int = kwargs.get("max_connections", 100)
        self.pool_timeout = pool_timeout
        self.gate = asyncio.Semaphore(self.pool_size)

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Hold one place of :attr:`gate` (the caller's own, if it holds one)."""
        if _inside.get() is self:
            yield
            return
        try:
            async with asyncio.timeout(self.pool_timeout):
                await self.gate.acquire()
        except TimeoutError:
            raise _no_free_connection(self.pool_timeout, self.pool_size) from None
        token = _inside.set(self)
        try:
            yield
        finally:
            _inside.reset(token)
            self.gate.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.admitted():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> Any:
        if shard_hint:  # (refused)
            return super().pipeline(transaction, shard_hint)
        # (redis-py's stubs leave _event_dispatcher abstract on every cluster pipeline)
        return _WaitingPipeline(self, transaction)  # type: ignore[abstract]


class _WaitingPipeline(ClusterPipeline):
    """A cluster pipeline sent under one place of its client's gate."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> Any:
        client = self.cluster_client
        assert isinstance(client, WaitingCluster)
        async with client.admitted():
            return await super().execute(raise_on_error, allow_redirections)


def make_client(
    url: str,
    *,
    max_connections: int,
    socket_timeout: float,
    socket_connect_timeout: float,
    pool_timeout: float = 30.0,
) -> Client:
    """The client for ``url`` (its query holds only redis-py's options by now)."""
    no_retry = Retry(NoBackoff(), 0)
    try:
        if not is_cluster(url):
            pool = WaitingPool.from_url(
                url,
                max_connections=max_connections,
                timeout=pool_timeout,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_connect_timeout,
                retry=no_retry,
            )
            # (from_pool: the client's aclose closes the pool, its connections with it)
            return aioredis.Redis.from_pool(pool)
        scheme, rest = url.split("://", 1)
        nodes = cluster_nodes(url)
        userinfo = rest.split("/", 1)[0].rpartition("@")[0]
        host, port = nodes[0]
        path_query = rest.split("/", 1)[1] if "/" in rest else ""
        single = f"{scheme.split('+', 1)[0]}://{userinfo + '@' if userinfo else ''}"
        single += f"{host}:{port}/{path_query}"
        return WaitingCluster.from_url(
            single,
            pool_timeout=pool_timeout,
            startup_nodes=[ClusterNode(h, p) for h, p in nodes[1:]],
            max_connections=max_connections,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
            retry=no_retry,
        )
    except ValueError as exc:
        # (not chained: the driver's message may quote a piece of the password)
        raise ConfigurationError(
            f"bad Redis URL {mask_url(url)!r}: {scrub(str(exc), url)}"
        ) from None


async def on_node(client: Client, key: bytes, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``commands`` in order on one connection to the master owning ``key``; the
    replies, an error in place of a failed command's reply (a lost connection raises)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[arg-type]
        if node is None:  # pragma: no cover - raises SlotNotCoveredError instead
            raise ClusterDownError(f"no node for slot {client.keyslot(key)}")
        cmds = [PipelineCommand(i, *c) for i, c in enumerate(commands)]
        if isinstance(client, WaitingCluster):
            async with client.admitted():
                await node.execute_pipeline(cmds)
        else:  # pragma: no cover - make_client builds a WaitingCluster
            await node.execute_pipeline(cmds)
        return [c.result for c in cmds]
    async with client.pipeline(transaction=False) as pipe:
        for c in commands:
            pipe.execute_command(*c)
        return list(await pipe.execute(raise_on_error=False))
