"""Typed state (issue 14 item 1): pydantic models, dataclasses and TypedDicts as an
agent's state, validated on every save; untyped dict state unchanged."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.errors import (
    ConfigurationError,
    InvalidArgument,
    SchemaMismatch,
    StatekeeperError,
    ValidationError,
)
from statekeeper.machine import AgentStateMachine
from statekeeper.schema import TypedAgent, TypedStates

from .apps import NotesDC, NotesTD, SupportV1, support_v1


class Secretive(BaseModel):
    api_key: str
    retries: int = 0


async def test_a_pydantic_state_round_trips_and_is_stamped_with_its_schema() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent(
            "a-1", model=support_v1, initial_state=SupportV1(customer_name="ann")
        )
        assert isinstance(agent, TypedAgent)
        agent.state.tags.append("vip")
        await agent.save()
        again = await store.agent("a-1", model=support_v1)
        assert again.state == SupportV1(customer_name="ann", tags=["vip"])
        stored = await store.load("a-1")
        assert stored.schema_version == 1 and stored.data["$model"] == "support"
        assert [e.schema_version for e in [e async for e in store.history("a-1")]] == [1, 1]


async def test_an_invalid_state_is_refused_naming_the_field_and_nothing_is_written() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent(
            "a-1", model=Secretive, initial_state=Secretive(api_key="sk-live-123456")
        )
        head = await store.head("a-1")
        agent.state.retries = "sk-live-123456-not-a-number"  # type: ignore[assignment]
        with pytest.raises(ValidationError) as caught:
            await agent.save()
        error = caught.value
        assert error.fields == ["retries"] and error.argument == "state.retries"
        assert isinstance(error, InvalidArgument) and isinstance(error, StatekeeperError)
        assert "retries" in str(error) and "sk-live" not in str(error)  # never the value
        assert await store.head("a-1") == head
        assert (await store.load("a-1")).data["retries"] == 0
        agent.state.retries = 1
        await agent.save()
        assert (await store.load("a-1")).data["retries"] == 1


async def test_a_refused_write_reverts_the_transition_it_came_with() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent(
            "a-1", AgentStateMachine(), model=Secretive, initial_state=Secretive(api_key="k")
        )
        agent.state.retries = "x"  # type: ignore[assignment]
        from statekeeper import StateTransition

        with pytest.raises(ValidationError):
            await agent.transition(StateTransition.START_PROCESSING)
        assert agent.machine.state_value == "idle"
        assert (await store.load("a-1")).fsm_state == "idle"
        await agent.refresh()  # drop the invalid change
        assert agent.state.retries == 0


async def test_dataclass_and_typeddict_states() -> None:
    async with StateStore("memory://") as store:
        dc = await store.agent("d-1", model=NotesDC, initial_state=NotesDC(owner="o"))
        dc.state.notes.append("n1")
        await dc.save()
        assert (await store.agent("d-1", model=NotesDC)).state == NotesDC("o", ["n1"])
        td = await store.agent("t-1", model=NotesTD, initial_state={"owner": "o", "notes": []})
        td.state["notes"].append("n2")  # type: ignore[attr-defined]
        await td.save()
        assert (await store.agent("t-1", model=NotesTD)).state == {"owner": "o", "notes": ["n2"]}
        td.state["notes"] = 5  # type: ignore[index, typeddict-item]
        with pytest.raises(ValidationError, match="notes"):
            await td.save()
        await td.refresh()


async def test_typed_store_calls_and_untyped_state_unchanged() -> None:
    async with StateStore("memory://") as store:
        states = TypedStates(store, support_v1)
        await states.create("a-1", SupportV1(customer_name="x"))
        assert await states.load("a-1") == SupportV1(customer_name="x")
        assert await states.get("nobody") is None
        with pytest.raises(InvalidArgument, match="must be a SupportV1"):
            await states.save("a-1", {"customer_name": "x"})  # type: ignore[arg-type]
        plain = await store.agent("p-1", initial_data={"n": 1})
        plain.data["n"] = 2
        await plain.save()
        assert (await store.load("p-1")).data == {"n": 2}
        assert (await store.load("p-1")).schema_version == 1


async def test_a_new_agent_needs_an_initial_state_when_the_model_has_required_fields() -> None:
    async with StateStore("memory://") as store:
        with pytest.raises(InvalidArgument, match="initial_state"):
            await store.agent("a-1", model=support_v1)
        assert await store.get("a-1") is None
        with pytest.raises(ConfigurationError):
            await store.agent("a-1", initial_data={}, model=support_v1)


def test_a_typeddict_pydantic_cannot_use_is_refused_clearly() -> None:
    import typing

    class Old(typing.TypedDict):
        a: int

    with pytest.raises(InvalidArgument, match="cannot be used"):
        TypedStates(None, Old)  # type: ignore[arg-type]


async def test_a_state_of_another_model_is_refused() -> None:
    async with StateStore("memory://") as store:
        await TypedStates(store, NotesDC).create("a-1", NotesDC(owner="o"))
        with pytest.raises(SchemaMismatch, match="not a 'support'"):
            await store.agent("a-1", model=support_v1)


async def test_assigning_a_wrong_state_fails_at_once() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent(
            "a-1", model=support_v1, initial_state=SupportV1(customer_name="x")
        )
        with pytest.raises(InvalidArgument):
            agent.state = NotesDC(owner="o")  # type: ignore[assignment]
        agent.state = SupportV1(customer_name="y")
        await agent.save()
        assert (await store.load("a-1")).data["customer_name"] == "y"
