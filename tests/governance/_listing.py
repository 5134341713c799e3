"""A store's ``list_agents`` with something done right after its first non-empty page:
another process acting after retention listed an agent and before it acts on it
(``test_retention_race.py``: a save; ``test_retention_hold_race.py``: a legal hold)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from statekeeper import StateStore
from statekeeper.records import AgentInfo

__all__ = ["after_first_page"]


def after_first_page(
    store: StateStore, then: Callable[[], Awaitable[Any]]
) -> Callable[..., Awaitable[list[AgentInfo]]]:
    """``store.list_agents`` whose first non-empty page is followed by ``then``."""
    listing = store.list_agents
    done: list[bool] = []

    async def list_agents(*args: Any, **kw: Any) -> list[AgentInfo]:
        page = await listing(*args, **kw)
        if page and not done:
            done.append(True)
            await then()
        return page

    return list_agents
