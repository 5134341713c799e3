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

What the marker cannot see — one agent's keys evicted (an ``allkeys-*`` policy set at
run time: see :mod:`.eviction`), deleted (``DEL``) or expired (a stray ``EXPIRE``) while
the marker stays — the agent index proves (``lua/presence.lua``): each shard's index
lists every stored agent (an append adds it, a delete takes it off in the same script)
and carries a proof entry, ``"\0"`` (no agent id can start with it), which shows the
index is whole (Redis evicts, deletes and expires whole keys). An agent whose hash holds
no head while the index lists it lost its data: :class:`~statekeeper.errors.AgentLost`
(unless the agent may expire: the store's ``ttl``, or its own, marked ``"\0t:<agent>"``
in the index by :meth:`~.backend.RedisBackend.set_ttl`); an index without its proof
entry: :class:`~statekeeper.errors.StoreLost`. The check runs only where a hash holds
no head (a new agent, a deleted or lost one), so a stored agent's save or load pays
nothing for it. The backend adds the proof entry when it opens the store (a store
written before it: the index is then rebuilt from the agents' hashes, which also
repairs an index lost before; see :meth:`Identity.adopt`).

What none of this can see: a loss before the backend opened the store (there is
nothing to compare with: the store is then what the server holds), and an agent lost
together with its index entry while the index stays (not one eviction or ``DEL``: Redis
removes whole keys). A backend holding copies only (``evictable``: a tiered backend's
hot tier, whose missing agents are read again from the durable tier) does not check.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from ...errors import AgentLost, FeedLost, StoreLost
from .keys import Layout, ShardKeys

__all__ = ["Identity"]

#: how ``lua/guard.lua`` starts its error reply
LOST = "STATEKEEPER_STORE_LOST "

#: how ``lua/append_write.lua`` starts its error reply for a feed that lost its counter
FEED_LOST = "STATEKEEPER_FEED_LOST "
#: how ``lua/presence.lua`` starts its error reply for an agent
AGENT_LOST = "STATEKEEPER_AGENT_LOST "
#: the agent index's proof entry (``lua/presence.lua``); ``PROOF + b"t:" + agent``
#: marks an agent with a TTL of its own
PROOF = b"\0"

#: the agent index's feed proof entry: the shard's feed has handed out positions
#: (``lua/append_write.lua``, ``feed_take``)
FEED_PROOF = b"\0f"

#: KEYS: marker, agent index, feed counter, feed stream, feed floor. ARGV: a new token,
#: create 1|0, feed 1|0. Reply: {the marker's token (set to ARGV[1] when missing and
#: create) or false, the index has its proof entry 1|0, the proof entry was added 1|0}.
#: With create, a feed that has handed out positions gets its proof entry (a store
#: written before it, or an index rebuilt: see :meth:`Identity.adopt`), and a feed that
#: has not its counter, at 0 (so that the feed's reads find a missing one lost, without
#: a look at the stream on every read of a shard nobody wrote to: see :mod:`.feed`).
_ADOPT = """
local v = redis.call('GET', KEYS[1])
if not v and ARGV[2] == '1' then
  redis.call('SET', KEYS[1], ARGV[1])
  v = ARGV[1]
end
if ARGV[2] == '1' then
  if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 or redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('ZADD', KEYS[2], 0, '\\0f')
  elseif ARGV[3] == '1' and not redis.call('ZSCORE', KEYS[2], '\\0f')
      and tonumber(redis.call('GET', KEYS[5]) or '0') == 0 then
    redis.call('SET', KEYS[3], '0')
  end
end
if redis.call('ZSCORE', KEYS[2], '\\0') then return {v, 1, 0} end
if ARGV[2] ~= '1' then return {v, 0, 0} end
redis.call('ZADD', KEYS[2], 0, '\\0')
return {v, 1, 1}
"""
#: KEYS: hash, agent index. ARGV: agent. Lists the agent if its hash is stored (an index
#: rebuilt from the hashes: a delete between the scan and this call is not undone).
_REINDEX = (
    "if redis.call('HEXISTS', KEYS[1], 'h') == 1 then "
    "redis.call('ZADD', KEYS[2], 0, ARGV[1]) end return 0"
)

#: KEYS: hash, agent index. ARGV: agent. Takes the agent off the index if its hash holds
#: no stream: an index being proven for the first time keeps no entry for an agent
#: whose keys went before (an expiry under a ``ttl`` of a version that recorded it
#: nowhere, a loss nothing could see), or each would be reported lost from then on.
_UNLIST = (
    "if redis.call('HEXISTS', KEYS[1], 'h') == 0 then "
    "redis.call('ZREM', KEYS[2], ARGV[1]) end return 0"
)


