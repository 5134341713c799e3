"""The newest fencing token of each agent of a store, for a move to another store.

``statekeeper export`` and ``backup`` read them here; ``import`` and ``restore`` hand
them to the target's :meth:`~.base.Backend.carry_lease_tokens` before they write the
agents, so the target's next grant is greater than every token the source granted (a
worker fenced off at the source stays fenced off at the target, and the tokens handed
to other systems never go back). Holders and expiries are not carried: a moved lease
is not held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from .base import Backend, Capability

__all__ = ["newest_tokens"]

#: leases listed, or agents whose lease is read, per call
_PAGE = 1000


async def newest_tokens(
    backend: Backend, prefix: str = "", agent_ids: Sequence[str] | None = None
) -> dict[str, int] | None:
    """``{stored agent id: newest token}`` of the agents under ``prefix`` (or of
    ``agent_ids``) that ever had a lease; None on an engine without leases. An engine
    that lists its lease table (``Capability.LEASE_LIST``) also gives the tokens of
    agents deleted since; the others those of the agents it lists."""
    if not backend.supports_leases:
        return None
    tokens: dict[str, int] = {}
    if agent_ids is None and backend.supports(Capability.LEASE_LIST):
        after = prefix  # every id under the prefix sorts after it
        while True:
            page = await backend.list_leases(after, _PAGE)
            for lease in page:
                if not lease.agent_id.startswith(prefix):
                    return tokens
                if lease.token > 0:
                    tokens[lease.agent_id] = lease.token
            if len(page) < _PAGE:
                return tokens
            after = page[-1].agent_id
    ids = list(agent_ids) if agent_ids is not None else await _listed(backend, prefix)
    for start in range(0, len(ids), _PAGE):
        batch = ids[start : start + _PAGE]
        for found in await asyncio.gather(*(backend.get_lease(a) for a in batch)):
            if found is not None and found.token > 0:
                tokens[found.agent_id] = found.token
    return tokens


async def _listed(backend: Backend, prefix: str) -> list[str]:
    ids: list[str] = []
    after: str | None = prefix or None
    while True:
        page = await backend.list_agents(after, _PAGE)
        for info in page:
            if not info.agent_id.startswith(prefix):
                return ids
            ids.append(info.agent_id)
        if len(page) < _PAGE:
            return ids
        after = page[-1].agent_id
