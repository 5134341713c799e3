"""The agents' listing and counts (each shard's index, ordered by id, merged), and the
agents whose events no index lists (:mod:`.orphans`)."""

from __future__ import annotations

from ...records import AgentInfo
from ..base import prefix_end
from .engine import RedisEngine
from .identity import PROOF
from .orphans import orphaned_events

__all__ = ["RedisListing"]


class RedisListing(RedisEngine):
    """The agents' listing and counts (a part of :class:`~.backend.RedisBackend`)."""

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
        # (the index's own entries sort before "\x01")
        return await self._count_index(b"[\x01", b"+")

    async def count_prefix(self, prefix: str) -> int:
        if not self._reached:  # (as count_agents)
            await self._retrying("count_agents", self.open)
        if self.ttl is not None or not prefix:  # (expired index entries: see above)
            return await super().count_prefix(prefix) if prefix else await self.count_agents()
        return await self._count_index(b"[" + prefix.encode(), b"(" + prefix_end(prefix).encode())

    async def _count_index(self, low: bytes, high: bytes) -> int:
        """The entries of the shards' agent indexes between ``low`` and ``high``
        (ZLEXCOUNT's bounds), with the store's proofs and markers checked in the same
        pipeline: what :meth:`count_agents` and :meth:`count_prefix` count."""

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
