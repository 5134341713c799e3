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

Sharding later (Redis Cluster, issue 17 item 3): the stream and its counter live in
one hash slot, and every append touches them, so on a cluster the feed would be split
into N buckets: an agent's keys and its bucket's stream and counter share a hash tag
(``{<prefix>b<k>}`` with ``k = crc16(agent) % N``), positions are per bucket, and a
subscriber follows the N streams with a vector of N positions (each bucket in order;
no order across buckets, as on any sharded log). ``read_feed``'s single integer
position is the N = 1 case of that vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ...records import FeedRecord

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["FeedKeys", "read_feed"]


class FeedKeys:
    """The feed's key names under a prefix."""

    def __init__(self, prefix: bytes) -> None:
        self.stream = prefix + b"feed"
        self.counter = prefix + b"feed:n"
        self.floor = prefix + b"feed:floor"


def _position(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[1])


async def read_feed(backend: RedisBackend, after: int, limit: int) -> list[FeedRecord]:
    """Entries after ``after`` (XRANGE, exclusive start), resolved to their events."""
    from .backend import _unpack_event

    keys = backend._feed_keys
    client = backend._client
    entries = cast(
        "Sequence[tuple[bytes, dict[bytes, bytes]]]",
        await client.xrange(keys.stream, min=f"(0-{after}", max="+", count=limit),
    )
    if not entries:
        return []
    async with client.pipeline(transaction=False) as pipe:
        for _, fields in entries:
            h, _ = backend._keys(fields[b"a"].decode())
            pipe.hmget(h, [b"i", b"e:" + fields[b"s"]])
        found: list[Any] = await pipe.execute()
    out: list[FeedRecord] = []
    for (entry_id, fields), (incarnation, blob) in zip(entries, found, strict=True):
        if blob is None or incarnation != fields[b"i"]:
            continue  # deleted, expired or re-created since
        seq = int(fields[b"s"])
        out.append(FeedRecord(_position(entry_id), fields[b"a"].decode(), _unpack_event(seq, blob)))
    return out


async def feed_bounds(backend: RedisBackend) -> tuple[int, int]:
    keys = backend._feed_keys
    head, floor = await backend._client.mget([keys.counter, keys.floor])
    low = int(floor or 0)
    return low, max(int(head or 0), low)


async def trim_feed(backend: RedisBackend, through: int) -> int:
    keys = backend._feed_keys
    async with backend._client.pipeline(transaction=True) as pipe:
        pipe.xtrim(keys.stream, minid=f"0-{through + 1}", approximate=False)
        pipe.eval(
            "local f = tonumber(redis.call('GET', KEYS[1]) or '0')"
            " if tonumber(ARGV[1]) > f then redis.call('SET', KEYS[1], ARGV[1]) end return 0",
            1,
            keys.floor,
            str(through),
        )
        dropped, _ = await pipe.execute()
    return int(dropped)


async def wait_feed(backend: RedisBackend, after: int, max_wait: float) -> None:
    ms = max(1, round(max_wait * 1000))
    await backend._client.xread({backend._feed_keys.stream: f"0-{after}"}, count=1, block=ms)
