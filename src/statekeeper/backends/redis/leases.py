"""Leases: one hash per agent (never expires, kept by delete_agent: tokens only grow);
expiry on the Redis server's clock; the fence is checked inside the append script."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ...errors import LeaseHeld, LeaseLost
from ...records import LeaseInfo
from ..base import validate_ttl
from .engine import RedisEngine
from .lease_replicas import warn_unreplicated_tokens

__all__ = ["RedisLeases"]


class RedisLeases(RedisEngine):
    """Leases (a part of :class:`~.backend.RedisBackend`)."""

    @staticmethod
    def _lease(agent_id: str, reply: Any) -> LeaseInfo:
        return LeaseInfo(agent_id, bytes(reply[1]).decode(), int(reply[2]), float(reply[3]))

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return await self._write(
                agent_id, self._acquire_script, [key], [holder.encode(), repr(ttl)]
            )

        reply = await self._retrying("acquire_lease", op)
        if int(reply[0]) == 0:
            raise LeaseHeld(agent_id, bytes(reply[1]).decode(), float(reply[3]))
        await self._granted()
        return self._lease(agent_id, reply)

    async def _granted(self) -> None:
        """After the backend's first lease grant: warn when the master has replicas
        this backend does not wait for (see :mod:`.lease_replicas`)."""
        if not self._tokens_checked:
            self._tokens_checked = True
            await warn_unreplicated_tokens(self._client, self.url)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        self._check_can_write()
        ttl = validate_ttl(ttl)
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return await self._write(
                agent_id, self._renew_script, [key], [holder.encode(), str(token), repr(ttl)]
            )

        reply = await self._retrying("renew_lease", op)
        if int(reply[0]) == 0:
            current = bytes(reply[1]).decode() or None
            raise LeaseLost(agent_id, holder, token, int(reply[2]), current)
        return self._lease(agent_id, reply)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 0)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        return await self._release_lease(agent_id, holder, token, 1)

    async def _release_lease(self, agent_id: str, holder: str, token: int, tries: int) -> bool:
        """``tries``: 1 when an earlier call's try may have released the lease."""
        self._check_can_write()
        key = self._lease_key(agent_id)

        async def op() -> Any:
            # a try after a failed one may follow a release that was applied but whose
            # reply was lost: it says so (``again``), and the script then answers 1 for
            # the lease released with this token instead of "not the current lease"
            nonlocal tries
            tries += 1
            again = "1" if tries > 1 else "0"  # (a call sent again starts at 1)
            return await self._write(
                agent_id, self._release_script, [key], [holder.encode(), str(token), again]
            )

        return bool(await self._retrying("release_lease", op))

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        self._check_can_write()

        async def one(agent_id: str, token: int) -> None:
            key = self._lease_key(agent_id)

            async def op() -> Any:
                return await self._write(agent_id, self._carry_script, [key], [str(token)])

            await self._retrying("carry_lease_tokens", op)

        # each lease its own key (its own shard): one script per agent, 64 at a time
        for start in range(0, len(tokens), 64):
            await asyncio.gather(*(one(a, t) for a, t in tokens[start : start + 64]))

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        self._check_open()
        key = self._lease_key(agent_id)

        async def op() -> Any:
            return (await self._checked(agent_id, [("HMGET", key, b"o", b"n", b"x")]))[0]

        holder, token, expiry = await self._retrying("get_lease", op)
        if token is None:
            return None
        return LeaseInfo(
            agent_id,
            bytes(holder).decode() if holder is not None else None,
            int(token),
            float(expiry),
        )
