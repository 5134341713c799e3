"""Redis backend (extra ``redis``): a full backend, or the hot tier of a tiered setup;
on one server or a Redis Cluster (``redis+cluster://``).

Over 600 lines because it is one class implementing the whole Backend contract (~45
methods, each a thin wrapper around one script or command with its retry or settle
logic). What has a job of its own lives apart: the key names and the plain / sharded
layouts (:mod:`.keys`), the plain or cluster client and the ``WAIT`` barrier
(:mod:`.client`), URL checking (:mod:`.urls`), the event framing (:mod:`.codec`), the
change feed (:mod:`.feed`), the scripts (``lua/``).

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
import functools
import logging
import re
import secrets
from asyncio import current_task
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from ...arguments import INTERNAL_PREFIX
from ...errors import (
    AgentLost,
    BackendError,
    BackendRejected,
    BackendUnavailable,
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    FeedLost,
    IntegrityError,
    LeaseHeld,
    LeaseLost,
    NotAStore,
    ReadOnlyStore,
    StateTooLarge,
    StoreClosed,
    StoreLost,
)
from ...records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    FeedRecord,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from ..base import (
    Backend,
    Capability,
    Health,
    KeptKeys,
    append_outcome,
    check_fence,
    check_prune,
    prefix_end,
    validate_batch,
    validate_from_base,
    validate_from_base_guard,
    validate_rename_guard,
    validate_request,
    validate_rewrite,
    validate_together,
    validate_ttl,
)
from ..framing import pack_snapshot, unpack_snapshot
from ..pruned_snapshots import unstored_record
from ..recovery import Reconnecting
from ..redact import mask_url, one_line, scrub
from ..scripts import read_script

try:
    from redis.commands.core import AsyncScript
    from redis.exceptions import ReadOnlyError, RedisClusterException, RedisError, ResponseError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise BackendUnavailable(
        "the Redis backend needs redis-py: pip install 'statekeeper[redis]'"
    ) from exc

from . import feed, meta
from .client import WaitingCluster, make_client, on_node, transient
from .codec import pack_event, unpack_event
from .eviction import check_eviction, evicting_policy, own_ttls_stored
from .identity import PROOF, Identity
from .keys import AgentKeys, Layout, ShardKeys, shard_tag
from .lease_replicas import warn_unreplicated_tokens
from .limits import SURELY_TAKEN, oversize, read_limits, request_size
from .nesting import check_nesting
from .orphans import orphaned_events
from .permissions import check_permissions
from .urls import check_redis_url, is_cluster, split_options

__all__ = ["SCRIPTS", "RedisBackend", "check_redis_url", "lua"]

logger = logging.getLogger("statekeeper.backends.redis")

T = TypeVar("T")

_HMGET_CHUNK = 1000

_PACKAGE = "statekeeper.backends.redis"
#: KEYS: meta. ARGV: shards. Records the number of shards unless one is recorded.
_CLAIM_LAYOUT = (
    "local cur = redis.call('HGET', KEYS[1], 'shards') "
    "if cur then return cur end "
    "redis.call('HSET', KEYS[1], 'shards', ARGV[1]) return ARGV[1]"
)
#: KEYS: hash, index. ARGV: agent, its own-ttl mark. Reply: {the hash holds a head 1|0,
#: the index's scores of its proof entry, of the agent, of the mark (or nil)}
_PROBE = (
    "return {redis.call('HEXISTS', KEYS[1], 'h'), redis.call('ZSCORE', KEYS[2], '\\0'), "
    "redis.call('ZSCORE', KEYS[2], ARGV[1]), redis.call('ZSCORE', KEYS[2], ARGV[2])}"
)
_INCLUDE = re.compile(r"^-- include: (\S+)$", re.MULTILINE)


def _holder(raw: Any) -> str | None:
    """A lease holder as a script replies it (empty: none)."""
    return bytes(raw).decode() or None


def _rewrite_fields(request: RewriteRequest) -> list[bytes | str]:
    """A rewrite as rewrite_write.lua takes it (rewrite.lua, together.lua)."""
    fields: list[bytes | str] = [
        str(request.expected_seq),
        "1" if request.expected_tag is not None else "0",
        request.expected_tag or b"",
        "1" if request.head_tag is not None else "0",
        request.head_tag or b"",
        str(len(request.events)),
        str(len(request.snapshots)),
    ]
    for e in request.events:
        fields += [str(e.seq), e.checksum, e.payload]
    for snap in request.snapshots:
        fields += [str(snap.seq), pack_snapshot(snap)]
    return fields


@functools.cache
def lua(name: str) -> str:
    """The Lua script ``lua/<name>.lua``, its ``-- include: <file>`` lines replaced by
    the shared helpers they name (``common.lua``: TTLs and formatting; ``now.lua``: the
    server's clock). Built once per process: every backend built made its ~220 KB of
    script text again (the includes repeat the helpers in each script), freed at its
    close but kept by the C allocator — a process opening and closing stores grew by
    ~6 MB of RSS that way, against ~1.5 MB once cached (2,000 cycles)."""
    return _INCLUDE.sub(
        lambda m: read_script(_PACKAGE, f"lua/{m.group(1)}").strip("\n"),
        read_script(_PACKAGE, f"lua/{name}.lua"),
    )


#: every script the backend runs, by name (``lua/<name>.lua``)
SCRIPTS = (
    "append",
    "read",
    "seq_at",
    "latest",
    "read_latest",
    "save_snapshot",
    "delete",
    "lease_acquire",
    "lease_renew",
    "lease_release",
    "lease_carry",
    "rewrite",
    "set_ttl",
    "hold_sync",
    "prune",
    "from_base",
    "together",
    "trim_feed",
    "rename_keys",
)


def _part_way(exc: BaseException) -> bool:
    """Whether ``exc`` is a script's error at one of its commands (``redis.call``),
    after which what the script wrote before stays: Redis 7 adds ``script: <sha>, on
    @user_script:<line>``, Redis 6 ``Error running script``. A script's own refusal
    (``redis.error_reply``, before any write) carries neither."""
    text = str(exc)
    return "@user_script:" in text or "Error running script" in text


class RedisBackend(Backend):
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

    # -- keys (all names come from .keys.Layout) -------------------------------------

    def _agent(self, agent_id: str) -> AgentKeys:
        return self.layout.agent(agent_id)

    def _ttl_of(self, agent_id: str) -> str:
        """The default TTL argument of the scripts for ``agent_id``: ``ttl`` in ms ("0":
        none), or "-1" for the store's own streams (the audit log): the scripts take
        any expiry off those (PERSIST), so a ``ttl=`` store never expires its audit
        log, and one an older version left with an expiry keeps it no longer than its
        next write or read."""
        if agent_id[:1] == "\x01" and agent_id.startswith(INTERNAL_PREFIX):
            return "-1"
        return self._ttl_ms

    def _keys(self, agent_id: str) -> tuple[bytes, bytes]:
        k = self.layout.agent(agent_id)
        return k.hash, k.snapshots

    def _lease_key(self, agent_id: str) -> bytes:
        return self.layout.agent(agent_id).lease

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyStore(f"redis prefix {self.prefix!r} is open read-only")

    async def ensure_store(self) -> None:
        async def op() -> int:
            keys = [self.layout.meta, *(s.index for s in self.layout.shard_keys)]
            found = 0
            for key in keys:  # one key per call: they live in different slots
                found += int(await self._client.exists(key))
                if found:
                    break
            return found

        if await self._retrying("ensure_store", op) == 0:
            raise NotAStore(
                f"redis prefix {self.prefix!r}",
                "it holds no statekeeper data; run `statekeeper init URL` to create one",
            )

    async def initialize(self) -> None:
        self._check_writable()

        async def op() -> Any:
            return await self._client.hsetnx(self.layout.meta, b"created_by", b"statekeeper")

        await self._retrying("initialize", op)
        await self.feed_id()  # so that a store only ever read has one too

    async def feed_id(self) -> str | None:
        """The feed's id in the meta hash (:func:`.meta.feed_id`), made by the first
        call; a read-only backend makes none (None: its cursors are not checked)."""
        self._check_open()
        fresh = None if self.readonly else secrets.token_hex(8).encode()

        async def op() -> Any:
            return await meta.feed_id(self._client, self.layout, fresh, False)

        return meta.as_text(await self._retrying("feed_id", op))

    async def renew_feed_id(self) -> str | None:
        self._check_open()
        self._check_writable()
        fresh = secrets.token_hex(8).encode()

        async def op() -> Any:
            return await meta.feed_id(self._client, self.layout, fresh, True)

        return meta.as_text(await self._retrying("renew_feed_id", op))

    async def expired_own_ttl(self, agent_id: str) -> bool:
        """Whether ``agent_id`` carries the mark of a TTL of its own (``set_ttl``) in its
        shard's index: gone, it expired (an append that makes it again takes the mark
        off). The witness takes such an agent for expired (:mod:`...security.expiry`)."""
        self._check_open()
        if not self._reached:
            await self.open()
        index = self.layout.agent(agent_id).shard.index
        mark = PROOF + b"t:" + agent_id.encode()

        async def op() -> Any:
            return await self._client.zscore(index, mark)

        return await self._retrying("expired_own_ttl", op) is not None

    async def read_marker(self, name: str) -> bool | None:
        """Whether the store-level marker ``name`` is set, in the meta hash or its copy
        in shard 0's index (see :mod:`.meta`: either lost alone is harmless). With
        neither, an index that lost its proof entry raises
        :class:`~statekeeper.errors.StoreLost` (the copy it held may be lost too)."""
        self._check_open()

        async def op() -> Any:
            there, whole = await meta.read_marker(self._client, self.layout, name)
            if not there and not whole:
                self._identity.missing(self.layout.shard_keys[0], "", None, None, None, ttl=True)
            return there

        return bool(await self._retrying("read_marker", op))

    async def set_marker(self, name: str) -> None:
        self._check_open()
        self._check_writable()

        async def op() -> Any:
            await meta.set_marker(self._client, self.layout, name)

        await self._retrying("set_marker", op)

    async def _check_layout(self) -> None:
        """Refuse to open a store recorded with another layout (see :mod:`.keys`); a
        sharded store records its number of shards on first use. A prefix whose meta
        hash records no shards may hold a sharded store that lost it (see :mod:`.meta`):
        one is looked for first."""
        meta_key = self.layout.meta
        want = self.layout.shards
        unrecorded = not self.cluster and await self._client.hget(meta_key, b"shards") is None
        if unrecorded:
            await self._check_sharded_here(want)
        if want is not None and not self.cluster:
            # a plain server may hold a store in the plain layout: never hide it
            plain = unrecorded and await self._client.exists(self._pfx + b"agents")
            if plain:
                raise ConfigurationError(
                    f"redis prefix {self.prefix!r} holds a store in the plain key layout; "
                    "open it without shards= (statekeeper export | statekeeper import "
                    "moves it to a sharded one)"
                )
        if want is not None and not self.readonly:
            got = await self._client.eval(_CLAIM_LAYOUT, 1, meta_key, str(want))
        else:
            got = await self._client.hget(meta_key, b"shards")
        self._compare_layout(got)

    def _compare_layout(self, got: Any) -> None:
        """:class:`ConfigurationError` unless ``got`` (the meta hash's ``shards``
        field) is the layout this backend was built with (or not recorded yet)."""
        want = self.layout.shards
        recorded = int(got) if got else None
        if recorded is not None and want is None:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store in the sharded key layout; "
                f"open it with ?shards={recorded}"
            )
        if recorded is not None and recorded != want:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} was created with shards={recorded}, not "
                f"{want}: an agent's shard depends on it, so it cannot change"
            )

    async def _check_sharded_here(self, want: int | None) -> None:
        """Refuse to open, in another layout, a sharded store whose meta hash lost its
        number of shards (its shard 0 found where a sharded store keeps it; its number
        from the copy in its index, see :mod:`.meta`)."""
        mine = shard_tag(0, want) if want is not None else None
        for tag, n in (await meta.sharded_here(self._client, self.layout)).items():
            if want is not None and (n == want or (n is None and tag == mine)):
                continue
            how = f"?shards={n}" if n is not None else "the shards= it was created with"
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store in the sharded key layout "
                f"whose record of it ({self.layout.meta.decode(errors='replace')!r}) is gone "
                f"(evicted or deleted): open it with {how}"
            )

    async def _refresh_topology(self) -> None:
        """After a failed try on a cluster: re-read which master owns which slots (a
        failover moved them), so the retry goes to the new master."""
        if isinstance(self._client, WaitingCluster):
            try:
                async with self._client.admitted():  # (it takes a node's connection)
                    await self._client.nodes_manager.initialize()
            except (RedisError, OSError, BackendError) as exc:  # the retry reports it
                logger.debug("redis cluster topology refresh failed: %s", self._reason(exc))

    # -- writes, with the replication barrier --------------------------------------

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

    # -- plumbing --------------------------------------------------------------------

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

    def __repr__(self) -> str:
        return f"RedisBackend({mask_url(self.url)!r}, prefix={self.prefix!r})"

    async def open(self) -> None:
        """Check that the server answers (see ``connect_timeout``); idempotent.

        Raises :class:`~statekeeper.errors.BackendUnavailable` with the server's
        reason when it cannot be reached or refuses the connection.
        """
        self._check_open()
        if self._reached:
            return
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._client.ping()
        except TimeoutError:
            reason = f"no answer within {self.connect_timeout:g}s (connect_timeout)"
        except (RedisError, RedisClusterException, OSError) as exc:  # no node answered
            reason = one_line(scrub(str(exc), self.url)) or type(exc).__name__
        else:
            try:
                if not self.readonly:  # (before the layout's claim creates the meta hash)
                    await check_nesting(self._client, self.layout)
                await self._check_layout()
                if not self.readonly:  # (before the first write: see .permissions)
                    await check_permissions(self._client, self.layout, self.feed, self.url)
                if not self.evictable:
                    await check_eviction(self._client, self.url, self.ttl is not None)
                    await self._adopt()
                    if self.ttl is not None:  # (the store's, taken by _adopt: .eviction)
                        await check_eviction(self._client, self.url, True)
                    elif await own_ttls_stored(self._client, self.layout):  # (set_ttl's)
                        self._own_ttls = True
                        await check_eviction(self._client, self.url, True)
                if not (self.readonly or self.feed or self.evictable):  # (a copy: no feed)
                    await self._check_no_feed()
                if self.evictable and not self.readonly:
                    await self._check_not_of_record()
            except ReadOnlyError as exc:  # (a replica: its first write, the markers)
                raise BackendRejected(
                    f"cannot open the store at {mask_url(self.url)} (prefix {self.prefix!r}) "
                    "for writing: the server is a read-only replica; connect to its "
                    "master, or open the store read-only"
                ) from exc
            except ResponseError as exc:  # (a refusal: the driver's error is not ours)
                raise self._reject(f"redis cannot open prefix {self.prefix!r}", exc) from exc
            self._reached = True
            return
        # never echo the password: the message names the server by its masked URL
        raise BackendUnavailable(f"cannot connect to Redis at {mask_url(self.url)}: {reason}")

    async def _adopt(self) -> None:
        """Adopt the store's identity markers (see :mod:`.identity`). With
        ``wait_replicas``, the markers this backend created are waited for as a write
        is (best effort: a shortfall is not an error here, and any acknowledged write
        after them covers them too), so a failover to a replica does not pass for a
        lost store."""
        await self._settle_ttl()
        created = await self._identity.adopt(self._client, create=not self.readonly, feed=self.feed)
        if not self.readonly:
            await meta.copy_meta(self._client, self.layout)  # (see .meta)
        if self.wait_replicas and created:
            ms = max(1, round(self.wait_timeout * 1000))
            await asyncio.gather(
                *(
                    on_node(
                        self._client,
                        k.sync,
                        [("INCRBY", k.sync, 0), ("WAIT", self.wait_replicas, ms)],
                    )
                    for k in created
                )
            )

    async def _check_not_of_record(self) -> None:
        """A backend of copies (``evictable``: a hot tier, a cache) is refused on a
        prefix that holds a store of record (its identity marker, which only a backend
        of record creates): it checks no marker and no presence, and its writes went
        over the store's agents (a tiered store's hot tier at the default prefix
        replaced a Redis store's agent at seq 5 by its own at seq 2)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for keys in self.layout.shard_keys:
                pipe.exists(keys.epoch)
            found = await pipe.execute()
        if any(int(n) for n in found):
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} holds a store of record; a hot tier or an "
                "evictable cache keeps copies and would write over its agents: give it a "
                "prefix of its own (?prefix=...)"
            )

    async def _check_no_feed(self) -> None:
        """A writer without the feed (``feed=False``) is refused on a store that keeps
        one: its events would be missing from the feed, its followers none the wiser."""
        if await feed.keeps_feed(self._client, self.layout):
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} keeps a change feed, and a backend opened "
                "with feed=0 would leave its writes out of it (the feed's followers would "
                "miss them without an error): open it without feed=0"
            )

    async def _settle_ttl(self) -> None:
        """Take the store's TTL (see :mod:`.meta`): a backend opened without ``ttl=``
        uses the one recorded, so an agent that expires by it is not reported lost and
        a write gives the agent that TTL; one opened with ``ttl=`` records it when none
        is (a writable backend), and is refused when another one is: every process of
        the store expires its agents after the same time
        (:meth:`change_store_ttl` changes it)."""
        ms = int(self._ttl_ms) or None
        recorded = await meta.settle_ttl(self._client, self.layout, ms, write=not self.readonly)
        if recorded is not None and self._tier_of_record:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} is a store whose agents expire "
                f"(ttl={recorded / 1000:g}, recorded in the store); a tier of record must "
                "keep them (set the TTL on the hot tier only)"
            )
        if recorded is not None and ms is not None and recorded != ms:
            raise ConfigurationError(
                f"redis prefix {self.prefix!r} was created with ttl={recorded / 1000:g} "
                f"(seconds its agents live without activity), not ttl={ms / 1000:g}: open it "
                f"without ttl= (it takes the store's) or with ttl={recorded / 1000:g}; "
                "RedisBackend.change_store_ttl(seconds) changes it"
            )
        if recorded is not None and ms is None:
            self._use_ttl(recorded / 1000)

    def keep_agents(self) -> None:
        """This backend is a tier of record (a tiered backend's durable or cold tier,
        which calls this): a store whose agents expire (a TTL recorded in it) is refused
        when the backend opens it, as ``ttl=`` is when it is built."""
        self._tier_of_record = True

    def _use_ttl(self, ttl: float) -> None:
        self.ttl = ttl
        self._ttl_ms = str(round(ttl * 1000))
        self._touch = "1" if self.touch and not self.readonly else "0"

    async def change_store_ttl(self, ttl: float) -> None:
        """Record ``ttl`` (seconds, > 0) as the store's TTL, and use it. An agent
        keeps the expiry it was given until its next write (or read, with ``touch``);
        other processes that opened the store before go on with the old TTL until
        they open it again. A store's TTL cannot be taken off (its agents already
        given an expiry would then be reported lost when they expire)."""
        if not ttl > 0:
            raise ConfigurationError("ttl must be > 0 seconds")
        self._check_open()
        self._check_writable()
        if self.evictable:
            self._use_ttl(ttl)  # (a copy: nothing recorded, see _adopt)
            return
        if not self._reached:
            await self.open()
        await self._check_expiring()  # (its agents will carry an expiry: .eviction)
        ms = round(ttl * 1000)

        async def op() -> None:
            await meta.set_ttl(self._client, self.layout, ms)

        await self._retrying("change_store_ttl", op)
        self._use_ttl(ttl)

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

    @property
    def _expiring(self) -> bool:
        """Whether this store's agents carry an expiry (its ttl, or one's own)."""
        return self.ttl is not None or self._own_ttls

    async def _check_expiring(self) -> None:
        """Before agents of a store without a ttl are given an expiry (``set_ttl``,
        ``change_store_ttl``): a server that evicts keys with one (``volatile-*``) is
        refused, as it is at open for a ttl store (see :mod:`.eviction`)."""
        if self._expiring:
            return  # (checked at open, and again on a reconnect)
        await self._retrying("check eviction", lambda: check_eviction(self._client, self.url, True))
        self._own_ttls = True

    # -- appends ---------------------------------------------------------------------

    def _append_call(self, request: AppendRequest) -> tuple[list[bytes], list[Any]]:
        h, sz = self._keys(request.agent_id)
        events = request.events
        snap = request.snapshot
        args: list[Any] = [
            request.agent_id.encode(),
            str(request.expected_seq),
            request.idempotency_key.encode() if request.idempotency_key is not None else b"",
            self._ttl_of(request.agent_id),
            repr(events[0].timestamp),
            repr(events[-1].timestamp),
            str(snap.seq) if snap is not None else "0",
            pack_snapshot(snap) if snap is not None else b"",
            request.head_tag if request.head_tag is not None else b"",
            request.fence[0].encode() if request.fence is not None else b"",
            str(request.fence[1]) if request.fence is not None else "0",
            # the tag compare: an empty tag is stored as none (see the script)
            ("1" if request.expected_tag else "0") if request.check_tag else "",
            request.expected_tag or b"",
        ]
        args.extend(pack_event(e) for e in events)
        k = self._agent(request.agent_id)
        keys = [h, sz, k.shard.index, k.lease]
        if self.feed:
            keys += [k.shard.feed_counter, k.shard.feed_stream]
        return keys, args

    @staticmethod
    def _result(request: AppendRequest, reply: Any) -> AppendResult:
        return append_outcome(request, reply, _holder)

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        if not self._reached:
            await self.open()
        keys, args = self._append_call(request)
        task = current_task()  # a lost cancel: see .client
        asked = task.cancelling() if task is not None else 0
        try:
            reply = await self._write(request.agent_id, self._append_script, keys, args)
        except RedisError as exc:
            try:
                return await self._recover(request, exc)
            except StoreLost as lost:  # with its likely cause, as _retrying gives it
                raise await self._explained(lost) from lost.__cause__
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        return self._result(request, reply)

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        out, valid = validate_batch(requests)
        task = current_task()  # a lost cancel (see .client): the pipeline's send too
        asked = task.cancelling() if task is not None else 0
        if valid and not self._reached:
            await self.open()
        if valid and self.wait_replicas:
            # each append waits for its own replicas: agents concurrently (one connection
            # each), one agent's appends one after another in the batch's order
            by_agent: dict[str, list[tuple[int, AppendRequest]]] = {}
            for i, request in valid:
                by_agent.setdefault(request.agent_id, []).append((i, request))

            async def in_order(items: list[tuple[int, AppendRequest]]) -> None:
                for i, request in items:
                    try:
                        out[i] = await self.append(request)
                    except StoreClosed:
                        raise
                    except Exception as exc:
                        out[i] = exc

            done = await asyncio.gather(
                *(in_order(items) for items in by_agent.values()), return_exceptions=True
            )
            for result in done:
                if isinstance(result, BaseException):
                    raise result
        elif valid:
            calls: list[tuple[int, AppendRequest, list[bytes], list[Any]]] = []
            for i, request in valid:
                keys, args = self._append_call(request)
                if request_size(args) > SURELY_TAKEN:  # (a huge record: .limits)
                    try:
                        await self._check_size(request.agent_id, args)
                    except StateTooLarge as exc:
                        out[i] = exc  # refused on its own, as alone
                        continue
                calls.append((i, request, keys, args))
            valid = [(i, request) for i, request, _, _ in calls]
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for _, request, keys, args in calls:
                        shard = self.layout.shard(request.agent_id)
                        keys, args = self._guarded(keys, args, (shard,))
                        if self.cluster:  # a cluster pipeline cannot load a script
                            pipe.eval(
                                cast(str, self._append_script.script), len(keys), *keys, *args
                            )
                        else:
                            await self._append_script(keys=keys, args=args, client=cast(Any, pipe))
                    replies = await pipe.execute(raise_on_error=False)
            except RedisError as exc:
                for i, request in valid:  # some may have run: settle each one
                    try:
                        out[i] = await self._recover(request, exc)
                    except StoreClosed:
                        raise
                    except Exception as inner:
                        out[i] = inner
            else:
                for (i, request), reply in zip(valid, replies, strict=True):
                    if isinstance(reply, BaseException):
                        out[i] = self._reject("redis append failed", reply)
                        if isinstance(out[i], StoreLost):
                            out[i] = await self._explained(cast(StoreLost, out[i]))
                        continue
                    try:
                        out[i] = self._result(request, reply)
                    except (ConflictError, LeaseLost) as exc:
                        out[i] = exc
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        return [r if r is not None else BackendError("not attempted") for r in out]

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """The agent made as :meth:`prune` leaves a stream (base snapshot, base field
        ``b``, the events after it) in one script, refused if the agent exists (with
        ``raise_floor``, its shard's feed floor raised through its first event in the
        same script; with ``guard``, its check of the other stream's head first, in
        the script: not on a cluster). A try whose reply was lost is settled by
        looking (as :meth:`_landed` does for an append): sent again, it would meet its
        own stream as a conflict."""
        self._check_can_write()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        if not self._reached:
            await self.open()
        keys, args = self._append_call(request)
        keys = [*keys[:3], *keys[4:]]  # no lease: a new stream takes no fence
        if raise_floor and self.feed:
            keys.append(self._agent(request.agent_id).shard.feed_floor)
        kept = [str(v) for k in kept_keys for v in k]
        args = [str(base.seq), pack_snapshot(base), str(len(kept_keys)), *kept, *args]
        shards: list[ShardKeys] | None = None
        if guard is not None and guard.rewrite is not None:  # (from_base.lua: the tail)
            held = self._agent(guard.agent_id)
            keys += [held.hash, held.snapshots]
            args += [*_rewrite_fields(guard.rewrite), "1"]
            shards = [self._agent(request.agent_id).shard, held.shard]
        else:
            args.append("0")
        first, last = request.events[0].seq, request.events[-1].seq
        tries = 0

        async def op() -> Any:
            nonlocal tries
            tries += 1
            if tries > 1 and await self._landed(request):
                return [0, first, last]
            return await self._write(request.agent_id, self._from_base_script, keys, args, shards)

        reply = await self._retrying("append_from_base", op)
        if int(reply[0]) == 3 and guard is not None:  # the guard's stream moved
            raise ConflictError(guard.agent_id, int(reply[1]), int(reply[2]))
        if int(reply[0]) != 0:
            raise ConflictError(request.agent_id, 0, int(reply[1]))
        return AppendResult(request.agent_id, first, last)

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        """Every request and change in ONE script (:meth:`Backend.append_together`):
        all checks, then all writes, so all or nothing. A reply lost on the way is
        settled by looking at the first request's stream (all or none landed), as
        :meth:`append` settles its own. Not on a Redis Cluster (``appends_together``
        false): different agents live in different hash slots there."""
        if not self.appends_together:
            raise CapabilityUnsupported(
                self.name,
                "append_together",
                "a Redis Cluster keeps different agents in different hash slots, which one"
                " script cannot touch: the audit entry is written first there",
            )
        self._check_can_write()
        validate_together(requests, changes, self)
        if not requests and not changes:
            raise ConfigurationError("append_together needs an append or a change")
        task = current_task()  # a lost cancel: see .client
        asked = task.cancelling() if task is not None else 0
        if not self._reached:
            await self.open()
        keys: list[bytes] = []
        args: list[Any] = [str(len(requests)), str(len(changes)), "1" if self.feed else "0"]
        args.append(self._ttl_ms)
        for request in requests:
            k, a = self._append_call(request)
            keys += k
            args += [str(len(request.events)), *a]
        for change in changes:
            ak = self._agent(change.agent_id)
            keys += [ak.hash, ak.snapshots, ak.shard.index, self._lease_key(change.agent_id)]
            snap = change.snapshot
            drop = sorted(set(change.drop_snapshots))
            lease = change.lease
            args += [
                change.agent_id.encode(),
                "a" if change.absent else "" if change.delete_at is None else str(change.delete_at),
                str(snap.seq) if snap is not None else "0",
                pack_snapshot(snap) if snap is not None else b"",
                "" if change.prune_to is None else str(change.prune_to),
                str(len(drop)),
                *(str(s) for s in drop),
                "" if lease is None else "r" if lease.ttl is None else "g",
                lease.holder.encode() if lease is not None else b"",
                str(lease.token) if lease is not None else "0",
                repr(lease.ttl) if lease is not None and lease.ttl is not None else "0",
            ]
            if change.rewrite is None:
                args.append("0")
            else:
                args += ["1", *_rewrite_fields(change.rewrite)]
            args.append(change.delete_checksum or b"")
            args.append("" if change.prune_head is None else str(change.prune_head))
            args.append(change.prune_checksum or b"")
            args.append(self._ttl_of(change.agent_id))  # (the store's own streams: never)
        agent = requests[0].agent_id if requests else changes[0].agent_id
        shards = [
            self._agent(a).shard
            for a in (*(r.agent_id for r in requests), *(c.agent_id for c in changes))
        ]
        if not requests:  # (changes alone: changes_alone_together)
            return await self._changes_together(agent, changes, keys, args, shards)
        outcome: list[AppendResult | None] = []
        try:
            reply = await self._write(agent, self._together_script, keys, args, shards)
        except RedisError as exc:

            async def submit(_: AppendRequest) -> AppendResult:
                nonlocal outcome
                reply = await self._write(agent, self._together_script, keys, args, shards)
                outcome = self._together_outcome(requests, changes, reply)
                return AppendResult(agent, 0, 0)  # (the outcome above is the answer)

            try:
                await self._reconnect.settle_append(
                    requests[0], exc, landed=self._landed, submit=submit
                )
            except StoreLost as lost:  # with its likely cause, as _retrying gives it
                raise await self._explained(lost) from lost.__cause__
            reply = [0]  # (unless outcome: the first request landed, the script ran whole)
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        done = outcome or self._together_outcome(requests, changes, reply)
        if any(c.lease is not None and c.lease.ttl is not None for c in changes):
            await self._granted()  # (a grant committed with its audit entry)
        return done

    async def _changes_together(
        self,
        agent: str,
        changes: Sequence[StreamChange],
        keys: list[bytes],
        args: list[Any],
        shards: list[ShardKeys],
    ) -> list[AppendResult | None]:
        """:meth:`append_together` of changes alone (a prune or a rewrite with a check
        of another stream: tiered's). A reply lost, the script is sent again; refused
        then, a rewrite of them that gives its stream a new head tag found there is the
        first try committed (the script is all or nothing: a tiered check's fence),
        else whether it committed is unknown (a check it passed fails once it
        committed): BackendError, ``maybe_applied``."""
        tries = 0
        tagged = [c.rewrite for c in changes if c.rewrite is not None and c.rewrite.head_tag]

        async def op() -> Any:
            nonlocal tries
            tries += 1
            reply = await self._write(agent, self._together_script, keys, args, shards)
            if tries > 1 and int(reply[0]) != 0:
                for rewrite in tagged:  # (was: BackendError here, after its own commit)
                    now = await self.head_tag(rewrite.agent_id)
                    if now == (rewrite.expected_seq, rewrite.head_tag):
                        return [0]
                raise BackendError(
                    f"redis: the changes of {agent!r} met a lost reply, and sent again they"
                    " were refused: whether the first try committed is unknown",
                    maybe_applied=True,
                )
            return reply

        return self._together_outcome((), changes, await self._retrying("append_together", op))

    @staticmethod
    def _together_outcome(
        requests: Sequence[AppendRequest], changes: Sequence[StreamChange], reply: Any
    ) -> list[AppendResult | None]:
        """:meth:`append_together`'s answer from the script's reply (see together.lua):
        the results, or the error of the check that stopped it (nothing written)."""
        status = int(reply[0])
        if status == 0:
            return [AppendResult(r.agent_id, r.events[0].seq, r.events[-1].seq) for r in requests]
        if status == 6:
            request = requests[int(reply[1]) - 1]
            result = append_outcome(request, reply[2:], _holder)  # raises unless a duplicate
            return [result if r is request else None for r in requests]
        change = changes[int(reply[1]) - 1]
        agent_id = change.agent_id
        if status in (7, 8, 9):  # a lease change refused (lease_write.lua)
            lease = change.lease
            assert lease is not None
            if status == 7:
                raise LeaseHeld(agent_id, bytes(reply[2]).decode(), float(reply[3]))
            if status == 8:
                raise ConflictError(agent_id, lease.token - 1, int(reply[2]))
            token = int(reply[3])
            holder = _holder(reply[2])
            current = LeaseInfo(agent_id, holder, token, float(reply[4])) if token else None
            check_fence(agent_id, (lease.holder, lease.token), current)  # raises LeaseLost
            raise BackendError(f"redis refused the lease release of {agent_id!r}")
        head = int(reply[2])
        if status == 10:  # (a rewrite naming a pruned event or snapshot)
            raise unstored_record(agent_id, *reply[3:6])
        if status == 5:
            snap = change.snapshot
            expected = (
                change.rewrite.expected_seq
                if change.rewrite is not None
                else change.delete_at
                if change.delete_at is not None
                else change.prune_head
                if change.prune_head is not None
                else snap.seq
                if snap
                else 0
            )
            raise ConflictError(agent_id, expected, head)
        assert change.prune_to is not None
        drop = sorted(set(change.drop_snapshots))
        has_base, stored = bool(int(reply[3])), int(reply[4])
        check_prune(change.agent_id, head, change.prune_to, has_base, drop, stored)
        raise BackendError(f"redis refused the prune of {change.agent_id!r} (reply {status})")

    async def _recover(self, request: AppendRequest, exc: RedisError) -> AppendResult:
        """Settle an append whose reply was lost: stored, not stored, or someone else's
        (see :meth:`Reconnecting.settle_append`)."""
        return await self._reconnect.settle_append(
            request, exc, landed=self._landed, submit=self._submit
        )

    async def _submit(self, request: AppendRequest) -> AppendResult:
        keys, args = self._append_call(request)
        reply = await self._write(request.agent_id, self._append_script, keys, args)
        return self._result(request, reply)

    async def _landed(self, request: AppendRequest) -> bool:
        h, _ = self._keys(request.agent_id)
        fields = [b"e:%d" % e.seq for e in request.events]
        key = request.idempotency_key
        if key is not None:
            fields.append(b"k:" + key.encode())
        if self.wait_replicas:  # stored AND replicated, or not settled yet
            values, acked = await self._barrier(request.agent_id, [("HMGET", h, *fields)])
            if isinstance(values, BaseException):
                raise values
            if any(v is not None for v in values):
                self._check_acked(acked)
        else:
            values = await self._client.hmget(h, fields)
        stored = values[: len(request.events)]
        if any(v != pack_event(e) for v, e in zip(stored, request.events, strict=True)):
            return False
        if key is None:
            return True
        first, last = request.events[0].seq, request.events[-1].seq
        return bool(values[-1] == b"%d:%d" % (first, last))

    # -- other writes ----------------------------------------------------------------

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        if not self._reached:  # (the store's TTL: known once open, see _settle_ttl)
            await self.open()
        h, sz = self._keys(agent_id)
        args: list[bytes | str] = [
            str(snapshot.seq),
            pack_snapshot(snapshot),
            self._ttl_of(agent_id),
            agent_id.encode(),
        ]
        keys = [h, sz, self.layout.shard(agent_id).index]

        async def op() -> Any:
            return await self._write(agent_id, self._save_snapshot_script, keys, args)

        reply = await self._retrying("save_snapshot", op)
        if int(reply[0]) != 0:
            raise ConflictError(agent_id, snapshot.seq, int(reply[1]))

    async def delete_agent(self, agent_id: str) -> bool:
        self._check_writable()
        return await self._delete(agent_id, None) == 1

    async def _delete(self, agent_id: str, head: int | None, checksum: bytes | None = None) -> int:
        """The delete script's reply for ``agent_id`` (conditional on ``head`` when
        given). The script leaves a receipt (a key of the agent's shard holding this
        call's random token and answer, expiring once no retry can come): a try sent
        again after a lost reply finds it and returns the first try's answer, instead of
        meeting the stream as it is now (its own delete: "did not exist", or a
        conflict; or a stream created again since up to ``head``, which it would
        delete)."""
        h, sz = self._keys(agent_id)
        shard = self._agent(agent_id).shard
        token = secrets.token_hex(16)
        receipt = shard.base + b"d:" + token.encode()
        if not self._reached:  # (as save_snapshot)
            await self.open()
        lifetime = str(int(max(60.0, 2 * self.retry_timeout) * 1000))
        ttl = self._ttl_of(agent_id)  # (a lost agent existed: see delete.lua)
        args = [agent_id.encode(), "" if head is None else str(head), token, lifetime, ttl]
        args.append(checksum or b"")  # (the head record's identity: see delete.lua)

        async def op() -> Any:
            return await self._write(
                agent_id, self._delete_script, [h, sz, shard.index, receipt], args
            )

        return int(await self._retrying("delete_agent" if head is None else "delete_agent_at", op))

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """The delete conditional on the head (:meth:`Backend.delete_agent_at`): the
        delete script with the expected head (and head event checksum), checked in the
        script (exact when sent again after a lost reply: see :meth:`_delete`)."""
        self._check_writable()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        reply = await self._delete(agent_id, head, checksum)
        if reply < 0:
            raise ConflictError(agent_id, head, -1 - reply)
        return True

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history below a snapshot in one script (atomic: the head and its
        event's checksum compared in it); retried safely."""
        self._check_can_write()
        if head is None and checksum is not None:
            raise ConfigurationError("a prune's checksum is its head's identity: give head too")
        k = self._agent(agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        drop = sorted(set(drop_snapshots))
        args = [
            agent_id.encode(),
            self._ttl_of(agent_id),
            str(base_seq),
            "" if head is None else str(head),
            checksum if head is not None and checksum is not None else b"",
            *(str(s) for s in drop),
        ]
        keys = [k.hash, k.snapshots, k.shard.index]  # (the index: a lost agent, presence.lua)

        async def op() -> Any:
            return await self._write(agent_id, self._prune_script, keys, args)

        reply = await self._retrying("prune", op)
        if int(reply[0]) == 2:
            assert head is not None
            raise ConflictError(agent_id, head, int(reply[1]))
        if int(reply[0]) != 0:
            has_base, stored = bool(int(reply[2])), int(reply[3])
            check_prune(agent_id, int(reply[1]), base_seq, has_base, drop, stored)

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace stored record bytes atomically (one script), if the head is still
        ``(expected_seq, expected_tag)``."""
        self._check_can_write()
        validate_rewrite(request)
        k = self._agent(request.agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [k.hash, k.snapshots, k.shard.index]  # (the index: a lost agent, presence.lua)
        args: list[bytes | str] = [
            self._ttl_of(request.agent_id),
            request.agent_id.encode(),
            *_rewrite_fields(request),
        ]
        attempts = 0

        async def op() -> Any:
            nonlocal attempts
            attempts += 1
            reply = await self._write(request.agent_id, self._rewrite_script, keys, args)
            if int(reply[0]) != 0 and attempts > 1 and request.head_tag is not None:
                head, tag = await self.head_tag(request.agent_id)  # our lost reply?
                if head == request.expected_seq and tag == request.head_tag:
                    return [0, head]
            return reply

        reply = await self._retrying("rewrite", op)
        if int(reply[0]) == 3:
            raise unstored_record(request.agent_id, *reply[2:5])
        if int(reply[0]) != 0:
            raise ConflictError(request.agent_id, request.expected_seq, int(reply[1]))

    async def set_ttl(self, agent_id: str, ttl: float | None) -> bool:
        """Give one agent its own TTL in seconds (None: never expires). False if absent."""
        if ttl is not None and ttl <= 0:
            raise ConfigurationError("ttl must be > 0 seconds (or None for no expiry)")
        self._check_writable()
        k = self._agent(agent_id)
        ms = str(round(ttl * 1000)) if ttl else "0"
        # the script sets (takes off) the agent's own-ttl mark in the index with the ttl:
        # its expiry is not a loss; and a lost agent raises (see .identity)
        keys = [k.hash, k.snapshots, k.shard.index]
        if not self._reached:  # (as save_snapshot)
            await self.open()
        if ttl is not None and not self.evictable:
            await self._check_expiring()  # (the agent will carry an expiry: .eviction)
        args = [ms, agent_id.encode(), self._ttl_of(agent_id)]

        async def op() -> Any:
            return await self._write(agent_id, self._ttl_script, keys, args)

        return bool(await self._retrying("set_ttl", op))

    async def hold_keys(self, pattern: str, held: bool) -> int:
        """Keep the keys of the agents ``pattern`` covers (an agent id or
        ``NAMESPACE/*``) from expiring while it is ``held``, or let their TTL apply again
        (from now) once it is not. The pattern is added to (removed from) every shard's
        holds set (``<base>holds``), which an append creating a stream consults, and
        each stored agent it covers is marked (or unmarked, unless another hold in the
        set still covers it) by one script each. Returns how many stored agents it
        covers."""
        self._check_writable()
        if not self._reached:
            await self.open()
        shards = self.layout.shard_keys

        async def mark() -> None:
            async with self._client.pipeline(transaction=False) as pipe:
                for shard in shards:
                    key = shard.base + b"holds"
                    (pipe.sadd if held else pipe.srem)(key, pattern.encode())
                await pipe.execute()

        await self._retrying("hold_keys", mark)
        if pattern.endswith("/*"):
            namespace = pattern[:-1]
            agents: list[str] = []
            after: str | None = namespace
            while True:
                page = await self.list_agents(after, limit=500)
                inside = [i.agent_id for i in page if i.agent_id.startswith(namespace)]
                agents += [a for a in inside if "/" not in a[len(namespace) :]]
                if len(page) < 500 or len(inside) < len(page):
                    break
                after = page[-1].agent_id
        else:
            agents = [pattern]
        covered = 0
        for agent_id in agents:
            k = self._agent(agent_id)

            async def op(agent_id: str = agent_id, k: AgentKeys = k) -> Any:
                keys = [k.hash, k.snapshots, k.shard.base + b"holds"]
                return await self._write(
                    agent_id, self._hold_script, keys, [agent_id.encode(), self._ttl_of(agent_id)]
                )

            covered += int(await self._retrying("hold_keys", op))
        return covered

    def _is_agent_hash(self, key: bytes) -> bool:
        """Whether ``key`` (under the prefix) is an agent's hash: ``a:<agent>``, after
        the shard's ``{tag}`` in the sharded layout."""
        rest = key[len(self._pfx) :]
        if rest[:1] == b"{":
            rest = rest[rest.find(b"}") + 1 :]
        return rest[:2] == b"a:"

    async def drop_all(self) -> int:
        """Delete every key of this backend's store (tests, benchmarks): the keys its
        layout gives under its prefix, not another store's whose prefix starts with it
        (:meth:`.keys.Layout.owns`); returns
        how many agents there were (as SQLite and memory do: not how many keys, which
        counts what deleted agents leave by design — their delete receipts, expiring,
        and lease hashes, kept so a fencing token never goes back — and the store's
        own keys). Refused with an empty prefix, which would mean the whole database."""
        if not self.prefix:
            raise ConfigurationError("drop_all needs a non-empty prefix")
        self._check_writable()
        pattern = b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in self._pfx)

        async def op() -> int:
            agents = 0
            batch: list[bytes] = []
            async for key in self._client.scan_iter(match=pattern + b"*", count=1000):
                if not self.layout.owns(key):  # (another store's prefix may start so)
                    continue
                batch.append(key)
                agents += self._is_agent_hash(key)
                if len(batch) >= 500:
                    await self._client.delete(*batch)
                    batch = []
            if batch:
                await self._client.delete(*batch)
            if self._reached and not self.evictable:
                await self._adopt()  # the store is empty by our own hand: new markers
            return agents

        return await self._retrying("drop_all", op)

    # -- leases ----------------------------------------------------------------------
    # One hash per agent (never expires, kept by delete_agent: tokens only grow);
    # expiry on the Redis server's clock; the fence is checked inside the append script.

    @staticmethod
    def _lease(agent_id: str, reply: Any) -> LeaseInfo:
        return LeaseInfo(agent_id, bytes(reply[1]).decode(), int(reply[2]), float(reply[3]))

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return await self._write(
                agent_id, self._acquire_script, [key], [holder.encode(), repr(ttl)]
            )

        reply = await self._retrying("acquire_lease", op)
        if int(reply[0]) == 0:
            raise LeaseHeld(agent_id, bytes(reply[1]).decode(), float(reply[3]))
        await self._granted()
        return self._lease(agent_id, reply)

    async def _granted(self) -> None:
        """After the backend's first lease grant: warn when the master has replicas
        this backend does not wait for (see :mod:`.lease_replicas`)."""
        if not self._tokens_checked:
            self._tokens_checked = True
            await warn_unreplicated_tokens(self._client, self.url)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return await self._write(
                agent_id, self._renew_script, [key], [holder.encode(), str(token), repr(ttl)]
            )

        reply = await self._retrying("renew_lease", op)
        if int(reply[0]) == 0:
            current = bytes(reply[1]).decode() or None
            raise LeaseLost(agent_id, holder, token, int(reply[2]), current)
        return self._lease(agent_id, reply)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 0)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 1)

    async def _release_lease(self, agent_id: str, holder: str, token: int, tries: int) -> bool:
        """``tries``: 1 when an earlier call's try may have released the lease."""
        self._check_can_write()
        key = self._lease_key(agent_id)

        async def op() -> Any:
            # a try after a failed one may follow a release that was applied but whose
            # reply was lost: it says so (``again``), and the script then answers 1 for
            # the lease released with this token instead of "not the current lease"
            nonlocal tries
            tries += 1
            again = "1" if tries > 1 else "0"  # (a call sent again starts at 1)
            return await self._write(
                agent_id, self._release_script, [key], [holder.encode(), str(token), again]
            )

        return bool(await self._retrying("release_lease", op))

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        self._check_can_write()

        async def one(agent_id: str, token: int) -> None:
            key = self._lease_key(agent_id)

            async def op() -> Any:
                return await self._write(agent_id, self._carry_script, [key], [str(token)])

            await self._retrying("carry_lease_tokens", op)

        # each lease its own key (its own shard): one script per agent, 64 at a time
        for start in range(0, len(tokens), 64):
            await asyncio.gather(*(one(a, t) for a, t in tokens[start : start + 64]))

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        self._check_open()
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return (await self._checked(agent_id, [("HMGET", key, b"o", b"n", b"x")]))[0]

        holder, token, expiry = await self._retrying("get_lease", op)
        if token is None:
            return None
        return LeaseInfo(
            agent_id,
            bytes(holder).decode() if holder is not None else None,
            int(token),
            float(expiry),
        )

    # -- reads -----------------------------------------------------------------------

    async def _absent(self, agent_id: str) -> None:
        """A plain read found no head for ``agent_id``: raise :class:`AgentLost` when the
        index lists it all the same, :class:`StoreLost` when the index lost its proof
        entry (see :mod:`.identity`; a second round trip, on this path only). The probe
        is one script (one consistent read: a stream deleted, or created again, between
        the first read and this one is not taken for a lost one)."""
        k = self.layout.agent(agent_id)
        raw = agent_id.encode()
        (found,) = await self._checked(
            agent_id, [("EVAL", _PROBE, 2, k.hash, k.shard.index, raw, PROOF + b"t:" + raw)]
        )
        if int(found[0]):
            return  # stored after all
        ttl = self._ttl_of(agent_id) not in ("0", "-1")
        self._identity.missing(k.shard, agent_id, found[1], found[2], found[3], ttl=ttl)

    def _queue_proofs(self, pipe: Any) -> None:
        """Queue a read of every shard index's proof entry (a listing or a count)."""
        for shard in self.layout.shard_keys:
            pipe.zscore(shard.index, PROOF)

    def _check_proofs(self, found: list[Any]) -> None:
        """:class:`StoreLost` for a shard whose index lost its proof entry."""
        for shard, proof in zip(self.layout.shard_keys, found, strict=True):
            self._identity.missing(shard, "", proof, None, None, ttl=True)

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            return (await self._checked(agent_id, [("HGET", h, b"k:" + key.encode())]))[0]

        value = await self._retrying("lookup_key", op)
        if value is None:
            return None
        first, last = bytes(value).split(b":")
        return AppendResult(agent_id, int(first), int(last), duplicate=True)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        h, _ = self._keys(agent_id)

        async def op() -> list[tuple[str, int, int]]:
            out = []
            async for field, value in self._client.hscan_iter(h, match=b"k:*", count=1000):
                first, last = bytes(value).split(b":")
                out.append((bytes(field)[2:].decode(), int(first), int(last)))
            await self._checked(agent_id, [])  # the scan read the store adopted
            return sorted(out, key=lambda k: k[1])

        return await self._retrying("idempotency_keys", op)

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Store records under another form of their key, in one script — with the
        ``guard``'s check and change (see :meth:`Backend.rename_keys`; not on a Redis
        Cluster: another agent's keys are in another hash slot)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        h, _ = self._keys(agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys, args = [h], ["", b"", "0"]
        shards = [self._agent(agent_id).shard]
        if guard is not None:
            ak = self._agent(guard.agent_id)
            keys += [ak.hash, ak.snapshots, ak.shard.index]
            shards.append(ak.shard)
            args = ["a" if guard.absent else "r", guard.agent_id.encode()]
            args.append(self._ttl_of(guard.agent_id))
            if guard.rewrite is not None:
                args += _rewrite_fields(guard.rewrite)
        args += [b"k:" + form.encode() for pair in renames for form in pair]

        async def op() -> Any:  # (sent again after a lost reply: renames what is left)
            return await self._write(agent_id, self._rename_keys_script, keys, args, shards)

        reply = await self._retrying("rename_keys", op)
        if isinstance(reply, list):  # {5, head}: the guard's stream moved, nothing renamed
            assert guard is not None
            expected = guard.rewrite.expected_seq if guard.rewrite is not None else 0
            raise ConflictError(guard.agent_id, expected, int(reply[1]))
        return int(reply)

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            found = (await self._checked(agent_id, [("HMGET", h, b"h", b"g")]))[0]
            if found[0] is None:
                await self._absent(agent_id)
            return found

        head, tag = await self._retrying("head_tag", op)
        if head is None:
            return 0, None
        return int(head), bytes(tag) if tag else None

    async def head(self, agent_id: str) -> int:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            found = (await self._checked(agent_id, [("HGET", h, b"h")]))[0]
            if found is None:
                await self._absent(agent_id)
            return found

        value = await self._retrying("head", op)
        return int(value) if value is not None else 0

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        if not self._reached:  # (as save_snapshot)
            await self.open()
        h, sz = self._keys(agent_id)
        args = [
            str(after_seq),
            str(-1 if to_seq is None else to_seq),
            str(-1 if limit is None else limit),
            self._ttl_of(agent_id),
            self._touch,
            agent_id.encode(),
        ]
        index = self.layout.shard(agent_id).index

        async def op() -> Any:
            return await self._read_run(agent_id, self._read_script, [h, sz, index], args)

        reply = await self._retrying("read", op)
        start = (int(reply[2]) if len(reply) > 2 else max(after_seq, 0)) + 1
        events = []
        for offset, blob in enumerate(reply[1]):
            if blob is None:
                raise IntegrityError(agent_id, start + offset, "event missing from redis")
            events.append(unpack_event(start + offset, bytes(blob)))
        return events

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        h, _ = self._keys(agent_id)

        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [h, self.layout.shard(agent_id).index]
        args = [repr(float(timestamp)), agent_id.encode(), self._ttl_of(agent_id)]

        async def op() -> Any:
            return await self._read_run(agent_id, self._seq_at_script, keys, args)

        return int(await self._retrying("seq_at", op))

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        h, sz = self._keys(agent_id)
        bound = "+inf" if at_or_below is None else str(at_or_below)

        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [h, sz, self.layout.shard(agent_id).index]
        args = [bound, self._ttl_of(agent_id), self._touch, agent_id.encode()]

        async def op() -> Any:
            return await self._read_run(agent_id, self._latest_script, keys, args)

        reply = await self._retrying("latest_snapshot", op)
        if not reply:
            return None
        return unpack_snapshot(int(reply[0]), bytes(reply[1]))

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The newest snapshot and the events after it: one script, one round trip."""
        reply = await self._read_latest_reply(agent_id, "read_latest")
        return self._latest_from(agent_id, reply)

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """Head, head tag, newest snapshot and the events after it: the same script as
        :meth:`read_latest`, so one round trip and one consistent read (the events end
        at the head; the base class made two calls, ``head_tag`` then ``read_latest``)."""
        reply = await self._read_latest_reply(agent_id, "read_state")
        head = int(reply[1])
        if head == 0:
            return 0, None, None, []
        tag = reply[3] if len(reply) > 3 else None
        snap, events = self._latest_from(agent_id, reply)
        return head, bytes(tag) if tag else None, snap, events

    async def _read_latest_reply(self, agent_id: str, what: str) -> Any:
        k = self.layout.agent(agent_id)  # one agent's keys: one hash slot on a cluster
        keys = [k.hash, k.snapshots, k.shard.index]
        if not self._reached:  # (as save_snapshot)
            await self.open()
        args = [self._ttl_of(agent_id), self._touch, agent_id.encode()]

        async def op() -> Any:
            return await self._read_run(agent_id, self._read_latest_script, keys, args)

        return await self._retrying(what, op)

    @staticmethod
    def _latest_from(agent_id: str, reply: Any) -> tuple[RawSnapshot | None, list[RawEvent]]:
        snap = unpack_snapshot(int(reply[0][0]), bytes(reply[0][1])) if reply[0] else None
        start = (snap.seq if snap is not None else 0) + 1
        events = []
        for offset, blob in enumerate(reply[2]):
            if blob is None:
                raise IntegrityError(agent_id, start + offset, "event missing from redis")
            events.append(unpack_event(start + offset, bytes(blob)))
        return snap, events

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """Agents in id order: each shard's index is ordered by id, a page merges them."""
        shards = self.layout.shard_keys

        async def op() -> list[AgentInfo]:
            out: list[AgentInfo] = []
            # (from "\x01": the index's own entries, its proof "\0" and the own-ttl
            # marks "\0t:<agent>", sort before every agent id)
            low = b"(" + after.encode() if after is not None else b"[\x01"
            while len(out) < limit:
                want = limit - len(out)
                async with self._client.pipeline(transaction=False) as pipe:
                    for shard in shards:
                        pipe.zrangebylex(shard.index, low, b"+", start=0, num=want)
                    self._queue_proofs(pipe)
                    self._get_markers(pipe)
                    replies = self._check_markers(await pipe.execute())
                pages = replies[: len(shards)]
                self._check_proofs(replies[len(shards) :])
                found = sorted(
                    i if isinstance(i, bytes) else i.encode() for page in pages for i in page
                )
                ids = found[:want]
                if not ids:
                    break
                async with self._client.pipeline(transaction=False) as pipe:
                    for raw in ids:
                        pipe.hmget(self.layout.agent(raw).hash, [b"h", b"c", b"u"])
                    rows = await pipe.execute()
                stale: dict[bytes, list[bytes]] = {}
                for raw, (h, c, u) in zip(ids, rows, strict=True):
                    if h is None:  # expired (TTL): drop it from the index; or lost
                        if self._ttl_of(raw.decode()) in ("0", "-1"):  # it may not expire
                            await self._absent(raw.decode())  # (AgentLost: see .identity)
                        stale.setdefault(self.layout.agent(raw).shard.index, []).append(raw)
                        continue
                    out.append(AgentInfo(raw.decode(), int(h), float(c), float(u)))
                if stale and not self.readonly:
                    for index, raws in stale.items():  # (with their own-ttl marks)
                        marks = [PROOF + b"t:" + raw for raw in raws]
                        await self._client.zrem(index, *raws, *marks)
                if len(found) < want:
                    break
                low = b"(" + ids[-1]
            return out

        if limit <= 0:
            self._check_open()
            return []
        return await self._retrying("list_agents", op)

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        """Agents with events whose shard's index does not list them (:mod:`.orphans`);
        None for a hot tier's copies (``evictable``), which the durable tier answers for."""
        if self.evictable:
            return None

        async def op() -> list[tuple[str, int, int, int]]:
            return await orphaned_events(self._client, self.layout)

        return await self._retrying("orphaned_events", op)

    async def unlisted_agents(self) -> list[str]:
        """The agents with events that their shard's index does not list (one scan:
        :mod:`.orphans`), which no listing shows; read by id as any other."""
        return [agent_id for agent_id, *_ in await self.orphaned_events() or ()]

    async def count_agents(self) -> int:
        if not self._reached:  # (the store's TTL is known once open: _settle_ttl)
            await self._retrying("count_agents", self.open)
        if self.ttl is not None:
            return await super().count_agents()  # skips expired index entries

        async def op() -> int:
            shards = self.layout.shard_keys
            async with self._client.pipeline(transaction=False) as pipe:
                for shard in shards:  # (the index's own entries sort before "\x01")
                    pipe.zlexcount(shard.index, b"[\x01", b"+")
                self._queue_proofs(pipe)
                self._get_markers(pipe)
                replies = self._check_markers(await pipe.execute())
            self._check_proofs(replies[len(shards) :])
            return sum(int(n) for n in replies[: len(shards)])

        return await self._retrying("count_agents", op)

    async def count_prefix(self, prefix: str) -> int:
        if not self._reached:  # (as count_agents)
            await self._retrying("count_agents", self.open)
        if self.ttl is not None or not prefix:  # (expired index entries: see above)
            return await super().count_prefix(prefix) if prefix else await self.count_agents()
        low = b"[" + prefix.encode()
        high = b"(" + prefix_end(prefix).encode()

        async def op() -> int:
            # the agent index is lexicographic (score 0): one ZLEXCOUNT per shard
            shards = self.layout.shard_keys
            async with self._client.pipeline(transaction=False) as pipe:
                for shard in shards:
                    pipe.zlexcount(shard.index, low, high)
                self._queue_proofs(pipe)
                self._get_markers(pipe)
                replies = self._check_markers(await pipe.execute())
            self._check_proofs(replies[len(shards) :])
            return sum(int(n) for n in replies[: len(shards)])

        return await self._retrying("count_agents", op)

    @property
    def expires_agents(self) -> bool:
        return self.ttl is not None

    async def health(self) -> Health:
        detail: dict[str, Any] = {"prefix": self.prefix}
        if self._closed:
            return Health(ok=False, backend=self.name, detail={**detail, "error": "closed"})
        try:
            await asyncio.wait_for(self._client.ping(), timeout=min(5.0, self.connect_timeout))
            info = await asyncio.wait_for(self._client.info("server"), timeout=5)
            detail["redis_version"] = info.get("redis_version")
            detail["ttl"] = self.ttl
            # a store recorded with another layout refuses every operation of this
            # backend: not healthy (a tiered backend's hot tier was reported ok so)
            got = await asyncio.wait_for(self._client.hget(self.layout.meta, b"shards"), 5)
            self._compare_layout(got)
            if not self.evictable:  # a CONFIG SET since the backend opened (.eviction)
                expiring = self._expiring
                policy = await asyncio.wait_for(evicting_policy(self._client, expiring), 5)
                if policy is not None:
                    detail["error"] = (
                        f"the server evicts {'keys' if expiring else 'any key'} when full "
                        f"({policy}): agents acknowledged as written may disappear"
                    )
                    return Health(ok=False, backend=self.name, detail=detail)
        except Exception as exc:  # health reports, it does not raise
            return Health(ok=False, backend=self.name, detail={**detail, "error": str(exc)})
        return Health(ok=True, backend=self.name, detail=detail)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        first = self._loop
        if first is not None and first.is_closed():
            # its connections belong to a loop closed under it (a LangGraph saver's own
            # loop, closed with a store it was given still open; a loop per job): they
            # cannot be closed from here, and die with it. Was: an untyped
            # RuntimeError ("Event loop is closed") from redis-py
            return
        await self._client.aclose()

    # -- the change feed (see .feed) -------------------------------------------------

    def _need_feed(self) -> None:
        self._check_open()
        if not self.feed:
            self.require(Capability.FEED, "this backend was opened with feed=False")
        self.require(
            Capability.FEED,
            f"the store has {self.layout.shards} shards, each with its own feed "
            "(read_shard_feed); there is no store-wide order on a sharded Redis: use "
            "store.feed_cursor_bounds() and store.trim_feed(FeedCursor) (docs/feed.md)",
        )

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        return await self.read_shard_feed(0, after, limit, _store_wide=True)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        """With the feed's id from the same pipeline (:func:`.feed.read_feed_page`); on
        a cluster (the meta hash in another slot) read after the page instead."""
        keys = self._shard(0, True)
        if self.cluster:
            return await super().read_feed_page(after, limit)
        meta_key = self.layout.meta

        async def op() -> tuple[list[FeedRecord], bytes | None]:
            return await feed.read_feed_page(self, keys, after, limit, meta_key)

        page, found = await self._retrying("read_feed", op)
        return page, meta.as_text(found) if found is not None else None

    async def feed_bounds(self) -> tuple[int, int]:
        return await self.shard_feed_bounds(0, _store_wide=True)

    async def trim_feed(self, through: int) -> int:
        self._need_feed()
        self._check_writable()
        keys = self.layout.shard_keys[0]
        return await self._retrying("trim_feed", lambda: feed.trim_feed(self, keys, through))

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        """In the agent's shard's feed (:meth:`feed_shard_of`)."""
        self._check_open()
        if not self.feed:
            return None
        keys = self.layout.shard_keys[self.layout.shard_of(agent_id)]
        return await self._retrying(
            "feed_position", lambda: feed.feed_position(self, keys, agent_id, seq)
        )

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Per shard, one pass back from the head for all of that shard's agents."""
        self._check_open()
        if not self.feed:
            return {}
        by_shard: dict[int, list[tuple[str, int]]] = {}
        for agent_id, seq in wanted:
            by_shard.setdefault(self.layout.shard_of(agent_id), []).append((agent_id, seq))
        found: dict[tuple[str, int], int] = {}
        for shard, pairs in sorted(by_shard.items()):
            keys = self.layout.shard_keys[shard]
            op = functools.partial(feed.feed_positions, self, keys, pairs)
            found.update(await self._retrying("feed_positions", op))
        return found

    def feed_shard_of(self, agent_id: str) -> int:
        """The shard whose feed holds ``agent_id``'s events (0 unless sharded)."""
        return self.layout.shard_of(agent_id)

    async def wait_feed(self, after: int, max_wait: float) -> None:
        self._need_feed()
        max_wait = min(max_wait, self._block_limit)
        keys = self.layout.shard_keys[0]
        await self._retrying("wait_feed", lambda: feed.wait_feed(self, keys, after, max_wait))

    # per shard: the feed of a sharded store (see .feed)

    def _shard(self, shard: int, store_wide: bool) -> Any:
        if store_wide:
            self._need_feed()
        else:
            self._check_open()
            if not self.feed:
                self.require(Capability.FEED, "this backend was opened with feed=False")
        if not 0 <= shard < len(self.layout.shard_keys):
            raise ConfigurationError(
                f"shard must be in 0..{len(self.layout.shard_keys) - 1}, not {shard!r}"
            )
        return self.layout.shard_keys[shard]

    async def read_shard_feed(
        self, shard: int, after: int = 0, limit: int = 500, *, _store_wide: bool = False
    ) -> list[FeedRecord]:
        """The events of one shard after its position ``after``, in that shard's commit
        order (positions are per shard; see :mod:`.feed`)."""
        keys = self._shard(shard, _store_wide)
        return await self._retrying("read_feed", lambda: feed.read_feed(self, keys, after, limit))

    async def shard_feed_bounds(self, shard: int, *, _store_wide: bool = False) -> tuple[int, int]:
        """``(floor, head)`` of one shard's feed."""
        keys = self._shard(shard, _store_wide)
        return await self._retrying("feed_bounds", lambda: feed.feed_bounds(self, keys))

    async def trim_shard_feed(self, shard: int, through: int) -> int:
        """Forget positions ``<= through`` of one shard's feed (its floor only rises);
        returns how many entries were dropped."""
        keys = self._shard(shard, False)
        self._check_writable()
        return await self._retrying("trim_feed", lambda: feed.trim_feed(self, keys, through))

    @property
    def feed_shards(self) -> int:
        """How many feeds the store has: 1 (the store-wide feed) unless sharded."""
        return len(self.layout.shard_keys)

    async def shard_feed_bounds_all(self) -> list[tuple[int, int]]:
        """``(floor, head)`` of every shard's feed, in shard order, read in one
        pipeline (one round trip per node on a cluster): what a subscriber of a
        sharded store polls while live (see :mod:`statekeeper.store.feed`)."""
        self._shard(0, False)
        return await self._retrying("feed_bounds", lambda: feed.all_feed_bounds(self))
