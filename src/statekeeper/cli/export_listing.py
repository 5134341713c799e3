"""Which agents ``statekeeper export`` of a whole store writes (see :mod:`.transfer`):
every listed agent, in id order, then those the engine stores and its listings do not
show (``StateStore.unlisted_agents``: Redis's taken off its agent index by hand, which
``verify`` names). Before, the export left the latter out without a word, and an import
of the file lost them; now they are written like the others, and a warning names them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["every_agent_id"]

_log = logging.getLogger("statekeeper.cli.export")
_NAMED = 5


async def every_agent_id(store: StateStore) -> AsyncIterator[str]:
    """The ids of every agent of ``store`` (listed, then unlisted)."""
    async for info in store.iter_agents():
        yield info.agent_id
    unlisted = await store.unlisted_agents()
    if unlisted:
        more = ", ..." if len(unlisted) > _NAMED else ""
        _log.warning(
            "exporting %d agent(s) the agent index does not list (verify names them): %s%s",
            len(unlisted),
            ", ".join(repr(a) for a in unlisted[:_NAMED]),
            more,
        )
    for agent_id in unlisted:
        yield agent_id
