"""A machine state renamed between schema versions (``schema.rename_states``), and the
first write at the new version. The stored state keeps the name it was recorded under,
read through the renames of the version it is stamped with; a write that stamped the
new version without recording the machine state under its new name left
``fsm_state='thinking'`` at version 2: the new code opening the agent raised
``UnknownState`` — after one save of a typed agent opened on the old record (the
documented lazy path), and after ``migrate`` (by rewrite or by append)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate

from .test_events import _record_v1, machine_v2, v2


async def _opens_on_the_new_machine(store: StateStore) -> None:
    stored = await store.load("a-1")
    assert (stored.fsm_state, stored.schema_version) == ("reasoning", 2)
    agent = await store.agent("a-1", machine_v2(), model=v2)
    assert agent.fsm_state == "reasoning"
    await agent.transition("finish")
    assert (await store.load("a-1")).fsm_state == "done"


async def test_a_typed_save_records_the_renamed_state() -> None:
    async with StateStore("memory://") as store:
        await _record_v1(store)
        agent = await store.agent("a-1", machine_v2(), model=v2)
        agent.state.notes.append("more")
        await agent.save()
        await _opens_on_the_new_machine(store)


@pytest.mark.parametrize("method", ["rewrite", "append"])
async def test_a_migration_records_the_renamed_state(tmp_path: Path, method: str) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:  # the old code
        await _record_v1(store)
    async with StateStore(url) as store:  # the new code
        assert (await migrate(store, v2, method=method)).ok
        await _opens_on_the_new_machine(store)


async def test_typed_states_save_records_the_renamed_state(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:  # the old code
        await _record_v1(store)
    async with StateStore(url) as store:  # the new code, without an agent handle
        states = TypedStates(store, v2)
        state = await states.load("a-1")
        state.notes.append("more")
        await states.save("a-1", state)
        await _opens_on_the_new_machine(store)
