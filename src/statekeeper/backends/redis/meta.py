"""The store's meta hash (``<prefix>meta``) and its copy in shard 0's agent index.

The meta hash holds what is true of the whole store: the store-level markers
(``marker:<name>``, such as ``encrypted``: :mod:`statekeeper.store.keyguard`), for a
sharded store its number of shards (``shards``: :mod:`.keys`), and for a store whose
agents expire its TTL (``ttl``, in ms: recorded by the first writable backend opened
with ``ttl=``, taken by every backend opened without one, so that an agent's expiry is
never taken for a loss: :func:`settle_ttl`). Lost on its own (evicted by an
``allkeys-*`` policy, or deleted) while the identity marker stays, a marker read as
"not set" would let a store without a key write in the clear into an encrypted store,
a sharded store opened without ``shards=`` (or with another number) would look empty,
its agents under keys of another layout, and the expiry of a ``ttl=`` store's agents
would pass for their loss.

So each fact is written twice: into the meta hash and, as an entry of shard 0's agent
index (which no listing shows: they sort before every agent id, as its proof entry
does), ``"\\0m:<name>"`` per marker, ``"\\0s:<N>"`` for the shards and ``"\\0d:<ms>"``
for the TTL. Markers are only ever set, so a marker either copy holds is set
(:func:`read_marker`: the loss of either is harmless), and the open of a writable
backend puts back what one copy lacks (:func:`copy_meta`). A prefix whose meta hash
has no ``shards`` is looked at where a sharded store keeps its shard 0
(:func:`sharded_here`: the hash tag of shard 0 is one of a few, whatever the number of
shards) before it is opened in another layout. Both copies lost (the index too) is
found by the index's proof entry (:mod:`.identity`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from .identity import PROOF
from .keys import Layout

__all__ = [
    "copy_meta",
    "read_marker",
    "set_marker",
    "set_ttl",
    "settle_ttl",
    "shard0_tags",
    "sharded_here",
]

#: a marker's copy in shard 0's index: ``MARK + name``
MARK = b"\0m:"
#: the number of shards' copy: ``SHARDS + b"%d" % n``
SHARDS = b"\0s:"
#: the store's TTL's copy: ``TTL + b"%d" % ms``
TTL = b"\0d:"


@cache
def shard0_tags() -> tuple[bytes, ...]:
    """Every hash tag shard 0 can have (:func:`.keys.shard_tag`, whatever the number of
    shards, 1 to 4096): the ``"0.j"`` whose slot is lower than every ``"0.i"`` before
    it, down to the range of the most shards."""
    out: list[bytes] = []
    low = REDIS_CLUSTER_HASH_SLOTS
    j = 0
    while low >= REDIS_CLUSTER_HASH_SLOTS // 4096:
        tag = b"0.%d" % j
        slot = key_slot(tag)
        if slot < low:
            out.append(tag)
            low = slot
        j += 1
    return tuple(out)


async def read_marker(client: Any, layout: Layout, name: str) -> tuple[bool, bool]:
    """``(set, the index is whole)``: whether either copy holds the marker, and whether
    shard 0's index holds its proof entry (without it, a marker it lacks may be lost)."""
    index = layout.shard_keys[0].index
    async with client.pipeline(transaction=False) as pipe:
        pipe.hexists(layout.meta, b"marker:" + name.encode())
        pipe.zscore(index, MARK + name.encode())
        pipe.zscore(index, PROOF)
        there, copy, proof = await pipe.execute()
    return bool(there) or copy is not None, proof is not None


async def set_marker(client: Any, layout: Layout, name: str) -> None:
    """Set the marker in both copies."""
    await client.hset(layout.meta, b"marker:" + name.encode(), b"1")
    await client.zadd(layout.shard_keys[0].index, {MARK + name.encode(): 0})


