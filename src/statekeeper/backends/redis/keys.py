"""Every Redis key name the backend uses, in one place (the layout).

Two layouts, chosen when the backend is built and recorded in ``<prefix>meta``
(field ``shards``):

**Plain** (a single Redis server, the layout of every store created before Redis
Cluster support; ``shards`` absent)::

    <prefix>a:<agent>   hash    events, snapshots, head, idempotency keys (backend.py)
    <prefix>s:<agent>   zset    snapshot seqs
    <prefix>l:<agent>   hash    the lease
    <prefix>d:<token>   string  a conditional delete's receipt (expires; backend.py)
    <prefix>agents      zset    the agent index
    <prefix>feed, <prefix>feed:n, <prefix>feed:floor    the change feed (feed.py)
    <prefix>epoch       string  the store's identity marker (identity.py)

**Sharded** (``shards = N``; what a Redis Cluster always uses, and what a plain
server uses when created with ``?shards=N``, e.g. to be copied to a cluster later).
Agents are spread over N shards by ``crc32(agent id) % N``; every key of a shard
carries the shard's hash tag, so an agent's keys, its shard's index and its shard's
feed share one hash slot and every script touches one slot only::

    <prefix>{<tag k>}a:<agent>, …s:<agent>, …l:<agent>   the agent's keys
    <prefix>{<tag k>}agents                              shard k's agent index
    <prefix>{<tag k>}feed, …feed:n, …feed:floor          shard k's change feed
    <prefix>{<tag k>}epoch                               shard k's identity marker
                                                         (identity.py)
    <prefix>{<tag k>}sync                                a counter written by the
                                                         replication barrier (WAIT)

The tag of shard k is the first string ``"k.j"`` (j = 0, 1, …) whose hash slot falls in
the k-th of N equal ranges of the 16384 slots: a cluster created by
``redis-cli --cluster create`` gives each master one contiguous range, so the shards
spread evenly over the masters (a plain ``"k"`` tag would land wherever CRC16 puts it).

The agent's shard is fixed by N, so N is fixed for the life of a store: the backend
refuses to open a store recorded with another N (:class:`ConfigurationError`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

__all__ = ["AgentKeys", "Layout", "ShardKeys", "shard_tag"]


#: the kinds of per-agent keys (``<base><kind><id>``): the agent's hash, its snapshot
#: index and its lease, and a conditional delete's receipt (``d:<token>``)
AGENT_KINDS = frozenset({b"a:", b"s:", b"l:", b"d:"})
#: the keys of a shard after its base (:class:`ShardKeys`), and a legal hold's set
SHARD_KEYS = frozenset({b"agents", b"feed", b"feed:n", b"feed:floor", b"sync", b"epoch", b"holds"})


@cache
def shard_tag(shard: int, shards: int) -> bytes:
    """The hash tag (without braces) of ``shard`` out of ``shards``."""
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    j = 0
    while True:
        tag = b"%d.%d" % (shard, j)
        if low <= key_slot(tag) < high:
            return tag
        j += 1


@dataclass(frozen=True, slots=True)
class ShardKeys:
    """The keys shared by the agents of one shard (the whole store when plain)."""

    index: bytes
    feed_stream: bytes
    feed_counter: bytes
    feed_floor: bytes
    sync: bytes
    #: the identity marker: a random token, gone or changed when the shard lost its data
    epoch: bytes
    #: the start of every agent key in the shard: ``<prefix>`` or ``<prefix>{tag}``
    base: bytes


@dataclass(frozen=True, slots=True)
class AgentKeys:
    hash: bytes
    snapshots: bytes
    lease: bytes
    shard: ShardKeys


def _shard_keys(base: bytes) -> ShardKeys:
    return ShardKeys(
        index=base + b"agents",
        feed_stream=base + b"feed",
        feed_counter=base + b"feed:n",
        feed_floor=base + b"feed:floor",
        sync=base + b"sync",
        epoch=base + b"epoch",
        base=base,
    )


class Layout:
    """Key names under ``prefix``: plain (``shards=None``) or sharded in N hash tags."""

    def __init__(self, prefix: bytes, shards: int | None) -> None:
        self.prefix = prefix
        self.shards = shards
        self.meta = prefix + b"meta"
        if shards is None:
            self.shard_keys: tuple[ShardKeys, ...] = (_shard_keys(prefix),)
        else:
            self.shard_keys = tuple(
                _shard_keys(prefix + b"{" + shard_tag(k, shards) + b"}") for k in range(shards)
            )
        self._bases = frozenset(k.base for k in self.shard_keys)

    @property
    def sharded(self) -> bool:
        return self.shards is not None

    def shard_of(self, agent_id: str | bytes) -> int:
        """The shard an agent lives in (0 when plain)."""
        if self.shards is None:
            return 0
        raw = agent_id.encode() if isinstance(agent_id, str) else agent_id
        return zlib.crc32(raw) % self.shards

    def shard(self, agent_id: str) -> ShardKeys:
        """The keys of the shard ``agent_id`` lives in."""
        if self.shards is None:
            return self.shard_keys[0]
        return self.shard_keys[zlib.crc32(agent_id.encode()) % self.shards]

    def owns(self, key: bytes) -> bool:
        """Whether ``key`` is one of this store's keys: a key of one of its shards
        (:data:`AGENT_KINDS` + an id, or one of :data:`SHARD_KEYS`) or its meta hash;
        not every key under the prefix (``app:`` must not take ``app:v2:``'s store)."""
        if key == self.meta:
            return True
        if not key.startswith(self.prefix):
            return False
        if self.shards is None:
            rest = key[len(self.prefix) :]
        else:
            end = key.find(b"}", len(self.prefix))
            if end < 0 or key[: end + 1] not in self._bases:
                return False
            rest = key[end + 1 :]
        return rest in SHARD_KEYS or rest[:2] in AGENT_KINDS

    def agent(self, agent_id: str | bytes) -> AgentKeys:
        raw = agent_id.encode() if isinstance(agent_id, str) else agent_id
        shard = self.shard_keys[self.shard_of(raw)]
        return AgentKeys(
            hash=shard.base + b"a:" + raw,
            snapshots=shard.base + b"s:" + raw,
            lease=shard.base + b"l:" + raw,
            shard=shard,
        )
