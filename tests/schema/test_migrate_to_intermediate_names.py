"""A migration to an intermediate version (``to=2`` by code that knows version 3)
renamed machine states (and a rewritten head event's names) only when the target was
the code's own version: the agent was stamped version 2 and kept its version-1 state
``thinking``, which version 2 calls ``reasoning`` — the version-2 code opening it
raised ``UnknownState``, and typed history read the head transition under the old
names. The names are now brought to the target's, whatever the code's version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.machine import AgentStateMachine, TransitionRule
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate

from .test_events import Doc, machine_v2, v2
from .test_migrated_head_event_names import _record

v3 = SchemaRegistry().register(Doc, name="doc", version=3)
v3.rename_states(1, {"thinking": "reasoning"})
v3.rename_events(1, {"think": "reason", "note": "comment"})
v3.rename_states(2, {"reasoning": "pondering"})


@v3.event_upcaster("note", from_version=1)
def _note(event_type: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return event_type, {"body": info.pop("text"), **info}


def machine_v3() -> AgentStateMachine[Any, Any]:
    return AgentStateMachine(
        ["idle", "pondering", "done"],
        [
            TransitionRule("idle", "reason", "pondering"),
            TransitionRule("pondering", "finish", "done"),
        ],
        "idle",
    )


async def _typed(store: StateStore) -> list[tuple[str, Any, Any]]:
    return [(e.type, e.info, e.fsm_state) async for e in TypedStates(store, v2).history("a-1")]


@pytest.mark.parametrize("head", ["note", "transition"])
@pytest.mark.parametrize("method", ["rewrite", "append"])
async def test_a_migration_to_an_intermediate_version_names_states_as_it_does(
    tmp_path: Path, method: str, head: str
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:  # the version-1 code
        await _record(store, head)
    async with StateStore(url) as store:  # version 2 reads it (before any migration)
        before = await _typed(store)
    async with StateStore(url) as store:  # the version-3 code: migrate --to 2
        assert (await migrate(store, v3, to=2, method=method)).ok
    async with StateStore(url) as store:  # the version-2 code opens it
        stored = await store.load("a-1")
        assert (stored.fsm_state, stored.schema_version) == ("reasoning", 2)
        assert (await _typed(store))[: len(before)] == before
        agent = await store.agent("a-1", machine_v2(), model=v2)
        assert agent.fsm_state == "reasoning"
    async with StateStore(url) as store:  # and the version-3 code
        agent = await store.agent("a-1", machine_v3(), model=v3)
        assert agent.fsm_state == "pondering"
        await agent.transition("finish")
        assert (await store.load("a-1")).fsm_state == "done"
