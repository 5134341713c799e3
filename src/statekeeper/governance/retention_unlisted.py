"""The agents a retention run covers: every listed agent and, in id order with them,
those the engine stores and its listings do not show (``StateStore.unlisted_agents``:
Redis's taken off its agent index by hand, which ``verify`` names). Before, a run read
the listing alone: a TTL or ``keep_last`` rule never applied to such an agent, while a
backup and an export (:mod:`statekeeper.cli.export_listing`) already copied it."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from ..errors import AgentLost
from ..records import AgentInfo
from ..store.listing import agents_past_lost
from ..store.namespaced import stored_id

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["every_agent"]

_log = logging.getLogger("statekeeper.governance.retention")
_NAMED = 5


async def every_agent(
    store: StateStore, after: str | None, page: int
) -> AsyncGenerator[AgentInfo | AgentLost, None]:
    """The listing of ``store`` after ``after`` (lost agents as their
    :class:`AgentLost`), with its unlisted agents after ``after`` merged in id order."""
    unlisted = [await _info(store, a) for a in await store.unlisted_agents()]
    extra = sorted(
        (i for i in unlisted if i is not None and (after is None or i.agent_id > after)),
        key=lambda i: i.agent_id,
    )
    if extra:
        more = ", ..." if len(extra) > _NAMED else ""
        _log.warning(
            "retention covers %d agent(s) the agent index does not list (verify names them): %s%s",
            len(extra),
            ", ".join(repr(i.agent_id) for i in extra[:_NAMED]),
            more,
        )
    listing = agents_past_lost(store.list_agents, after, page)
    try:
        async for info in listing:
            while extra and extra[0].agent_id < info.agent_id:
                yield extra.pop(0)
            if extra and extra[0].agent_id == info.agent_id:  # (listed again meanwhile)
                extra.pop(0)
            yield info
        for info in extra:
            yield info
    finally:
        await listing.aclose()


async def _info(store: StateStore, agent_id: str) -> AgentInfo | None:
    """The listing's row of an unlisted agent (None: gone since), read from its raw
    events (nothing decoded: a forgotten agent's too)."""
    backend, stored = store.backend, stored_id(store, agent_id)
    head = await backend.head(stored)
    if head == 0:
        return None
    last = await backend.read(stored, head - 1, head)
    first = await backend.read(stored, 0, 1)
    if not last or not first:
        return None
    return AgentInfo(agent_id, head, first[0].timestamp, last[-1].timestamp)
