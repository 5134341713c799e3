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

Losses (a key evicted by an ``allkeys-*`` policy, or deleted, while the store's
identity marker stays; see :mod:`.identity`):

* the counter alone: harmless. The append that finds it started over (INCRBY answers
  its own count) goes on from the stream's last id, which is the last position handed
  out (every position gets its entry in the script that takes it; ``XTRIM`` keeps the
  last id), and the bounds read that id meanwhile — the positions are the ones the
  counter would have given;
* the counter with the stream: the last position handed out is unknown, and a new one
  could repeat a position a subscriber holds. A feed that handed out positions says so
  in its shard's agent index (the proof entry ``"\0f"``, added by the append that
  starts the feed; or its floor): appends and bounds raise
  :class:`~statekeeper.errors.FeedLost` (``what="counter"``), nothing written;
* the stream alone: positions above the floor are never missing from it (the
  positions are contiguous and only a trim, which raises the floor, removes entries),
  so a read that finds the first entry after its cursor past the next position, or
  none below the counter (read before the entries, in the same round trip), raises
  :class:`~statekeeper.errors.FeedLost` (``what="entries"``) naming the positions gone
  instead of skipping their events.

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
from .keys import Layout, ShardKeys

if TYPE_CHECKING:
    from .engine import RedisEngine

__all__ = [
    "all_feed_bounds",
    "feed_bounds",
    "feed_position",
    "feed_positions",
    "keeps_feed",
    "read_feed",
    "read_feed_page",
    "trim_feed",
    "wait_feed",
]


def _position(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[1])


#: KEYS: feed stream, agent index, feed floor. Reply: {the position of the stream's last
#: id (0: no stream), the index holds the feed's proof entry 1|0, the floor}
_PROBE = """
local last = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      last = tonumber(string.match(info[i + 1], '%-(%d+)$'))
    end
  end
end
return {last, redis.call('ZSCORE', KEYS[2], '\\0f') and 1 or 0,
  tonumber(redis.call('GET', KEYS[3]) or '0')}
"""


async def _probe(backend: RedisEngine, keys: ShardKeys) -> tuple[int, bool, int]:
    """The stream's last position, whether the feed handed out positions (its proof
    entry) and the floor: one script, read where a counter is missing or a read
    found a hole (never on the way of a read that finds what it expects)."""
    last, proof, floor = await backend._client.eval(
        _PROBE, 3, keys.feed_stream, keys.index, keys.feed_floor
    )
    return int(last), bool(int(proof)), int(floor)


def _shard_number(backend: RedisEngine, keys: ShardKeys) -> int:
    return backend.layout.shard_keys.index(keys)


async def _head(backend: RedisEngine, keys: ShardKeys, counter: Any) -> int:
    """The last position handed out, from the counter's value (read with the marker);
    a missing counter is a new feed, one lost alone (its stream's last id says where
    it was), or one lost with its stream (:class:`~statekeeper.errors.FeedLost`)."""
    if isinstance(counter, BaseException):
        raise counter
    if counter is not None:
        return int(counter)
    if not backend._identity.checks(_shard_number(backend, keys)):
        return 0  # (an evictable copy, or a store without proof entries: as before)
    last, proof, floor = await _probe(backend, keys)
    if last > 0:
        return last
    if proof or floor > 0:
        raise backend._identity.feed_counter_lost(_shard_number(backend, keys))
    return 0


async def _check_contiguous(
    backend: RedisEngine,
    keys: ShardKeys,
    after: int,
    counter: Any,
    entries: Sequence[tuple[bytes, dict[bytes, bytes]]],
) -> None:
    """Raise :class:`~statekeeper.errors.FeedLost` when positions above the floor,
    after ``after`` and at most the counter (read BEFORE the entries), are missing from
    ``entries`` (the first page after ``after``): see the module documentation."""
    head = await _head(backend, keys, counter)
    if counter is None:
        return  # (the head read after the entries: not a bound for them)
    first = _position(entries[0][0]) if entries else head + 1
    if first <= after + 1 or head <= after:
        return  # (the common case: nothing more is read)
    if not backend._identity.checks(_shard_number(backend, keys)):
        return
    _, _, floor = await _probe(backend, keys)
    low = max(after, floor)
    through = min(first - 1, head)
    if through > low:
        raise backend._identity.feed_entries_lost(_shard_number(backend, keys), low, through)


