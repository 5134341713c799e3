"""Every UnknownState met for an agent names the agent and the state (as fields and in
its message): opening it, reloading it (``agent.refresh()``, on the async and sync
face) and replaying its history on a machine that lacks the state."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statekeeper import AgentStateMachine, StateStore, SyncStateStore, TransitionRule
from statekeeper.errors import UnknownState
from statekeeper.schema.events import replay


def _lifecycle(busy: str) -> AgentStateMachine[str, str]:
    return AgentStateMachine(
        rules=[TransitionRule("idle", "go", busy), TransitionRule(busy, "done", "idle")]
    )


def _names_agent_and_state(error: UnknownState, agent_id: str, state: str) -> None:
    assert (error.agent_id, error.state) == (agent_id, state)
    assert f"agent {agent_id!r}" in str(error), str(error)
    assert repr(state) in str(error), str(error)


async def test_refresh_names_the_agent_stored_in_a_state_its_machine_lacks(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    ours = await open_store(db_url).agent("a1", _lifecycle("busy"))
    theirs = await open_store(db_url).agent("a1", _lifecycle("working"))
    await theirs.transition("go")  # stored in "working", which our machine lacks
    with pytest.raises(UnknownState) as refused:
        await ours.refresh()
    _names_agent_and_state(refused.value, "a1", "working")
    assert (ours.machine.state_value, ours.seq) == ("idle", 1)  # nothing adopted


async def test_opening_names_the_agent_and_the_state(store: StateStore) -> None:
    old = await store.agent("a2", _lifecycle("busy"))
    await old.transition("go")
    with pytest.raises(UnknownState) as refused:
        await store.agent("a2", _lifecycle("working"))
    _names_agent_and_state(refused.value, "a2", "busy")


async def test_replaying_a_history_names_the_agent_and_the_state(store: StateStore) -> None:
    old = await store.agent("a3", _lifecycle("busy"))
    await old.transition("go")
    await old.transition("done")
    events = [e async for e in store.history("a3")]
    with pytest.raises(UnknownState) as refused:
        replay(_lifecycle("working"), events)
    _names_agent_and_state(refused.value, "a3", "busy")


def test_the_sync_face_refresh_names_the_agent(db_url: str) -> None:
    with SyncStateStore(db_url) as one, SyncStateStore(db_url) as two:
        ours = one.agent("s1", _lifecycle("busy"))
        two.agent("s1", _lifecycle("working")).transition("go")
        with pytest.raises(UnknownState) as refused:
            ours.refresh()
        _names_agent_and_state(refused.value, "s1", "working")


def test_a_bare_machine_names_the_state() -> None:
    with pytest.raises(UnknownState) as refused:
        _lifecycle("busy").restore("working")
    assert (refused.value.agent_id, refused.value.state) == (None, "working")
