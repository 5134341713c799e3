"""An agent id starting with ``"\\x01"`` marks the store's own streams (the audit log,
the legal holds): listings, the change feed, ``verify``, ``export`` and retention pass
over every such id. Only ``"\\x01sk-"`` was refused, so ``save("\\x01tenant", ...)``
stored an agent that ``count_agents`` counted and nothing else ever showed: not
listed, not exported, never purged by retention. Creating one is now refused with
:class:`NonNormalAgentId` naming it, nothing written."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidAgentId, NonNormalAgentId

Write = Callable[[StateStore, str], Awaitable[Any]]
WAYS: dict[str, Write] = {
    "save": lambda s, a: s.save(a, {"n": 1}),
    "create": lambda s, a: s.create(a, {"n": 1}),
    "keyed-save": lambda s, a: s.save(a, {"n": 1}, idempotency_key="k-1"),
}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("agent_id", ["\x01tenant", "\x01sk", "\x01acme/a"])
async def test_no_agent_is_created_that_listings_would_pass_over(
    tmp_path: Path, agent_id: str, way: str
) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        with pytest.raises(NonNormalAgentId) as caught:
            await WAYS[way](store, agent_id)
        assert isinstance(caught.value, InvalidAgentId)
        assert caught.value.agent_id == agent_id and repr(agent_id) in str(caught.value)
        assert "store's own streams" in str(caught.value)
        assert await store.head(agent_id) == 0
        assert await store.count_agents() == 0 == len(await store.list_agents())


async def test_every_agent_counted_is_listed(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.save("\x02tenant/a", {"n": 1})  # another control character: an agent
        await store.save("acme/\x01a", {"n": 1})  # "\x01" past the start: an agent
        for agent_id in ("\x01tenant", "\x01acme/a"):
            with pytest.raises(NonNormalAgentId):
                await store.save(agent_id, {"n": 1})
        listed = [a.agent_id for a in await store.list_agents()]
        assert listed == ["\x02tenant/a", "acme/\x01a"]
        assert await store.count_agents() == len(listed)
