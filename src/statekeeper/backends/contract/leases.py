"""Part of the backend contract, the leases and fencing (Capability.LEASES): the abstract
methods and defaults :class:`~statekeeper.backends.base.Backend` takes from
:class:`LeasesContract`."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import (
    CapabilityUnsupported,
    LeasesUnsupported,
)
from ...records import (
    AppendRequest,
    LeaseInfo,
)
from .capabilities import Capability
from .checks import released_with

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class LeasesContract(ContractPart):
    # -- leases and fencing (see docs/concurrency.md) ------------------------------
    #
    # One lease per agent. Its fencing token only ever grows (it survives release,
    # expiry and delete_agent), and an append whose ``request.fence`` is not the
    # agent's current (holder, token) is refused with LeaseLost atomically with the
    # append. Engines that cannot do this keep ``supports_leases = False``: every lease
    # call, and every append that carries a fence, raises LeasesUnsupported.

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        """Grant the agent's lease to ``holder`` for ``ttl`` seconds, with a new token.

        The lease is free when it was never granted, was released, has expired (on the
        backend's clock), or is already held by ``holder`` — re-acquiring hands out a
        new token, so an earlier incarnation of the same holder is fenced off too.
        The new token is greater than every token granted before for the agent.
        Raises :class:`~statekeeper.errors.LeaseHeld` when another holder's lease is
        still running.
        """
        raise LeasesUnsupported(self.name)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        """Extend the lease to ``ttl`` seconds from now, keeping its token.

        Succeeds while ``(holder, token)`` is still the agent's newest lease — also
        after it expired, as long as nobody took it (no newer token exists, so no
        write was fenced off). Raises :class:`~statekeeper.errors.LeaseLost` otherwise.
        """
        raise LeasesUnsupported(self.name)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        """Give the lease up so another holder can take it at once. Writes fenced with
        the released token are refused from now on. False (and nothing changes) when
        ``(holder, token)`` is no longer the current lease."""
        raise LeasesUnsupported(self.name)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        """:meth:`release_lease` sent again after a try whose outcome is unknown (it
        raised, or its caller was cancelled: it may have released the lease). True
        also for a lease nobody holds whose token is still ``token``: released with
        it (any grant since would have moved the token on), so the first try did it.
        False when the lease was taken over (a newer token).

        Engines answer it in one step; this default releases, then looks at the lease
        (exact unless a grant comes between the two: then False)."""
        if await self.release_lease(agent_id, holder, token):
            return True
        return released_with(await self.get_lease(agent_id), token)

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        """The agent's newest lease (possibly expired or released), or None if it
        never had one."""
        raise LeasesUnsupported(self.name)

    async def next_lease_token(self, agent_id: str, current: LeaseInfo | None) -> int:
        """The fencing token the agent's next grant gives, ``current`` being its stored
        lease as just read: that token plus one (1 for an agent never leased). An engine
        whose tokens jump (PostgreSQL: past every token an earlier WAL timeline gave,
        after a failover) reads it from the server; an audited grant committed with
        its entry names it, and the engine refuses another."""
        return current.token + 1 if current is not None else 1

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        """The stored leases (possibly expired or released) of the agents whose id
        sorts after ``after``, in id order, at most ``limit`` (a page: call again
        with the last id until fewer come back). Capability ``LEASE_LIST``; the
        default refuses."""
        raise CapabilityUnsupported(self.name, Capability.LEASE_LIST.value)

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        """Raise each agent's fencing token to at least the one given, as a lease nobody
        holds: the newest token another store granted the agent, carried by an
        export/import or a backup/restore, so the next grant here is greater than every
        token the source ever granted. A stored token at or above it is left alone (a
        token never goes back); a lease held under a lower one is released (its writes
        are refused from then on). Engines without leases do nothing; one with leases
        that does not carry them refuses (:class:`~statekeeper.errors.CapabilityUnsupported`)
        rather than let its tokens start again below the source's."""
        if self.supports_leases and tokens:
            raise CapabilityUnsupported(self.name, "carrying lease tokens")

    def refuse_fence(self, request: AppendRequest) -> None:
        """For engines without leases: refuse a fenced append rather than store it
        unchecked."""
        if request.fence is not None and not self.supports_leases:
            raise LeasesUnsupported(self.name)
