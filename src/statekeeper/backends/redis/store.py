"""The store's own records and an agent's key names: the marker of a store
(``ensure_store``, ``initialize``), the feed's id, the store-level markers, the own-TTL
mark of an agent; the key names of an agent (all from :class:`.keys.Layout`) and the TTL
argument its scripts take."""

from __future__ import annotations

import secrets
from typing import Any

from ...arguments import INTERNAL_PREFIX
from ...errors import NotAStore, ReadOnlyStore
from . import meta
from .engine import RedisEngine
from .identity import PROOF
from .keys import AgentKeys

__all__ = ["RedisStore"]


class RedisStore(RedisEngine):
    """The store's own records and an agent's key names (a part of
    :class:`~.backend.RedisBackend`)."""

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