async def read_feed(
    backend: RedisEngine, keys: ShardKeys, after: int, limit: int
) -> list[FeedRecord]:
    """Up to ``limit`` events of one shard after ``after`` (:func:`read_feed_page`)."""
    return (await read_feed_page(backend, keys, after, limit, None))[0]


async def read_feed_page(
    backend: RedisEngine, keys: ShardKeys, after: int, limit: int, meta: bytes | None
) -> tuple[list[FeedRecord], bytes | None]:
    """Up to ``limit`` events of one shard after ``after``: its entries (XRANGE,
    exclusive start) resolved to their events, page after page past entries that are
    gaps (a page of nothing but a deleted or expired agent's entries was returned as
    ``[]``: a subscriber stopped there, its catch-up ended without the events after
    it, and a live one read it again for ever).

    With ``meta`` (the meta hash, on the same server as the shard: not a cluster), the
    feed's id too, read by an ``HGET`` after the ``XRANGE`` on the same connection (one
    round trip; Redis runs them in order): a restore renews the id before it writes, so
    a page holding one of its entries comes with the new id (None: an empty page)."""
    while True:
        marked = None
        if backend.wait_replicas:
            counter, entries, marked = await _replicated_entries(backend, keys, after, limit, meta)
        else:
            async with backend._client.pipeline(transaction=False) as pipe:
                pipe.get(keys.feed_counter)  # (before the entries: see _check_contiguous)
                pipe.xrange(keys.feed_stream, min=f"(0-{after}", max="+", count=limit)
                pipe.get(keys.epoch)
                if meta is not None:
                    pipe.hget(meta, b"feed_id")  # (after the entries: see above)
                counter, found, marker, *id_of = await pipe.execute()
            backend._identity.check(keys, marker)
            entries = _entries(found)
            marked = id_of[0] if id_of else None
        await _check_contiguous(backend, keys, after, counter, entries)
        if not entries:
            return [], None
        out = await _resolved(backend, keys, entries)
        if out or len(entries) < limit:
            return out, (marked if out else None)
        after = _position(entries[-1][0])


async def _resolved(
    backend: RedisEngine, keys: ShardKeys, entries: Sequence[tuple[bytes, dict[bytes, bytes]]]
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
    backend: RedisEngine, keys: ShardKeys, after: int, limit: int, meta: bytes | None
) -> tuple[Any, Sequence[tuple[bytes, dict[bytes, bytes]]], bytes | None]:
    """The entries after ``after`` that ``wait_replicas`` replicas hold: the XRANGE,
    then the shard's replication barrier (a write to its ``sync`` counter and
    ``WAIT``) on the same connection to its master. When there are entries and the
    replicas do not confirm in time, :class:`~statekeeper.errors.FeedNotReplicated`:
    a live subscriber waits and reads again, a catch-up fails instead of ending short.
    A subscriber thus never takes an entry a failover can still lose; otherwise its
    cursor could pass a position the promoted replica never saw and then hands out
    again, to another event."""
    ms = max(1, round(backend.wait_timeout * 1000))
    replies = await on_node(
        backend._client,
        keys.sync,
        [
            ("GET", keys.feed_counter),  # (before the entries: see _check_contiguous)
            ("XRANGE", keys.feed_stream, f"(0-{after}", "+", "COUNT", limit),
            ("GET", keys.epoch),
            ("INCRBY", keys.sync, 0),
            ("WAIT", backend.wait_replicas, ms),
            *((("HGET", meta, b"feed_id"),) if meta is not None else ()),
        ],
    )
    counter, found, marker, _, acked, *id_of = replies
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
    marked = id_of[0] if id_of else None
    if isinstance(marked, BaseException):
        raise marked
    return counter, entries, marked


