"""The in-memory backend's leases: functions bound on
:class:`~statekeeper.backends.memory.MemoryBackend`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import LeaseHeld, LeaseLost
from ..records import (
    LeaseInfo,
)
from .base import (
    check_fence,
    validate_ttl,
)

if TYPE_CHECKING:
    from .memory import MemoryBackend


async def acquire_lease(self: MemoryBackend, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
    self._check()
    ttl = validate_ttl(ttl)
    now = self.clock()
    current = self._leases.get(agent_id)
    if (
        current is not None
        and current.holder is not None
        and current.holder != holder
        and current.expires_at > now
    ):
        raise LeaseHeld(agent_id, current.holder, current.expires_at)
    token = current.token + 1 if current is not None else 1
    lease = LeaseInfo(agent_id, holder, token, now + ttl)
    self._leases[agent_id] = lease
    return lease


async def renew_lease(
    self: MemoryBackend, agent_id: str, holder: str, token: int, ttl: float
) -> LeaseInfo:
    self._check()
    ttl = validate_ttl(ttl)
    check_fence(agent_id, (holder, token), self._leases.get(agent_id))
    lease = LeaseInfo(agent_id, holder, token, self.clock() + ttl)
    self._leases[agent_id] = lease
    return lease


async def release_lease(self: MemoryBackend, agent_id: str, holder: str, token: int) -> bool:
    self._check()
    try:
        check_fence(agent_id, (holder, token), self._leases.get(agent_id))
    except LeaseLost:
        return False
    self._leases[agent_id] = LeaseInfo(agent_id, None, token, 0.0)
    return True


async def get_lease(self: MemoryBackend, agent_id: str) -> LeaseInfo | None:
    self._check()
    return self._leases.get(agent_id)


async def carry_lease_tokens(self: MemoryBackend, tokens: Sequence[tuple[str, int]]) -> None:
    self._check()
    for agent_id, token in tokens:
        current = self._leases.get(agent_id)
        if current is None or current.token < token:
            self._leases[agent_id] = LeaseInfo(agent_id, None, token, 0.0)


async def list_leases(self: MemoryBackend, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
    self._check()
    ids = sorted(a for a in self._leases if a > after)[: max(limit, 0)]
    return [self._leases[a] for a in ids]
