"""The Redis backend's change feed.

Layout (beside the agents' keys, same prefix)::

    <prefix>feed         stream  one entry per event, id ``0-<position>``:
                                 a = agent, s = seq, i = the agent's incarnation
    <prefix>feed:n       string  the last position taken (INCRBY)
    <prefix>feed:floor   string  positions <= floor were trimmed (XTRIM MINID)

The append script takes the positions and adds the entries in the same script as the
events (Redis runs one script at a time: positions commit in order, and every one
read is safe). An entry holds no payload: a reader fetches the events from the agents'
hashes (``HMGET``, pipelined) and keeps an entry only while the agent's incarnation
(``i``: the position of its first event, set when the stream is created) still
matches, so a deleted agent's entries, or an expired one's, are gaps, never the
events of a stream re-created under the same id.

Live readers block on ``XREAD`` of the stream: a Redis Stream is its own wake-up.

With ``wait_replicas=N`` a reader takes only entries N replicas hold (the replication
barrier after its ``XRANGE``, :func:`_replicated_entries`): what a subscriber was
handed survives a failover, as an acknowledged write does, so its cursor never passes
a position the promoted replica would give out again. Entries the replicas do not
confirm in time raise :class:`~statekeeper.errors.FeedNotReplicated`: held back, not
a gap (an empty read ended a catch-up short, silently).

Sharded layout (a Redis Cluster, see :mod:`.keys`): each shard has its own stream,
counter and floor, under the shard's hash tag, so the append script touches one slot.
Positions are then per shard: gap-tolerant and increasing in each shard's commit order,
with no order across shards (no script can take a position from a counter in another
slot atomically with the append). With one shard that is the store-wide feed
(``Capability.FEED``); with more, the backend offers the per-shard feeds
(:meth:`~.backend.RedisBackend.read_shard_feed`) and not the store-wide one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ...errors import FeedNotReplicated
from ...records import FeedRecord
from .client import on_node
from .codec import unpack_event
from .keys import ShardKeys

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["all_feed_bounds", "feed_bounds", "read_feed", "trim_feed", "wait_feed"]


def _position(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[1])


async def read_feed(
    backend: RedisBackend, keys: ShardKeys, after: int, limit: int
) -> list[FeedRecord]:
    """Up to ``limit`` events of one shard after ``after``: its entries (XRANGE,
    exclusive start) resolved to their events, page after page past entries that are
    gaps (a page of nothing but a deleted or expired agent's entries was returned as
    ``[]``: a subscriber stopped there, its catch-up ended without the events after
    it, and a live one read it again for ever)."""
    while True:
        if backend.wait_replicas:
            entries = await _replicated_entries(backend, keys, after, limit)
        else:
            async with backend._client.pipeline(transaction=False) as pipe:
                pipe.xrange(keys.feed_stream, min=f"(0-{after}", max="+", count=limit)
                pipe.get(keys.epoch)
                found, marker = await pipe.execute()
            backend._identity.check(keys, marker)
            entries = _entries(found)
        if not entries:
            return []
        out = await _resolved(backend, keys, entries)
        if out or len(entries) < limit:
            return out
        after = _position(entries[-1][0])


async def _resolved(
    backend: RedisBackend, keys: ShardKeys, entries: Sequence[tuple[bytes, dict[bytes, bytes]]]
) -> list[FeedRecord]:
    """The events of ``entries`` (gaps left out), read before the shard's identity
    marker: events missing because the shard lost its data are not gaps but
    :class:`~statekeeper.errors.StoreLost` (see :mod:`.identity`)."""
    async with backend._client.pipeline(transaction=False) as pipe:
        for _, fields in entries:
            pipe.hmget(backend.layout.agent(fields[b"a"]).hash, [b"i", b"e:" + fields[b"s"]])
        pipe.get(keys.epoch)
        found: list[Any] = await pipe.execute()
    backend._identity.check(keys, found.pop())
    out: list[FeedRecord] = []
    for (entry_id, fields), (incarnation, blob) in zip(entries, found, strict=True):
        if blob is None or incarnation != fields[b"i"]:
            continue  # deleted, expired or re-created since
        seq = int(fields[b"s"])
        out.append(FeedRecord(_position(entry_id), fields[b"a"].decode(), unpack_event(seq, blob)))
    return out


def _entries(found: Any) -> Sequence[tuple[bytes, dict[bytes, bytes]]]:
    return cast("Sequence[tuple[bytes, dict[bytes, bytes]]]", found)


async def _replicated_entries(
    backend: RedisBackend, keys: ShardKeys, after: int, limit: int
) -> Sequence[tuple[bytes, dict[bytes, bytes]]]:
    """The entries after ``after`` that ``wait_replicas`` replicas hold: the XRANGE,
    then the shard's replication barrier (a write to its ``sync`` counter and
    ``WAIT``) on the same connection to its master. When there are entries and the
    replicas do not confirm in time, :class:`~statekeeper.errors.FeedNotReplicated`:
    a live subscriber waits and reads again, a catch-up fails instead of ending short.
    A subscriber thus never takes an entry a failover can still lose; otherwise its
    cursor could pass a position the promoted replica never saw and then hands out
    again, to another event."""
    ms = max(1, round(backend.wait_timeout * 1000))
    found, marker, _, acked = await on_node(
        backend._client,
        keys.sync,
        [
            ("XRANGE", keys.feed_stream, f"(0-{after}", "+", "COUNT", limit),
            ("GET", keys.epoch),
            ("INCRBY", keys.sync, 0),
            ("WAIT", backend.wait_replicas, ms),
        ],
    )
    if isinstance(found, BaseException):
        raise found
    backend._identity.check(keys, marker)
    if isinstance(acked, BaseException):
        raise acked
    entries = _entries(found)
    if entries and int(acked) < backend.wait_replicas:
        # held back, not a gap: ``[]`` here ended a stop_at_head catch-up short, without
        # an error (the caller took it for the end of the feed)
        shards = backend.layout.shard_keys
        raise FeedNotReplicated(
            after,
            backend.wait_replicas,
            int(acked),
            backend.wait_timeout,
            shard=shards.index(keys) if len(shards) > 1 else None,
        )
    return entries


async def feed_bounds(backend: RedisBackend, keys: ShardKeys) -> tuple[int, int]:
    async with backend._client.pipeline(transaction=False) as pipe:
        pipe.get(keys.feed_counter)
        pipe.get(keys.feed_floor)
        pipe.get(keys.epoch)
        head, floor, marker = await pipe.execute()
    backend._identity.check(keys, marker)
    low = int(floor or 0)
    return low, max(int(head or 0), low)


async def trim_feed(backend: RedisBackend, keys: ShardKeys, through: int) -> int:
    """Drop the entries ``<= through`` and raise the floor (``lua/trim_feed.lua``: one
    script, guarded by the shard's identity marker: a trim computed from the positions
    of a store that lost its data must not trim the feed of the one there now)."""
    stream, args = backend._guarded(
        [keys.feed_stream, keys.feed_floor], [f"0-{through + 1}", str(through)], (keys,)
    )
    return int(await backend._trim_feed_script(keys=stream, args=args))


async def wait_feed(backend: RedisBackend, keys: ShardKeys, after: int, max_wait: float) -> None:
    ms = max(1, round(max_wait * 1000))
    await backend._client.xread({keys.feed_stream: f"0-{after}"}, count=1, block=ms)


async def all_feed_bounds(backend: RedisBackend) -> list[tuple[int, int]]:
    """``(floor, head)`` of every shard, pipelined (a cluster pipeline groups the
    commands by node)."""
    shards = backend.layout.shard_keys
    async with backend._client.pipeline(transaction=False) as pipe:
        for keys in shards:
            pipe.get(keys.feed_counter)
            pipe.get(keys.feed_floor)
        backend._get_markers(pipe)
        found: list[Any] = backend._check_markers(await pipe.execute())
    out: list[tuple[int, int]] = []
    for k in range(len(shards)):
        low = int(found[2 * k + 1] or 0)
        out.append((low, max(int(found[2 * k] or 0), low)))
    return out
