"""An ``acquire`` whose grant committed but whose reply never came back: the engine
retried until its ``retry_timeout`` and gave up with ``BackendError`` (PostgreSQL and
Redis say "failed after retrying", ``maybe_applied`` False, whatever the first try
did). The grant stood: the lease was held for its whole TTL with no
:class:`~statekeeper.concurrency.leases.Lease` to release it, and the caller's retry
through another manager (a new default holder: one per ``LeaseManager``) was refused
by its own grant, ``LeaseHeld``, until the TTL ran out.

The manager now looks at the lease when a grant fails that way: a running lease of its
holder is the grant, recognised and handed over (one read, on that path only); else
the error is raised as before. (A lost reply the engine's own retry gets through is
granted again to the same holder: tests/backends/test_lease_acquire_lost_reply.py.)
"""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.concurrency.leases import LeaseManager
from statekeeper.errors import BackendError
from statekeeper.records import LeaseInfo


class GrantReplyLost(MemoryBackend):
    """The next ``acquire_lease`` is granted, then fails as an engine that lost its
    reply and gave up retrying (``applied`` False: it fails before granting)."""

    def __init__(self, *, applied: bool = True) -> None:
        super().__init__()
        self.applied = applied
        self.failures = 1

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        if self.failures and not self.applied:
            self.failures -= 1
            raise BackendError("memory acquire_lease failed: connection refused")
        info = await super().acquire_lease(agent_id, holder, ttl)
        if self.failures:
            self.failures -= 1
            raise BackendError(
                "memory acquire_lease failed after retrying for 30s: server closed the "
                "connection unexpectedly"
            )
        return info


async def test_a_grant_whose_reply_was_lost_is_recognised_and_handed_over() -> None:
    backend = GrantReplyLost()
    async with StateStore(backend) as store:
        lease = await LeaseManager(store, holder="w1").acquire("a", ttl=600)
        assert (lease.holder, lease.token) == ("w1", 1)
        await store.save("a", {"by": "w1"}, lease=lease)  # a lease that fences
        assert await lease.release()
        # nothing left held for the TTL: another worker takes it at once
        other = await LeaseManager(store, holder="w2").acquire("a", ttl=600)
        assert other.token == 2


async def test_a_grant_that_failed_before_it_was_made_still_raises() -> None:
    backend = GrantReplyLost(applied=False)
    async with StateStore(backend) as store:
        with pytest.raises(BackendError, match="connection refused"):
            await LeaseManager(store, holder="w1").acquire("a", ttl=600)
        assert await backend.get_lease("a") is None
