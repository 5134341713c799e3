"""The count of a prefix on a tiered store with a cold tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.store.namespaced import NamespacedStateStore

from ._services import fresh_url


async def test_tiered_count_prefix_counts_demoted_agents(tmp_path: Path) -> None:
    """A demoted agent is a marker in the durable tier (under its own prefix): the
    count of a prefix (a namespaced store's count) left every demoted agent out."""
    with fresh_url("tiered", tmp_path) as url:
        async with StateStore(url) as store:
            for agent_id in ("ns/a", "ns/b", "x"):
                await store.save(agent_id, {"i": 0})
            backend: Any = store.backend
            assert await backend.demote("ns/a")
            assert await backend.count_prefix("ns/") == 2
            assert await backend.count_prefix("ns/a") == 1
            assert await backend.count_prefix("") == await backend.count_agents() == 3
        async with NamespacedStateStore(url, namespace="ns") as namespaced:
            assert await namespaced.count_agents() == 2
