"""The store's identity marker: how a Redis backend notices that the data under it is
gone — the server flushed (``FLUSHALL`` / ``FLUSHDB``), the store's keys deleted or
evicted, the server restarted without persistence — instead of carrying on as if the
agents had never existed (a cached agent's next save started it over at seq 1, its
history lost without an error; a feed subscriber waited for positions the reset
counter would hand out again, to other events).

Each shard (the whole store when plain) has a marker key, ``<base>epoch`` (see
:mod:`.keys`), holding a random token. A backend *adopts* the tokens when it opens the
store, creating a marker that is missing (a new store, or one written before markers
existed) with a token of its own. From then on:

* every script checks first that its shard's marker still holds the adopted token
  (``lua/guard.lua``): one ``GET`` inside the script — no extra command, no extra round
  trip;
* the plain reads (``HGET``/``HMGET``, the listings) and the feed's reads carry a
  ``GET`` of the marker in their pipeline, after their own commands (same round trip);

and a marker that is gone, or holds another token (the store was created again since,
by another process), raises :class:`~statekeeper.errors.StoreLost`. Nothing is written
by the operation that finds it, and every later operation of the backend finds it too.

What the marker cannot see: a loss before the backend opened the store (there is
nothing to compare with: the store is then what the server holds), and an agent's
keys evicted while the marker stays (an ``allkeys-*`` policy set at run time: see
:mod:`.eviction`, re-checked when a loss is found and on every reconnect). A backend
holding copies only (``evictable``: a tiered backend's hot tier, whose missing agents
are read again from the durable tier) does not check.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from ...errors import StoreLost
from .keys import Layout, ShardKeys

__all__ = ["Identity"]

#: how ``lua/guard.lua`` starts its error reply
LOST = "STATEKEEPER_STORE_LOST "

#: KEYS: marker. ARGV: a new token. The marker's token, set to ARGV[1] when missing.
_ADOPT = (
    "local v = redis.call('GET', KEYS[1]) if v then return v end "
    "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]"
)


class Identity:
    """The tokens a backend adopted, one per shard (None: not checked), and the checks."""

    def __init__(self, layout: Layout, location: str) -> None:
        self.layout = layout
        self.location = location
        self.tokens: list[bytes | None] = [None] * len(layout.shard_keys)
        self._shard_of = {keys.epoch: k for k, keys in enumerate(layout.shard_keys)}
        #: per shard (by marker key): what a script on that shard alone appends to its
        #: KEYS and ARGV, made once (:meth:`guard` is on every script call's path)
        self.tails: dict[bytes, tuple[list[bytes], list[bytes | str]]] = {}
        #: the same by shard number
        self.tail_of: list[tuple[list[bytes], list[bytes | str]]] = []
        self._made_tails()

    def _made_tails(self) -> None:
        self.tail_of = [
            ([keys.epoch], [token, "1"]) if token is not None else ([], ["0"])
            for keys, token in zip(self.layout.shard_keys, self.tokens, strict=True)
        ]
        self.tails = {
            keys.epoch: tail
            for keys, tail in zip(self.layout.shard_keys, self.tail_of, strict=True)
        }

    async def adopt(self, client: Any, *, create: bool) -> list[ShardKeys]:
        """Read every shard's marker, creating the missing ones when ``create`` (else a
        missing marker leaves its shard unchecked: a read-only backend writes nothing);
        returns the shards whose marker this call created."""
        shards = self.layout.shard_keys
        proposed = [secrets.token_hex(16).encode() for _ in shards]
        async with client.pipeline(transaction=False) as pipe:
            for keys, token in zip(shards, proposed, strict=True):
                if create:
                    pipe.eval(_ADOPT, 1, keys.epoch, token)
                else:
                    pipe.get(keys.epoch)
            found = await pipe.execute()
        self.tokens = [bytes(v) if v is not None else None for v in found]
        self._made_tails()
        return [
            k for k, mine, got in zip(shards, proposed, self.tokens, strict=True) if got == mine
        ]

    def guard(self, shards: Sequence[ShardKeys]) -> tuple[list[bytes], list[bytes | str]]:
        """What a script call appends to its KEYS and ARGV for ``lua/guard.lua`` to check
        the markers of ``shards`` (the shards whose keys it touches)."""
        if len(shards) == 1:
            return self.tails[shards[0].epoch]
        keys: list[bytes] = []
        args: list[bytes | str] = []
        seen: set[bytes] = set()
        for shard in shards:
            token = self.tokens[self._shard_of[shard.epoch]]
            if token is None or shard.epoch in seen:
                continue
            seen.add(shard.epoch)
            keys.append(shard.epoch)
            args.append(token)
        args.append(str(len(keys)))
        return keys, args

    def check(self, shard: ShardKeys, found: Any) -> None:
        """Raise :class:`StoreLost` unless ``found`` (the marker's value, read by a
        pipeline after its own commands) is the adopted token of ``shard``."""
        k = self._shard_of[shard.epoch]
        token = self.tokens[k]
        if token is None or found == token:
            return
        if isinstance(found, BaseException):
            raise found
        raise self._lost(k, "replaced" if found is not None else "gone")

    def lost(self, exc: BaseException) -> StoreLost | None:
        """The :class:`StoreLost` a script's error reply means, or None (another error)."""
        text = str(exc)
        if not isinstance(exc, ResponseError) or not text.startswith(LOST):
            return None
        how, _, key = text[len(LOST) :].partition(" ")
        return self._lost(self._shard_of.get(key.encode(), 0), how)

    def _lost(self, shard: int, how: str) -> StoreLost:
        if how == "replaced":
            reason = (
                "its identity marker holds another token: the store was emptied (FLUSHALL, "
                "FLUSHDB, its keys deleted, or the server restarted without persistence) "
                "and created again since"
            )
        else:
            reason = (
                "its identity marker is gone: the server was flushed (FLUSHALL, FLUSHDB), "
                "the store's keys were deleted or evicted, or the server restarted "
                "without persistence"
            )
        return StoreLost(self.location, reason, shard=shard if len(self.tokens) > 1 else None)
