"""Event schema evolution (issue 14 item 6): custom events and the machine's own
history recorded under an older definition read (and replay) on the current one."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.errors import InvalidTransition, UnknownState, UpcasterFailed
from statekeeper.machine import AgentStateMachine, TransitionRule
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.events import replay


class Doc(BaseModel):
    notes: list[str] = []


def machine_v1() -> AgentStateMachine[Any, Any]:
    return AgentStateMachine(
        ["idle", "thinking", "done"],
        [TransitionRule("idle", "think", "thinking"), TransitionRule("thinking", "finish", "done")],
        "idle",
    )


def machine_v2() -> AgentStateMachine[Any, Any]:
    return AgentStateMachine(
        ["idle", "reasoning", "done"],
        [
            TransitionRule("idle", "reason", "reasoning"),
            TransitionRule("reasoning", "finish", "done"),
        ],
        "idle",
    )


v1 = SchemaRegistry().register(Doc, name="doc", version=1)
v2 = SchemaRegistry().register(Doc, name="doc", version=2)
v2.rename_states(1, {"thinking": "reasoning"})
v2.rename_events(1, {"think": "reason", "note": "comment"})


@v2.event_upcaster("note", from_version=1)
def _note(event_type: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return event_type, {"body": info.pop("text"), **info}


async def _record_v1(store: StateStore) -> None:
    agent = await store.agent("a-1", machine_v1(), model=v1)
    await agent.transition("think")
    agent.state.notes.append("n")
    await agent.record("note", {"text": "hello"})


async def test_a_renamed_state_opens_on_the_new_machine() -> None:
    async with StateStore("memory://") as store:
        await _record_v1(store)
        agent = await store.agent("a-1", machine_v2(), model=v2)
        assert agent.fsm_state == "reasoning"
        await agent.transition("finish")
        assert (await store.load("a-1")).fsm_state == "done"

    async with StateStore("memory://") as store:
        await _record_v1(store)
        forgot = SchemaRegistry().register(Doc, name="doc", version=2)
        forgot.upcaster(1)(lambda doc: doc)  # the data step, without the state rename
        with pytest.raises(UnknownState, match="thinking"):
            await store.agent("a-1", machine_v2(), model=forgot)


async def test_history_under_the_old_definition_reads_and_replays_on_the_new_one() -> None:
    async with StateStore("memory://") as store:
        await _record_v1(store)
        events = [e async for e in TypedStates(store, v2).history("a-1")]
        kinds = [e.type for e in events]
        assert kinds == ["created", "transition", "comment"]
        assert events[1].info == {"event": "reason", "from": "idle", "to": "reasoning"}
        assert events[1].fsm_state == "reasoning"
        assert events[2].info == {"body": "hello"}
        assert {e.schema_version for e in events} == {2}
        machine = machine_v2()
        assert replay(machine, events) == 1
        assert machine.state_value == "reasoning"
        # the raw history is untouched
        raw = [e async for e in store.history("a-1")]
        assert raw[1].info["to"] == "thinking" and raw[2].type == "note"


async def test_replay_names_a_transition_the_new_machine_does_not_allow() -> None:
    async with StateStore("memory://") as store:
        await _record_v1(store)
        events = [e async for e in TypedStates(store, v2).history("a-1")]
        strict = AgentStateMachine(
            ["idle", "reasoning", "done"], [TransitionRule("idle", "other", "reasoning")], "idle"
        )
        with pytest.raises(InvalidTransition, match="seq 2"):
            replay(strict, events)


async def test_a_failing_event_upcaster_is_typed() -> None:
    bad = SchemaRegistry().register(Doc, name="doc", version=2)

    @bad.event_upcaster("note", from_version=1)
    def _boom(kind: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise ValueError("nope")

    async with StateStore("memory://") as store:
        await _record_v1(store)
        with pytest.raises(UpcasterFailed, match="event upcaster of 'note'"):
            [e async for e in TypedStates(store, bad).history("a-1")]
