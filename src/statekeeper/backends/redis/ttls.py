"""Expiry: the store's TTL (recorded in its meta hash, taken at open, changed by
``change_store_ttl``), an agent's own (``set_ttl``), holds that keep agents from
expiring (``hold_keys``)."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from . import meta
from .engine import RedisEngine
from .eviction import check_eviction
from .keys import AgentKeys

__all__ = ["RedisTtls"]


class RedisTtls(RedisEngine):
    """Expiry (a part of :class:`~.backend.RedisBackend`)."""

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

    @property
    def expires_agents(self) -> bool:
        return self.ttl is not None