async def feed_bounds(backend: RedisEngine, keys: ShardKeys) -> tuple[int, int]:
    async with backend._client.pipeline(transaction=False) as pipe:
        pipe.get(keys.feed_counter)
        pipe.get(keys.feed_floor)
        pipe.get(keys.epoch)
        head, floor, marker = await pipe.execute()
    backend._identity.check(keys, marker)
    low = int(floor or 0)
    return low, max(await _head(backend, keys, head), low)


async def trim_feed(backend: RedisEngine, keys: ShardKeys, through: int) -> int:
    """Drop the entries ``<= through`` and raise the floor (``lua/trim_feed.lua``: one
    script, guarded by the shard's identity marker: a trim computed from the positions
    of a store that lost its data must not trim the feed of the one there now)."""
    stream, args = backend._guarded(
        [keys.feed_stream, keys.feed_floor], [f"0-{through + 1}", str(through)], (keys,)
    )
    return int(await backend._trim_feed_script(keys=stream, args=args))


#: entries read at a time by :func:`feed_positions`, newest first
_SCAN = 1000


async def feed_position(
    backend: RedisEngine, keys: ShardKeys, agent_id: str, seq: int
) -> int | None:
    """The position of ``agent_id``'s event ``seq`` in one shard's feed (see
    :func:`feed_positions`: the newest match, read back to the floor), None when it is
    not there. The stream has no index by agent: retention asks for a page at once."""
    return (await feed_positions(backend, keys, [(agent_id, seq)])).get((agent_id, seq))


async def feed_positions(
    backend: RedisEngine, keys: ShardKeys, wanted: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The positions of many ``(agent_id, seq)`` events of one shard (those found), in
    ONE pass from the newest entry back until all are found or the floor is reached
    (:func:`feed_position` per agent reads back to each event again)."""
    todo = {(a.encode(), str(s).encode()): (a, s) for a, s in wanted}
    found: dict[tuple[str, int], int] = {}
    if not todo:
        return found
    floor = int(await backend._client.get(keys.feed_floor) or 0)
    top = "+"
    while todo:
        page = _entries(
            await backend._client.xrevrange(
                keys.feed_stream, max=top, min=f"(0-{floor}", count=_SCAN
            )
        )
        for entry_id, fields in page:
            key = todo.pop((fields.get(b"a", b""), fields.get(b"s", b"")), None)
            if key is not None:  # (the newest match: a deleted stream's are older)
                found[key] = _position(entry_id)
        if len(page) < _SCAN:
            break
        top = f"(0-{_position(page[-1][0])}"
    return found


async def wait_feed(backend: RedisEngine, keys: ShardKeys, after: int, max_wait: float) -> None:
    ms = max(1, round(max_wait * 1000))
    await backend._client.xread({keys.feed_stream: f"0-{after}"}, count=1, block=ms)


async def all_feed_bounds(backend: RedisEngine) -> list[tuple[int, int]]:
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
    for k, keys in enumerate(shards):
        low = int(found[2 * k + 1] or 0)
        out.append((low, max(await _head(backend, keys, found[2 * k]), low)))
    return out


async def keeps_feed(client: Any, layout: Layout) -> bool:
    """Whether the store keeps a change feed: it has handed out positions, on any shard
    (its counter past 0, its stream, a floor, or the index's feed proof entry). A writer
    without the feed (``feed=False``) would leave its events out of it, and the feed's
    followers would miss them without a gap to see. (A counter at 0 only — a backend
    with the feed opened the store and wrote nothing, a look at it — does not count.)"""
    async with client.pipeline(transaction=False) as pipe:
        for keys in layout.shard_keys:
            pipe.get(keys.feed_counter)
            pipe.get(keys.feed_floor)
            pipe.exists(keys.feed_stream)
            pipe.zscore(keys.index, b"\0f")
        found = await pipe.execute()
    for k in range(0, len(found), 4):
        counter, floor, stream, proof = found[k : k + 4]
        if int(counter or 0) > 0 or int(floor or 0) > 0 or int(stream) or proof is not None:
            return True
    return False
