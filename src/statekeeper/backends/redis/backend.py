"""Redis backend (extra ``redis``): a full backend, or the hot tier of a tiered setup;
on one server or a Redis Cluster (``redis+cluster://``).

:class:`RedisBackend` (settings, construction) is assembled from parts of one job each
on :class:`~.engine.RedisEngine` (:mod:`.engine`: what the parts declare of each other,
for the type checker only): the store's own records and an agent's key names
(:mod:`.store`), the first contact's checks, health and close (:mod:`.connection`),
retries and errors (:mod:`.retrying`), the guarded script calls and the ``WAIT`` barrier
(:mod:`.calls`), expiry (:mod:`.ttls`), appends (:mod:`.appends`), several streams in one
script (:mod:`.together`), the other writes (:mod:`.writes`), leases (:mod:`.leases`),
idempotency keys (:mod:`.idempotency`), reads (:mod:`.reads`), the listing and counts
(:mod:`.listing`), the change feed's methods (:mod:`.feed_api`); what they share
(:mod:`.base`: the driver, the scripts). What has a job of its own lives apart too: the
key names and the plain / sharded layouts (:mod:`.keys`), the plain or cluster client
and the ``WAIT`` barrier (:mod:`.client`), URL checking (:mod:`.urls`), the event
framing (:mod:`.codec`), the change feed (:mod:`.feed`), the scripts (``lua/``).

The agent's hash (``<base>a:<agent>``, where ``<base>`` is the prefix, or the prefix and
the shard's hash tag in the sharded layout — see :mod:`.keys` for every key)::

    h = head seq, c / u = created / updated stamps, e:<seq> = event, s:<seq> = snapshot,
    k:<idempotency key> = "first:last", t = TTL override (ms), g = head tag (the
    authenticated head, set with h), i = its incarnation (first feed position)

beside it ``s:<agent>`` (zset of snapshot seqs, for "latest at or below"),
``l:<agent>`` (the lease: o = holder, n = fencing token, x = expiry), the index
``agents`` (zset of ids, ordered by id for list_agents) and the feed (:mod:`.feed`).

* Redis Cluster: every script touches the keys of one agent and of its shard (index,
  feed), which share one hash slot, and declares them all in ``KEYS``. The one
  exception, :meth:`RedisBackend.append_together` (several agents' streams in one
  script: a mutation and its audit entry), is offered on a single server only
  (``appends_together`` is false on a cluster, where the governed store writes the
  entry first). Durability: Redis
  replicates asynchronously, so a write acknowledged by the master alone can be lost
  when that master fails; ``wait_replicas=N`` makes every write wait (``WAIT``) for N
  replicas and report a shortfall as ``BackendError(maybe_applied=True)``: what
  survives a failover is what was acknowledged that way.
* Compare-and-append is ONE Lua script: check the idempotency key, check the head,
  write the events, then the head together with the key (one ``HSET``), then the
  snapshot and the index — nothing can interleave, and a script that fails part way
  never advances the head past what it wrote.
* :meth:`RedisBackend.append_batch` pipelines one script call per request (one round
  trip); each request succeeds or conflicts on its own.
* Every read is a single command or script, so it sees one consistent state.
* Optional TTL: ``ttl`` (seconds) makes an agent's keys expire after that long without
  a write or read (``touch``); :meth:`RedisBackend.set_ttl` overrides it per agent.
  The TTL is the store's (recorded in its meta hash: :mod:`.meta`): a backend opened
  without ``ttl=`` takes it, one opened with another is refused
  (:meth:`RedisBackend.change_store_ttl` changes it).
  Index entries of expired agents are dropped lazily by :meth:`list_agents` (an agent
  that cannot have expired raises :class:`~statekeeper.errors.AgentLost` instead: its
  keys were evicted or deleted, see :mod:`.identity`). An agent
  that expires is gone, as if deleted — as a hot tier that is the point; as the only
  backend, give it Redis persistence (AOF ``appendfsync always`` for RPO 0) and no TTL.
* The first use of a backend (or :meth:`RedisBackend.open`) checks that the server
  answers within ``connect_timeout``: a server that is down, refuses the login or the
  database number raises :class:`~statekeeper.errors.BackendUnavailable` with its
  reason at once. Once it has answered, a lost connection is retried (below).
* redis-py's automatic command retries are turned off: a re-sent append could be
  applied twice. Instead reads are retried until ``retry_timeout`` and an append whose
  reply was lost is settled by comparing what is stored at its seqs (as the PostgreSQL
  backend does); when that is impossible it raises
  :class:`~statekeeper.errors.BackendError` with ``maybe_applied=True``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...errors import ConfigurationError
from ..base import Capability
from ..recovery import Reconnecting
from ..redact import mask_url
from .appends import RedisAppends
from .base import SCRIPTS, RedisError, logger, lua
from .calls import RedisCalls
from .client import make_client, transient
from .connection import RedisConnection
from .feed_api import RedisFeedApi
from .idempotency import RedisIdempotency
from .identity import Identity
from .keys import Layout
from .leases import RedisLeases
from .listing import RedisListing
from .reads import RedisReads
from .retrying import RedisRetrying
from .store import RedisStore
from .together import RedisTogether
from .ttls import RedisTtls
from .urls import check_redis_url, is_cluster, split_options
from .writes import RedisWrites

__all__ = ["SCRIPTS", "RedisBackend", "check_redis_url", "lua"]


class RedisBackend(
    RedisStore,
    RedisConnection,
    RedisRetrying,
    RedisCalls,
    RedisTtls,
    RedisAppends,
    RedisTogether,
    RedisWrites,
    RedisLeases,
    RedisIdempotency,
    RedisReads,
    RedisListing,
    RedisFeedApi,
):
    """Streams and snapshots in Redis (``redis://host:6379/0?prefix=app:&ttl=3600``), or
    in a Redis Cluster (``redis+cluster://host1:7000,host2:7001/?prefix=app:``).

    Args:
        url: a redis-py URL (``redis://``, ``rediss://`` for TLS, ``unix://``), or
            ``redis+cluster://`` / ``rediss+cluster://`` with one or more seed nodes;
            its query options other than statekeeper's go to redis-py.
        prefix: prefix of every key this backend touches.
        ttl: seconds an agent lives without activity (None: the store's TTL if it
            has one, recorded by the first backend opened with ``ttl=``, else
            forever); a ``ttl`` other than the store's is refused at the first contact
            with :class:`~statekeeper.errors.ConfigurationError`.
        touch: reads refresh the TTL too (else only writes do).
        retry_timeout: seconds an operation keeps retrying after connection errors
            (0: fail at once — what a hot tier wants), once the server has answered.
            On a cluster it must cover a failover (about ``cluster-node-timeout`` plus
            the election).
        connect_timeout: seconds the first contact (connect, login, database
            selection, ``PING``) may take; a server that does not answer in time or
            refuses raises :class:`~statekeeper.errors.BackendUnavailable`.
        max_connections: connection pool size (per node on a cluster). A call
            finding them all in use waits for one (see ``pool_timeout``); on a cluster
            at most this many calls run at once, each with at most one connection
            per node.
        pool_timeout: seconds a call waits for a free connection of the pool (on a
            cluster: for one of ``max_connections`` places); then
            :class:`~statekeeper.errors.BackendError` names the limit, with nothing
            sent.
        socket_timeout: seconds before a silent server counts as lost.
        readonly: read only: reads never refresh TTLs or tidy the index, every write
            raises :class:`~statekeeper.errors.ReadOnlyStore`, and
            :meth:`ensure_store` raises :class:`~statekeeper.errors.NotAStore` for a
            prefix holding neither statekeeper's marker (``<prefix>meta``, written by
            :meth:`initialize`) nor its agent index.
        feed: keep the change feed (``Capability.FEED``, see :mod:`.feed`): one
            stream entry per event, trimmed by ``trim_feed``. ``False`` (URL
            ``feed=0``) for a hot tier or a cache, which nobody follows.
        shards: the sharded key layout with this many shards (see :mod:`.keys`).
            A cluster always uses it (default 16); a single server uses the plain
            layout unless given ``shards``. With more than one shard the feed is
            per shard (:meth:`read_shard_feed`) and the store-wide ``FEED``
            capability is not offered (see ``docs/scale.md``).
        wait_replicas: after every write, ``WAIT`` until this many replicas of the
            master acknowledged it (0: do not wait). Redis replication is
            asynchronous: only a write acknowledged this way survives the failover
            of its master. A write the replicas did not acknowledge within
            ``wait_timeout`` raises :class:`~statekeeper.errors.BackendError` with
            ``maybe_applied=True``.
        wait_timeout: seconds ``WAIT`` may block (default 2).
        evictable: the data is a copy that may be lost (a tiered backend's hot tier
            sets it): a server that evicts any key when full (``maxmemory`` with an
            ``allkeys-*`` policy) is accepted. Otherwise it is refused at the first
            contact with :class:`~statekeeper.errors.ConfigurationError`: its
            evictions would lose acknowledged agents without an error (see
            :mod:`.eviction`).
    """

    name = "redis"
    supports_leases = True
    capabilities = frozenset(
        {
            Capability.LEASES,
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.TTL,
            Capability.DROP_ALL,
            Capability.PRUNE,
            Capability.BASE_IMPORT,
            Capability.KEY_RENAME,
        }
    )
    #: the head tag is compared inside the append script (no read before a write)
    compares_head_tag = True
    #: default number of shards on a cluster
    CLUSTER_SHARDS = 16

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "statekeeper:",
        ttl: float | None = None,
        touch: bool = True,
        retry_timeout: float = 10.0,
        max_connections: int = 32,
        pool_timeout: float = 30.0,
        socket_timeout: float = 5.0,
        socket_connect_timeout: float = 2.0,
        connect_timeout: float = 5.0,
        readonly: bool = False,
        feed: bool = True,
        shards: int | None = None,
        wait_replicas: int = 0,
        wait_timeout: float = 2.0,
        evictable: bool = False,
    ) -> None:
        if ttl is not None and ttl <= 0:
            raise ConfigurationError("ttl must be > 0 seconds (or None for no expiry)")
        if not connect_timeout > 0:
            raise ConfigurationError("connect_timeout must be > 0 seconds")
        if not pool_timeout > 0:
            raise ConfigurationError("pool_timeout must be > 0 seconds")
        check_redis_url(url)
        self.cluster = is_cluster(url)
        if shards is None and self.cluster:
            shards = self.CLUSTER_SHARDS
        if shards is not None and not 1 <= shards <= 4096:
            raise ConfigurationError(f"shards must be between 1 and 4096, not {shards!r}")
        if shards is not None and ("{" in prefix or "}" in prefix):
            raise ConfigurationError(
                f"a sharded Redis prefix cannot contain '{{' or '}}' (hash tags): {prefix!r}"
            )
        if wait_replicas < 0 or not wait_timeout > 0:
            raise ConfigurationError("wait_replicas must be >= 0 and wait_timeout > 0 seconds")
        if wait_replicas > 0 and not wait_timeout < socket_timeout:
            # A WAIT still pending when the socket gives up reads as a lost reply: the
            # write is then read back from the master and acknowledged as if replicated
            # (a lease grant handed out that no replica holds: h/fencefail's finding).
            raise ConfigurationError(
                f"wait_timeout ({wait_timeout:g} s) must be below socket_timeout "
                f"({socket_timeout:g} s) with wait_replicas: a WAIT still pending when the "
                "socket gives up would be taken for a lost reply and the write acknowledged "
                "unreplicated; raise socket_timeout or lower wait_timeout"
            )
        self.url = url
        self.connect_timeout = connect_timeout
        self._reached = False
        self.prefix = prefix
        self.ttl = ttl
        self.touch = touch
        self.readonly = readonly
        self.retry_timeout = retry_timeout
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout
        self.evictable = evictable
        #: warned (or nothing to warn about) that grants go unreplicated (.lease_replicas)
        self._tokens_checked = wait_replicas > 0
        #: a tiered backend's durable or cold tier (:meth:`keep_agents`)
        self._tier_of_record = False
        self._pfx = prefix.encode()
        self.layout = Layout(self._pfx, shards)
        self._identity = Identity(self.layout, f"Redis at {mask_url(url)} (prefix {prefix!r})")
        #: a connection was lost: the next try re-checks the eviction policy first
        self._recheck_eviction = False
        #: an agent was given a ttl of its own (set_ttl): the store's agents expire
        self._own_ttls = False
        #: the server's (proto-max-bulk-len, client-query-buffer-limit), read at the
        #: first write that may exceed them (see .limits)
        self._limits: tuple[int, int] | None = None
        self.feed = feed
        self._block_limit = max(0.05, socket_timeout / 2)  # a blocking XREAD within it
        if feed and len(self.layout.shard_keys) == 1:
            self.capabilities = type(self).capabilities | {Capability.FEED}
        self._ttl_ms = str(round(ttl * 1000)) if ttl else "0"
        self._touch = "1" if touch and ttl and not readonly else "0"
        self._client = make_client(
            url,
            max_connections=max_connections,
            pool_timeout=pool_timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(socket_connect_timeout, connect_timeout),
        )
        register = self._client.register_script
        self._append_script = register(lua("append"))
        self._read_script = register(lua("read"))
        self._seq_at_script = register(lua("seq_at"))
        self._latest_script = register(lua("latest"))
        self._read_latest_script = register(lua("read_latest"))
        self._save_snapshot_script = register(lua("save_snapshot"))
        self._delete_script = register(lua("delete"))
        self._ttl_script = register(lua("set_ttl"))
        self._hold_script = register(lua("hold_sync"))
        self._rewrite_script = register(lua("rewrite"))
        self._prune_script = register(lua("prune"))
        self._replace_snapshot_script = register(lua("replace_snapshot"))
        self._from_base_script = register(lua("from_base"))
        self._together_script = register(lua("together"))
        self._trim_feed_script = register(lua("trim_feed"))
        self._rename_keys_script = register(lua("rename_keys"))
        # one script writes every stream of append_together: a cluster keeps different
        # agents in different hash slots, which one script cannot touch
        self.appends_together = not self.cluster
        #: leases and rewrites commit with their audit entries there too (together.lua)
        self.changes_leases_and_rewrites = not self.cluster
        self.guards_from_base = not self.cluster  # (from_base.lua: the guard's keys)
        self.guards_renames = not self.cluster  # (rename_keys.lua: the guard's keys)
        self.prunes_together_at_head = not self.cluster  # (together.lua: prune_head)
        self.checks_absence_together = not self.cluster  # (together.lua: 'a')
        self.changes_alone_together = not self.cluster  # (together.lua: no append)
        # a settle's row and its removal in one script at the head (one agent's keys,
        # one hash slot: on a cluster too)
        self.replaces_snapshots = True
        self._acquire_script = register(lua("lease_acquire"))
        self._renew_script = register(lua("lease_renew"))
        self._release_script = register(lua("lease_release"))
        self._carry_script = register(lua("lease_carry"))
        self._closed = False
        #: the event loop the client's connections belong to (see _check_loop)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reconnect = Reconnecting(
            engine="redis",
            timeout=lambda: self.retry_timeout,
            errors=(RedisError,),
            transient=transient,
            reason=self._reason,
            reject=self._reject,
            is_closed=lambda: self._closed,
            check_open=self._check_open,
            logger=logger,
            prepare=self._prepare,
            before_retry=self._after_failure,
        )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> RedisBackend:
        """Build from a URL; statekeeper's options (``prefix``, ``ttl``,
        ``retry_timeout``, ``max_connections``, ``pool_timeout``, ``connect_timeout``,
        ``socket_timeout``, ``feed``, ``shards``, ``wait_replicas``, ``wait_timeout``) are
        read from its query
        string, the rest goes to redis-py."""
        clean, kwargs = split_options(url)
        kwargs.update(overrides)
        return cls(clean, **kwargs)

    def __repr__(self) -> str:
        return f"RedisBackend({mask_url(self.url)!r}, prefix={self.prefix!r})"
