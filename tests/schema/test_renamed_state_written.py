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
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate, rollback

from .test_events import Doc, _record_v1, machine_v1, machine_v2, v1, v2


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


async def test_a_rollback_records_the_state_as_the_old_version_names_it(tmp_path: Path) -> None:
    back = SchemaRegistry().register(Doc, name="doc", version=2)
    back.rename_states(1, {"thinking": "reasoning"})
    back.downcaster(2)(lambda doc: doc)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:  # the old code
        await _record_v1(store)
    async with StateStore(url) as store:  # the new code: migrated, then written
        report = await migrate(store, back)
        agent = await store.agent("a-1", machine_v2(), model=back)
        agent.state.notes.append("more")
        await agent.save()
    async with StateStore(url) as store:  # statekeeper migrate --rollback
        rolled = await rollback(store, back, run_id=report.run_id)
        assert rolled.changed == 1 and rolled.target == 1
    async with StateStore(url) as store:  # the old code again
        stored = await store.load("a-1")
        assert (stored.fsm_state, stored.schema_version) == ("thinking", 1)
        old = await store.agent("a-1", machine_v1(), model=v1)
        assert old.fsm_state == "thinking" and old.state.notes == ["n", "more"]
