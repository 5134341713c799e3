"""A load that read an agent's head and then finds none of its events, because
another process deleted the agent in between, is an agent not found — not an
IntegrityError, which says the store was tampered with (seen on PostgreSQL: a
listing of every LangGraph thread failed so while another process deleted a thread;
its head and its events are read by two statements). A head that is still there
with its events gone stays an IntegrityError.

The memory engine reads the events with ``Backend.read`` after the head, so the
window is reached deterministically there."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound, IntegrityError


def _before_the_events_are_read(store: StateStore, action: Any) -> list[str]:
    """Run ``action(agent_id)`` once, just before the first read of an agent's events
    (where a concurrent deletion lands, after the head was read)."""
    backend: Any = store.backend
    real_read = backend.read
    ran: list[str] = []

    async def read(agent_id: str, *args: Any, **kwargs: Any) -> Any:
        if not ran:
            ran.append(agent_id)
            await action(agent_id)
        return await real_read(agent_id, *args, **kwargs)

    backend.read = read
    return ran


async def test_a_load_racing_a_deletion_finds_no_agent() -> None:
    async with StateStore("memory://", cache_size=0) as store:
        await store.save("a", {"n": 1})
        ran = _before_the_events_are_read(store, store.delete)
        with pytest.raises(AgentNotFound):
            await store.load("a")
        assert ran == ["a"]


async def test_a_head_without_its_events_is_still_an_integrity_error() -> None:
    async with StateStore("memory://", cache_size=0) as store:
        await store.save("a", {"n": 1})
        backend: Any = store.backend
        stays: int = await backend.head("a")

        async def head(agent_id: str) -> int:  # a head row that stays behind
            return stays

        async def events_gone(agent_id: str) -> None:
            await backend.delete_agent(agent_id)
            backend.head = head

        ran = _before_the_events_are_read(store, events_gone)
        with pytest.raises(IntegrityError, match="stream ends at seq 0, head is 1"):
            await store.load("a")
        assert ran == ["a"]
