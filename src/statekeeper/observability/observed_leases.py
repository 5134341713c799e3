"""The lease calls of :class:`~.observed.ObservedBackend` (acquire, renew, release, read,
list), each timed and counted like every engine call: a part of the wrapper kept in its
own module so that each stays small."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..records import LeaseInfo

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .instrumentation import Instrumentation

__all__ = ["LeaseCalls"]


class LeaseCalls:
    """The lease half of the engine wrapper: ``inner`` is the wrapped engine, ``_obs``
    the instrumentation the calls report to (both set by the wrapper)."""

    inner: Backend
    _obs: Instrumentation

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        lease: LeaseInfo = await self._obs.call(
            "acquire_lease", agent_id, self.inner.acquire_lease, agent_id, holder, ttl
        )
        return lease

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        lease: LeaseInfo = await self._obs.call(
            "renew_lease", agent_id, self.inner.renew_lease, agent_id, holder, token, ttl
        )
        return lease

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        done: bool = await self._obs.call(
            "release_lease", agent_id, self.inner.release_lease, agent_id, holder, token
        )
        return done

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        done: bool = await self._obs.call(
            "release_lease", agent_id, self.inner.release_lease_again, agent_id, holder, token
        )
        return done

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        lease: LeaseInfo | None = await self._obs.call(
            "get_lease", agent_id, self.inner.get_lease, agent_id
        )
        return lease

    async def next_lease_token(self, agent_id: str, current: LeaseInfo | None) -> int:
        # (not a call of its own: the engine's rule, at most a read it counts itself)
        return await self.inner.next_lease_token(agent_id, current)

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        leases: list[LeaseInfo] = await self._obs.call(
            "list_leases", None, self.inner.list_leases, after, limit
        )
        return leases

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        await self._obs.call("carry_lease_tokens", None, self.inner.carry_lease_tokens, tokens)
