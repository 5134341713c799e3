"""A durable agent's transition fired from its own hook is queued and runs after the
current transition is stored (run-to-completion): the stored history links, and the
state replayed from it is the agent's state — on the async and the sync face."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import (
    AgentStateMachine,
    InvalidTransition,
    SerializationError,
    StateStore,
    SyncStateStore,
    TransitionRule,
)
from statekeeper.records import EventType

RULES = [
    TransitionRule("new", "start", "running"),
    TransitionRule("running", "finish", "done"),
    TransitionRule("done", "archive", "archived"),
]


def _machine() -> AgentStateMachine[Any, Any]:
    return AgentStateMachine(rules=RULES, initial="new")


async def _moves(store: StateStore, agent_id: str) -> list[tuple[str, str, str]]:
    return [
        (e.info["from"], e.info["event"], e.info["to"])
        async for e in store.history(agent_id)
        if e.type == EventType.TRANSITION
    ]


def _links(moves: list[tuple[str, str, str]], start: str) -> str:
    """The state the stored moves replay to (each must start where the last ended)."""
    state = start
    for source, _, target in moves:
        assert source == state, f"stored history does not link: {moves}"
        state = target
    return state


async def test_a_transition_fired_from_on_enter_is_stored_after_the_outer_one(
    store: StateStore,
) -> None:
    machine = _machine()
    agent = await store.agent("rtc", machine)
    seen: list[tuple[str, bool]] = []

    @machine.on_enter("running")
    async def auto_finish() -> None:
        seen.append(("in hook, state", agent.state == "running"))
        await agent.transition("finish")
        seen.append(("after queueing, state", agent.state == "running"))

    @machine.on_enter("done")
    async def auto_archive() -> None:
        await agent.transition("archive")

    assert await agent.transition("start") is True
    moves = await _moves(store, "rtc")
    assert moves == [
        ("new", "start", "running"),
        ("running", "finish", "done"),
        ("done", "archive", "archived"),
    ]
    assert _links(moves, "new") == agent.machine.state_value == "archived"
    assert (await store.load("rtc")).fsm_state == "archived"
    assert agent.seq == (await store.load("rtc")).seq
    # the hook's event did not run inside the hook: it was queued
    assert seen == [("in hook, state", True), ("after queueing, state", True)]


async def test_queued_events_run_in_the_order_they_were_fired(store: StateStore) -> None:
    machine = _machine()
    agent = await store.agent("fifo", machine)

    @machine.on_enter("running")
    async def two_at_once() -> None:
        await agent.transition("finish")
        await agent.transition("archive")

    await agent.transition("start")
    assert _links(await _moves(store, "fifo"), "new") == "archived"


async def test_a_refused_queued_event_raises_to_the_caller_after_the_outer_is_stored(
    store: StateStore,
) -> None:
    machine = _machine()
    agent = await store.agent("refused", machine)

    @machine.on_enter("running")
    async def wrong() -> None:
        await agent.transition("archive")  # not allowed from running

    with pytest.raises(InvalidTransition) as caught:
        await agent.transition("start")
    assert "queued" in "\n".join(caught.value.__notes__)
    assert await _moves(store, "refused") == [("new", "start", "running")]
    assert agent.state == "running"


async def test_a_failed_outer_transition_drops_what_its_hooks_queued(
    store: StateStore,
) -> None:
    machine = _machine()
    agent = await store.agent("dropped", machine)

    breaks = [False, True]  # (pop: the first call's write breaks, the second's not)

    @machine.on_enter("running")
    async def queue_then_break() -> None:
        await agent.transition("finish")
        if breaks.pop():
            agent.data["bad"] = object()  # the outer write fails: unserializable

    with pytest.raises(SerializationError):
        await agent.transition("start")
    assert await _moves(store, "dropped") == []
    assert agent.state == "new"
    del agent.data["bad"]
    assert await agent.transition("start") is True  # (the hook queues finish again)
    assert _links(await _moves(store, "dropped"), "new") == "done"


def test_the_sync_face_queues_a_transition_fired_from_its_own_hook(tmp_path: Path) -> None:
    machine = _machine()
    with SyncStateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        agent = store.agent("sync", machine)
        states: list[Any] = []

        def auto_finish() -> None:
            states.append(agent.state)
            assert agent.transition("finish") is True  # queued, not a deadlock
            states.append(agent.state)

        machine.on_enter("running", auto_finish)
        assert agent.transition("start") is True
        events = [e for e in store.history("sync") if e.type == EventType.TRANSITION]
        moves = [(e.info["from"], e.info["event"], e.info["to"]) for e in events]
        assert moves == [("new", "start", "running"), ("running", "finish", "done")]
        assert agent.state == "done" and states == ["running", "running"]
