"""Stored fields a model does not declare are never deleted by a typed write or a
migration (a new-user trial found `migrate`, `agent.save()` and `TypedStates.save`
dropping them without a word); only a caster removes a field, and the migration's dry
run and report name the fields the casters removed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from statekeeper import StateStore
from statekeeper.errors import StoredStateInvalid
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate

from . import apps


async def _seed(store: StateStore) -> None:
    states = TypedStates(store, apps.support_v1)
    for i in range(3):
        await states.create(f"s-{i}", apps.SupportV1(customer_name=f"C{i}", tags=[str(i)]))
    doc = (await store.load("s-1")).data
    await store.save("s-1", {**doc, "notes": "written by an untyped tool"})


async def test_a_migration_keeps_a_stored_field_the_model_does_not_declare() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        dry = await migrate(store, apps.support_v2, dry_run=True)
        assert dry.removed == {"customer_name": 3}  # renamed by the upcaster: named
        report = await migrate(store, apps.support_v2)
        assert report.ok and report.changed == 3
        assert report.removed == {"customer_name": 3}
        data = (await store.load("s-1")).data
        assert data["notes"] == "written by an untyped tool"
        assert data["customer"] == "C1" and "customer_name" not in data
        assert "notes" not in (await store.load("s-0")).data


async def test_a_typed_save_keeps_a_stored_field_the_model_does_not_declare() -> None:
    async with StateStore("memory://") as store:
        await _seed(store)
        agent = await store.agent("s-1", model=apps.support_v1)
        agent.state.tags.append("more")
        await agent.save()
        agent.state.priority = "high"  # a second write, from the written baseline
        await agent.save()
        data = (await store.load("s-1")).data
        assert data["notes"] == "written by an untyped tool"
        assert data["tags"] == ["1", "more"] and data["priority"] == "high"
        # the old-version agent written by the new code: upcast, kept too
        agent2 = await store.agent("s-1", model=apps.support_v2)
        agent2.state.escalated = True
        await agent2.save()
        data = (await store.load("s-1")).data
        assert data["notes"] == "written by an untyped tool" and data["escalated"] is True
        # TypedStates.save of a whole new state keeps it as well
        await TypedStates(store, apps.support_v2).save("s-1", apps.SupportV2(customer="X"))
        data = (await store.load("s-1")).data
        assert data["notes"] == "written by an untyped tool" and data["customer"] == "X"


def _upcaster_adds_a_field() -> Any:
    registry = SchemaRegistry()
    schema = registry.register(apps.SupportV2, name="support", version=2)

    @schema.upcaster(from_version=1)
    def v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
        doc["customer"] = doc.pop("customer_name")
        doc["priority"] = 2
        doc["legacy_field"] = "kept"
        return doc

    return schema


async def test_a_field_an_upcaster_adds_but_the_model_does_not_declare_is_kept() -> None:
    schema = _upcaster_adds_a_field()
    async with StateStore("memory://") as store:
        await _seed(store)
        report = await migrate(store, schema)
        assert report.ok
        assert (await store.load("s-0")).data["legacy_field"] == "kept"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer_name: str
    priority: str = "normal"
    tags: list[str] = []


async def test_a_model_that_forbids_extras_refuses_them_instead_of_dropping_them() -> None:
    registry = SchemaRegistry()
    strict = registry.register(Strict, name="support", version=1)
    async with StateStore("memory://") as store:
        await _seed(store)
        with pytest.raises(StoredStateInvalid) as info:
            await store.agent("s-1", model=strict)
        assert info.value.fields == ["notes"]
        assert (await store.load("s-1")).data["notes"] == "written by an untyped tool"
