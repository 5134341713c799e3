"""The two reads the inspector added to the backend contract, on every engine that
answers them natively (memory, SQLite, PostgreSQL) and through the defaults (Redis):
``list_agents_before`` (keyset pages backwards) and ``read_heads`` (the head events of
many agents in one read), plus ``StateStore.head_states`` over them; and the agents
list on a PostgreSQL store end to end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper import StateStore, StateTransition
from statekeeper.errors import CapabilityUnsupported, InvalidAgentId
from statekeeper.inspector.listing import AgentQuery, list_page
from tests.backends._services import fresh_url

IDS = ["a", "a/1", "a/2", "b", "b\u00e9", "c"]


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    with fresh_url(request.param, tmp_path) as url:
        async with StateStore(url) as s:
            for agent_id in IDS:
                agent = await s.agent(agent_id)
                if agent_id != "c":
                    await agent.transition(StateTransition.START_PROCESSING)
                if agent_id == "b":
                    agent.data["x"] = 1
                    await agent.save()  # the newest event did not move the machine
            yield s


async def test_list_agents_before(store: StateStore) -> None:
    backend = store.backend
    if not backend.lists_backwards:
        with pytest.raises(CapabilityUnsupported):
            await backend.list_agents_before(None, 10)
        return
    assert [i.agent_id for i in await backend.list_agents_before(None, 10)] == IDS[::-1]
    assert [i.agent_id for i in await backend.list_agents_before("b", 2)] == ["a/2", "a/1"]
    assert [i.agent_id for i in await backend.list_agents_before("a", 5)] == []
    assert [i.agent_id for i in await backend.list_agents_before("zz", 1)] == ["c"]
    rows = await backend.list_agents_before("b\u00e9", 1)
    assert rows[0].agent_id == "b" and rows[0].head_seq == 3


async def test_read_heads_and_head_states(store: StateStore) -> None:
    raws = await store.backend.read_heads(["b", "missing", "a/1", "c"])
    assert [r.seq if r is not None else None for r in raws] == [3, None, 2, 1]
    heads = await store.head_states(["b", "missing", "a/1", "c"])
    states = [(h.agent_id, h.seq, h.fsm_state) if h is not None else None for h in heads]
    assert states == [("b", 3, "processing"), None, ("a/1", 2, "processing"), ("c", 1, "idle")]
    assert heads[0] == await store.head_state("b")  # the same answer as one by one
    assert await store.head_states([]) == []
    with pytest.raises(InvalidAgentId):
        await store.head_states(["ok", ""])


async def test_agents_list_pages(store: StateStore) -> None:
    page = await list_page(store, AgentQuery.parse({"limit": "2"}))
    assert [r.info.agent_id for r in page.rows] == ["a", "a/1"]
    assert page.next_after == "a/1"
    page = await list_page(store, AgentQuery.parse({"ns": "a"}))
    assert [r.info.agent_id for r in page.rows] == ["a/1", "a/2"]
    page = await list_page(store, AgentQuery.parse({"state": "idle"}))
    assert [r.info.agent_id for r in page.rows] == ["c"]
    if store.backend.lists_backwards:
        page = await list_page(store, AgentQuery.parse({"sort": "desc", "limit": "3"}))
        assert [r.info.agent_id for r in page.rows] == ["c", "b\u00e9", "b"]
        back = await list_page(store, AgentQuery.parse({"before": "b", "limit": "2"}))
        assert [r.info.agent_id for r in back.rows] == ["a/1", "a/2"]
        assert back.prev_before == "a/1" and back.next_after == "a/2"
    else:
        with pytest.raises(CapabilityUnsupported):
            await list_page(store, AgentQuery.parse({"sort": "desc"}))
