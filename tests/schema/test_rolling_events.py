"""A rolling deploy: the old application reads events the new one recorded.

v2 reshaped the info of its custom ``note`` event (``text`` -> ``body``, with an event
upcaster for v1's notes) and added a machine state. v1's typed history handed v2's
``note`` out as it was — type ``note``, info ``{"body": ...}`` — to code that reads
``info["text"]`` (or ``.get("text")``: None, silently). It raises
``EventVersionTooNew`` now, at that event. The machine's own events stay readable: a
state only v2 has is one v1's machine lacks, and that is loud already.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import EventVersionTooNew, SchemaVersionTooNew, UnknownState
from statekeeper.machine import AgentStateMachine, TransitionRule
from statekeeper.schema import SchemaRegistry, SyncTypedStates, TypedStates
from statekeeper.schema.events import replay

from ._stores import store_url


class Doc(BaseModel):
    notes: list[str] = []


old = SchemaRegistry().register(Doc, name="doc", version=1)
new = SchemaRegistry().register(Doc, name="doc", version=2)


@new.event_upcaster("note", from_version=1)
def _note(event_type: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return event_type, {"body": info.pop("text"), **info}


def machine(*extra: str) -> AgentStateMachine[Any, Any]:
    rules = [TransitionRule("idle", "start", "working"), TransitionRule("working", "end", "done")]
    if extra:
        rules.append(TransitionRule("working", "escalate", "escalated"))
    return AgentStateMachine(["idle", "working", "done", *extra], rules, "idle")


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


async def _notes_by_both(url: str) -> None:
    async with StateStore(url) as v1_store:
        agent = await v1_store.agent("a-1", model=old)
        await agent.record("note", {"text": "from v1"})
    async with StateStore(url) as v2_store:
        agent = await v2_store.agent("a-1", model=new)
        await agent.record("note", {"body": "from v2"})


async def test_the_new_code_reads_both_notes(url: str) -> None:
    await _notes_by_both(url)
    async with StateStore(url) as store:
        got = [(e.type, e.info) async for e in TypedStates(store, new).history("a-1")]
    assert got[1:] == [("note", {"body": "from v1"}), ("note", {"body": "from v2"})]


async def test_the_old_code_is_refused_the_newer_note_not_handed_its_new_shape(url: str) -> None:
    await _notes_by_both(url)
    read: list[tuple[str, dict[str, Any]]] = []
    async with StateStore(url) as store:
        with pytest.raises(EventVersionTooNew) as caught:
            async for event in TypedStates(store, old).history("a-1"):
                read.append((event.type, event.info))
    assert read == [("created", {}), ("note", {"text": "from v1"})]  # its own, up to there
    error = caught.value
    assert isinstance(error, SchemaVersionTooNew)
    assert (error.agent_id, error.seq, error.event_type) == ("a-1", 3, "note")
    assert (error.version, error.current) == (2, 1)
    assert "from v2" not in str(error)  # (names the event, never its info)


def test_the_sync_face_is_refused_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as v2_store:
        v2_store.agent("a-2", model=new).record("note", {"body": "from v2"})
    with SyncStateStore(url) as v1_store, pytest.raises(EventVersionTooNew):
        list(SyncTypedStates(v1_store, old).history("a-2"))


async def test_a_state_only_the_new_machine_has_is_loud_for_the_old_one(url: str) -> None:
    async with StateStore(url) as v2_store:
        agent = await v2_store.agent("a-3", machine("escalated"), model=new)
        await agent.transition("start")
        await agent.transition("escalate")
    async with StateStore(url) as v1_store:
        with pytest.raises(SchemaVersionTooNew):  # (typed: its state is refused first)
            await v1_store.agent("a-3", machine(), model=old)
        with pytest.raises(UnknownState):  # (untyped, or typed with a downcaster)
            await v1_store.agent("a-3", machine())
        events = [e async for e in TypedStates(v1_store, old).history("a-3")]
        with pytest.raises(UnknownState):
            replay(machine(), events)
