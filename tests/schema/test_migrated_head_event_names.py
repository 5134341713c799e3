"""The head event a migration rewrites is stamped with the target version, and typed
history reads an event's type, info and machine states through the renames and event
upcasters *from its stamped version*: a migrated head event read as if recorded at the
target — a custom ``note`` at the head stayed ``note`` with ``{"text": ...}`` where
typed history gives every other one as ``comment`` with ``{"body": ...}``, and a
transition at the head kept ``think``/``thinking``. The migration now renames what the
rewritten body holds (a transition's event and states) and migrates a stream whose
head is a custom event the casters change by an appended ``schema.migrate`` event
(its record's type cannot be rewritten), leaving that event at its own version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate

from .test_events import machine_v1, v1, v2


async def _record(store: StateStore, head: str) -> None:
    agent = await store.agent("a-1", machine_v1(), model=v1)
    if head == "note":
        await agent.transition("think")
        agent.state.notes.append("n")
        await agent.record("note", {"text": "hello"})
    else:
        agent.state.notes.append("n")
        await agent.save()
        await agent.transition("think")


async def _typed(store: StateStore) -> list[tuple[str, Any, Any]]:
    return [(e.type, e.info, e.fsm_state) async for e in TypedStates(store, v2).history("a-1")]


@pytest.mark.parametrize("head", ["note", "transition"])
async def test_a_migrated_head_event_reads_as_before(tmp_path: Path, head: str) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:
        await _record(store, head)
    async with StateStore(url) as store:
        before = await _typed(store)
        assert (await migrate(store, v2)).ok
        after = await _typed(store)
        assert after[: len(before)] == before
        assert (await store.load("a-1")).schema_version == 2