async def copy_meta(client: Any, layout: Layout) -> None:
    """Put back what one copy lacks: the markers both ways, the shards and the TTL into
    the index (the meta hash records them itself when a backend opens the store: the
    TTL's copy in the index follows the meta hash's, :func:`settle_ttl`)."""
    index = layout.shard_keys[0].index
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(layout.meta)
        pipe.zrangebylex(index, b"[" + MARK, b"(" + MARK[:-1] + b";")
        pipe.zrangebylex(index, b"[" + TTL, b"(" + TTL[:-1] + b";")
        fields, copies, ttls = await pipe.execute()
    marks = {bytes(k)[len(b"marker:") :] for k in fields if bytes(k).startswith(b"marker:")}
    copied = {bytes(c)[len(MARK) :] for c in copies}
    entries = {MARK + name: 0 for name in marks - copied}
    if layout.shards is not None:
        entries[SHARDS + b"%d" % layout.shards] = 0
    ttl = fields.get(b"ttl")
    stale = [bytes(c) for c in ttls if ttl is None or bytes(c) != TTL + bytes(ttl)]
    if ttl is not None and len(stale) == len(ttls):
        entries[TTL + bytes(ttl)] = 0
    async with client.pipeline(transaction=False) as pipe:
        if entries:
            pipe.zadd(index, entries)
        if ttl is not None and stale:  # (a copy of a TTL changed since: set_ttl)
            pipe.zrem(index, *stale)
        for name in copied - marks:
            pipe.hset(layout.meta, b"marker:" + name, b"1")
        await pipe.execute()


async def sharded_here(client: Any, layout: Layout) -> dict[bytes, int | None]:
    """The sharded stores under the prefix, found by their shard 0 (its identity marker
    stored): its tag → its number of shards, from the index's copy (None: a store
    written before the copy)."""
    tags = shard0_tags()
    prefix = layout.prefix
    async with client.pipeline(transaction=False) as pipe:
        for tag in tags:
            base = prefix + b"{" + tag + b"}"
            pipe.exists(base + b"epoch")
            pipe.zrangebylex(base + b"agents", b"[" + SHARDS, b"(" + SHARDS[:-1] + b";")
        found = await pipe.execute()
    out: dict[bytes, int | None] = {}
    for k, tag in enumerate(tags):
        if int(found[2 * k]):
            copies = found[2 * k + 1]
            out[tag] = int(bytes(copies[0])[len(SHARDS) :]) if copies else None
    return out


async def settle_ttl(client: Any, layout: Layout, ms: int | None, *, write: bool) -> int | None:
    """The store's TTL in ms (None: its agents never expire), recording ``ms`` (the
    backend's ``ttl=``) as the store's when none is recorded and ``write``: the meta
    hash's value, else its copy in shard 0's index (the meta hash lost alone); a copy
    the meta hash lacks is put back there when ``write``. Two backends recording
    different TTLs at once: the first ``HSETNX`` wins, and both read it back."""
    index = layout.shard_keys[0].index
    async with client.pipeline(transaction=False) as pipe:
        pipe.hget(layout.meta, b"ttl")
        pipe.zrangebylex(index, b"[" + TTL, b"(" + TTL[:-1] + b";")
        there, copies = await pipe.execute()
    if there is not None:
        return int(there)
    copy = bytes(copies[0])[len(TTL) :] if copies else None
    if not write:
        return int(copy) if copy is not None else None
    value = copy if copy is not None else b"%d" % ms if ms is not None else None
    if value is None:
        return None
    await client.hsetnx(layout.meta, b"ttl", value)
    return int(await client.hget(layout.meta, b"ttl"))


async def set_ttl(client: Any, layout: Layout, ms: int) -> None:
    """Record ``ms`` as the store's TTL, in both copies (the old copy taken off)."""
    await client.hset(layout.meta, b"ttl", b"%d" % ms)
    await copy_meta(client, layout)


async def feed_id(client: Any, layout: Layout, fresh: bytes | None, renew: bool) -> Any:
    """The feed's id (``feed_id`` in the meta hash): ``fresh`` when there was none (or
    ``renew``); with ``fresh`` None (a read-only backend) what is there, or None. One
    copy only: a meta hash lost gives the feed a new id, and cursors taken before are
    refused (:class:`~statekeeper.errors.FeedChanged`), never resumed at other events."""
    if fresh is not None and renew:
        await client.hset(layout.meta, b"feed_id", fresh)
        return fresh
    found = await client.hget(layout.meta, b"feed_id")
    if found is not None or fresh is None:
        return found  # (the common case: one round trip, as a sharded live poll asks it)
    await client.hsetnx(layout.meta, b"feed_id", fresh)
    return await client.hget(layout.meta, b"feed_id")


def as_text(value: Any) -> str | None:
    """A meta hash value as text (None stays None)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