class Identity:
    """The tokens a backend adopted, one per shard (None: not checked), and the checks."""

    def __init__(self, layout: Layout, location: str) -> None:
        self.layout = layout
        self.location = location
        self.tokens: list[bytes | None] = [None] * len(layout.shard_keys)
        #: per shard: its index carries the proof entry (presence is checked)
        self.proven: list[bool] = [False] * len(layout.shard_keys)
        self._shard_of = {keys.epoch: k for k, keys in enumerate(layout.shard_keys)}
        #: per shard (by marker key): what a script on that shard alone appends to its
        #: KEYS and ARGV, made once (:meth:`guard` is on every script call's path)
        self.tails: dict[bytes, tuple[list[bytes], list[bytes | str]]] = {}
        #: the same by shard number
        self.tail_of: list[tuple[list[bytes], list[bytes | str]]] = []
        self._made_tails()

    def _made_tails(self) -> None:
        self.tail_of = [
            ([keys.epoch], [token, "1" if proven else "0", "1"])
            if token is not None
            else ([], ["0", "0"])
            for keys, token, proven in zip(
                self.layout.shard_keys, self.tokens, self.proven, strict=True
            )
        ]
        self.tails = {
            keys.epoch: tail
            for keys, tail in zip(self.layout.shard_keys, self.tail_of, strict=True)
        }

    async def adopt(self, client: Any, *, create: bool, feed: bool = True) -> list[ShardKeys]:
        """Read every shard's marker and its index's proof entry, creating the missing
        ones when ``create`` (else a missing marker leaves its shard unchecked, and a
        missing proof entry its agents' presence: a read-only backend writes nothing);
        returns the shards whose marker this call created.

        A proof entry added to the index of a store that existed (one written before
        proof entries, or whose index was lost before this open) comes with the index
        rebuilt from the agents' hashes (a ``SCAN``, once), so no stored agent is left
        out of the listings from then on."""
        shards = self.layout.shard_keys
        proposed = [secrets.token_hex(16).encode() for _ in shards]
        async with client.pipeline(transaction=False) as pipe:
            for keys, token in zip(shards, proposed, strict=True):
                if create:
                    pipe.eval(
                        _ADOPT,
                        5,
                        keys.epoch,
                        keys.index,
                        keys.feed_counter,
                        keys.feed_stream,
                        keys.feed_floor,
                        token,
                        "1",
                        "1" if feed else "0",
                    )
                else:  # (no script: a read-only backend may be on a replica)
                    pipe.get(keys.epoch)
                    pipe.zscore(keys.index, PROOF)
            replies = await pipe.execute()
        if create:
            found = replies
        else:
            found = [
                [replies[i], int(replies[i + 1] is not None), 0] for i in range(0, len(replies), 2)
            ]
        self.tokens = [bytes(v[0]) if v[0] else None for v in found]
        self.proven = [bool(int(v[1])) for v in found]
        created = [
            k for k, mine, got in zip(shards, proposed, self.tokens, strict=True) if got == mine
        ]
        for keys, row in zip(shards, found, strict=True):
            # (a marker this call created: a new store, or one written before markers,
            # whose index lists its agents: the latter is rebuilt too)
            if int(row[2]) and (
                keys not in created
                or await client.zrangebylex(keys.index, b"[\x01", b"+", start=0, num=1)
            ):
                await self._reindex(client, keys)
        self._made_tails()
        return created

    async def _reindex(self, client: Any, keys: ShardKeys) -> None:
        """List every agent whose hash the shard holds in its index, and no other (see
        :meth:`adopt`)."""
        head = keys.base + b"a:"
        pattern = b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in head)
        batch: list[bytes] = []

        async def flush() -> None:
            async with client.pipeline(transaction=False) as pipe:
                for key in batch:
                    pipe.eval(_REINDEX, 2, key, keys.index, key[len(head) :])
                await pipe.execute()
            batch.clear()

        async for key in client.scan_iter(match=pattern + b"*", count=1000):
            batch.append(bytes(key))
            if len(batch) >= 500:
                await flush()
        if batch:
            await flush()
        # and the entries whose agent's keys are gone taken off: what the store held
        # before it was proven is what the server holds now (an agent a version before
        # stored with a ttl, expired since, was reported lost: every listing refused)
        gone: list[bytes] = []

        async def unlist() -> None:
            async with client.pipeline(transaction=False) as pipe:
                for member in gone:
                    pipe.eval(_UNLIST, 2, head + member, keys.index, member)
                await pipe.execute()
            gone.clear()

        async for member, _ in client.zscan_iter(keys.index, count=1000):
            member = bytes(member)
            if member[:1] == PROOF:  # (the proof entries, the own-ttl marks)
                continue
            gone.append(member)
            if len(gone) >= 500:
                await unlist()
        if gone:
            await unlist()

    def guard(self, shards: Sequence[ShardKeys]) -> tuple[list[bytes], list[bytes | str]]:
        """What a script call appends to its KEYS and ARGV for ``lua/guard.lua`` to check
        the markers of ``shards`` (the shards whose keys it touches)."""
        if len(shards) == 1:
            return self.tails[shards[0].epoch]
        keys: list[bytes] = []
        args: list[bytes | str] = []
        seen: set[bytes] = set()
        proven = True
        for shard in shards:
            k = self._shard_of[shard.epoch]
            token = self.tokens[k]
            proven = proven and self.proven[k]
            if token is None or shard.epoch in seen:
                continue
            seen.add(shard.epoch)
            keys.append(shard.epoch)
            args.append(token)
        args += ["1" if proven and keys else "0", str(len(keys))]
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
        """The :class:`StoreLost` (or :class:`AgentLost`) a script's error reply means,
        or None (another error)."""
        text = str(exc)
        if not isinstance(exc, ResponseError):
            return None
        if text.startswith(FEED_LOST):
            key = text[len(FEED_LOST) :].split(" ", 2)[1].encode()
            k = next((k for k, s in enumerate(self.layout.shard_keys) if s.feed_counter == key), 0)
            return self.feed_counter_lost(k)
        if text.startswith(AGENT_LOST):
            agent = bytes.fromhex(text[len(AGENT_LOST) :].split(" ", 1)[0]).decode()
            return self.agent_lost(agent)
        if not text.startswith(LOST):
            return None
        how, _, rest = text[len(LOST) :].partition(" ")
        key = rest.split(" ", 1)[0].encode()
        if how == "index":
            k = next((k for k, s in enumerate(self.layout.shard_keys) if s.index == key), 0)
            return self._lost(k, how)
        return self._lost(self._shard_of.get(key, 0), how)

    def agent_lost(self, agent_id: str) -> AgentLost:
        """The error for an agent the index lists whose hash holds no head."""
        return AgentLost(
            self.location,
            agent_id,
            "the agent index lists it but its keys are gone: evicted (a maxmemory with an "
            "allkeys-* policy), deleted (DEL) or expired (an EXPIRE outside the store's ttl)",
        )

    def feed_counter_lost(self, shard: int) -> FeedLost:
        """The error for a feed that handed out positions and lost its counter and its
        stream (``lua/append_write.lua``, :mod:`.feed`)."""
        keys = self.layout.shard_keys[shard]
        return FeedLost(
            self.location,
            "counter",
            f"its counter {keys.feed_counter.decode(errors='replace')!r} and its stream are "
            "gone (evicted by a maxmemory with an allkeys-* policy, or deleted) while its "
            "proof entry or floor says it handed out positions, so the last one is unknown "
            "and a new position could repeat one a subscriber holds: appends are refused",
            f"set the counter above every position handed out (SET "
            f"{keys.feed_counter.decode(errors='replace')} N), then trim the feed through "
            "N (store.trim_feed) so that subscribers behind it are told to rebuild "
            "(FeedPositionCompacted)",
            shard=shard if len(self.tokens) > 1 else None,
        )

    def feed_entries_lost(self, shard: int, after: int, through: int) -> FeedLost:
        """The error for positions ``after + 1 .. through`` gone from a feed's stream
        though never trimmed (see :mod:`.feed`)."""
        keys = self.layout.shard_keys[shard]
        return FeedLost(
            self.location,
            "entries",
            f"positions {after + 1}..{through} were never trimmed (the floor is below "
            f"them) but are gone from its stream {keys.feed_stream.decode(errors='replace')!r}"
            " (evicted by a maxmemory with an allkeys-* policy, or deleted): their events "
            "cannot be delivered in feed order",
            f"record the loss with store.trim_feed({through}) (a subscriber behind it is "
            "then told to rebuild: FeedPositionCompacted), or rebuild this subscriber from "
            f"the agents' current state and subscribe again from position {through}",
            after=after,
            through=through,
            shard=shard if len(self.tokens) > 1 else None,
        )

    def checks(self, shard: int) -> bool:
        """Whether losses in ``shard`` are looked for: its marker adopted and its index
        proven (not an evictable copy, nor a read-only backend of a store without
        proof entries)."""
        return self.tokens[shard] is not None and self.proven[shard]

    def missing(
        self, shard: ShardKeys, agent_id: str, proof: Any, listed: Any, own_ttl: Any, *, ttl: bool
    ) -> None:
        """The Python side of ``lua/presence.lua`` for a plain read that found no head:
        ``proof``, ``listed`` and ``own_ttl`` are the index's scores of its proof entry,
        of the agent and of its own-ttl mark (read by the same pipeline); ``ttl``: the
        store's agents expire."""
        k = self._shard_of[shard.epoch]
        if not self.proven[k] or self.tokens[k] is None:
            return
        if proof is None:
            raise self._lost(k, "index")
        if listed is not None and not ttl and own_ttl is None:
            raise self.agent_lost(agent_id)

    def _lost(self, shard: int, how: str) -> StoreLost:
        if how == "index":
            reason = (
                "its agent index is gone (evicted by a maxmemory with an allkeys-* policy, "
                "or deleted): the listings would leave its agents out, and a new agent "
                "cannot be told from a lost one. (Or, the index still listing the agents, "
                "its proof entry was taken off by the listing of a statekeeper from before "
                "proof entries still running on the store, which takes it for an expired "
                "agent: stop every such process, then open the store again; every process "
                "of a store must run a version with proof entries)"
            )
            return StoreLost(self.location, reason, shard=shard if len(self.tokens) > 1 else None)
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
