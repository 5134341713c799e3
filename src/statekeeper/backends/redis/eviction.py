"""A Redis server that evicts any key when it is full cannot hold a store of record.

Under ``maxmemory`` with an ``allkeys-*`` policy (``allkeys-lru``, ``allkeys-lfu``,
``allkeys-random``) Redis deletes keys of its choosing to make room: an agent's hash
(its events and head), the agent index, the feed's counter. Nothing reports it —
agents acknowledged as written are simply gone (``get`` answers None, ``store.agent``
starts them afresh), ``count_agents`` and every listing (export, backup, retention)
leave them out. A ``volatile-*`` policy only evicts keys with an expiry; a store whose
agents carry one (its ``ttl``) is refused on it too: the agent evicted a minute after
its last save, with a day of its ttl left, was taken for expired (``AgentNotFound``, a
next save starting it afresh at seq 1), no error anywhere. So is a store without a ttl
whose agents were given one of their own (``set_ttl``, which marks each in the agent
index: :func:`own_ttls_stored`, looked for when a backend opens the store).
``noeviction`` refuses the write with an error.

:func:`check_eviction` is run at a backend's first contact with the server, and
again before the first try after a lost connection (a server restarted or failed over
may come back with another policy): such a server is refused with
:class:`~statekeeper.errors.ConfigurationError`, unless the backend holds copies only
(``evictable=True``: a tiered backend's hot tier, whose missing agents are read from
the durable tier). A policy changed at run time (``CONFIG SET``) on a server that
stays up is not polled (it costs an ``INFO`` round trip, and evicts nothing until the
server is full); what such an eviction takes is found (:mod:`.identity`): the store's
identity marker or an agent index raises :class:`~statekeeper.errors.StoreLost`, one
agent's keys :class:`~statekeeper.errors.AgentLost`, which then read the policy again
and name it as the likely cause; and the backend's ``health()`` reports such a server
as not ok.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from ...errors import ConfigurationError
from ..redact import mask_url
from .client import Client
from .keys import Layout

#: an agent's own-ttl mark in its shard's index: ``OWN_TTL + agent id`` (set_ttl.lua)
OWN_TTL = b"\0t:"

__all__ = ["check_eviction", "evicting_policy", "own_ttls_stored"]

logger = logging.getLogger("statekeeper.backends.redis")


def _servers(reply: Any) -> list[dict[str, Any]]:
    """``INFO memory`` of one server, or of each node of a cluster (keyed by node)."""
    if isinstance(reply, dict) and "maxmemory_policy" in reply:
        return [reply]
    if isinstance(reply, dict):
        return [v for v in reply.values() if isinstance(v, dict)]
    return []


async def evicting_policy(client: Client, expiring: bool = False) -> str | None:
    """``"maxmemory-policy P, maxmemory N bytes"`` of the first server (master of a
    cluster) that may evict keys without an expiry — or, when ``expiring`` (a store
    whose agents carry an expiry: its ``ttl``), keys with one (a ``volatile-*``
    policy) — else None. Raises the driver's error when ``INFO`` fails
    (``ResponseError``: renamed or denied)."""
    evicting = ("allkeys-", "volatile-") if expiring else ("allkeys-",)
    if isinstance(client, RedisCluster):
        reply = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
    else:
        reply = await client.info("memory")
    for info in _servers(reply):
        policy = str(info.get("maxmemory_policy", ""))
        limit = int(info.get("maxmemory", 0) or 0)
        if limit > 0 and policy.startswith(evicting):
            return f"maxmemory-policy {policy}, maxmemory {limit} bytes"
    return None


async def own_ttls_stored(client: Client, layout: Layout) -> bool:
    """Whether an agent of the store was given a ttl of its own (``set_ttl``: its mark
    ``"\\0t:<agent>"`` in its shard's agent index; one shard's index at a time, a
    prefix range read of one entry). A mark left by an agent that expired counts too
    until a read of that agent takes it off."""
    async with client.pipeline(transaction=False) as pipe:
        for shard in layout.shard_keys:
            pipe.zrangebylex(shard.index, b"[" + OWN_TTL, b"(" + OWN_TTL[:-1] + b";", 0, 1)
        found = await pipe.execute()
    return any(found)


async def check_eviction(client: Client, url: str, expiring: bool = False) -> None:
    """Refuse a server (every master of a cluster) that may evict keys without an
    expiry, or with ``expiring`` any of the store's agents (see the module
    documentation)."""
    try:
        policy = await evicting_policy(client, expiring)
    except ResponseError as exc:  # INFO renamed or denied (ACL): nothing to check with
        logger.warning("cannot read the eviction policy of %s: %s", mask_url(url), exc)
        return
    if policy is not None and not policy.startswith("maxmemory-policy allkeys-"):
        raise ConfigurationError(
            f"Redis at {mask_url(url)} evicts keys with an expiry when full ({policy}), "
            "and this store's agents carry one (its ttl, or their own: set_ttl): an agent "
            "would disappear long before its ttl, taken for expired without an error. Set "
            "maxmemory-policy noeviction; a cache whose agents may be lost opens it with "
            "?evictable=1"
        )
    if policy is not None:
        raise ConfigurationError(
            f"Redis at {mask_url(url)} evicts any key when full ({policy}): agents "
            "acknowledged as written would disappear without an error. Set "
            "maxmemory-policy noeviction (or a volatile-* policy); a cache whose agents "
            "may be lost opens it with ?evictable=1"
        )
