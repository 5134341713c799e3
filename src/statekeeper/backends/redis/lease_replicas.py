"""Fencing tokens on a Redis master with replicas, without ``wait_replicas``.

Redis replicates asynchronously: a lease grant the master acknowledged before any
replica had it is lost when that master fails and a replica is promoted, and the
promoted master's next grant of the agent hands the same token out again (checked on a
private master and replica: ``tests/backends/test_redis_lease_replicas.py``).
PostgreSQL puts the WAL timeline, which a promotion raises, in each token; Redis has
nothing of the kind a grant's script could read — ``INFO replication`` gives a random
replication id and an offset that the promoted replica continues from *its* position,
below the lost grant's (a Redis Cluster's config epoch is not read by the scripts, and
a standalone or Sentinel-managed server has none). The only protection is
``wait_replicas``: the grant is acknowledged once a replica holds it.

So the backend warns (:class:`~statekeeper.errors.UnreplicatedLeaseTokens`, once, at
its first grant) when it grants leases on a master with replicas without waiting for
them. The check is one ``INFO replication`` (every master of a cluster); a server that
refuses ``INFO`` (ACL, renamed) is not warned about.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ...errors import UnreplicatedLeaseTokens
from ..redact import mask_url
from .client import Client

__all__ = ["replicas_of", "warn_unreplicated_tokens"]

logger = logging.getLogger("statekeeper.backends.redis")


async def replicas_of(client: Client) -> int:
    """The most replicas connected to a master of the store (``INFO replication``:
    ``connected_slaves``); raises the driver's error when ``INFO`` fails."""
    if isinstance(client, RedisCluster):
        reply: Any = await client.info("replication", target_nodes=RedisCluster.PRIMARIES)
    else:
        reply = await client.info("replication")
    servers = [reply] if isinstance(reply, dict) and "role" in reply else []
    if not servers and isinstance(reply, dict):
        servers = [v for v in reply.values() if isinstance(v, dict)]
    return max((int(s.get("connected_slaves", 0) or 0) for s in servers), default=0)


async def warn_unreplicated_tokens(client: Client, url: str) -> None:
    """Warn when leases are granted on a master with replicas (see the module)."""
    try:
        replicas = await replicas_of(client)
    except (RedisError, OSError) as exc:  # INFO denied or renamed: nothing to check with
        logger.debug("cannot read the replicas of %s: %s", mask_url(url), exc)
        return
    if replicas > 0:
        warning = UnreplicatedLeaseTokens(mask_url(url), replicas)
        logger.warning("%s", warning)
        warnings.warn(warning, stacklevel=4)
