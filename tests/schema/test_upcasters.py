"""Schema versions and upcasters (issue 14 item 3): old records stay readable without
being rewritten; a rename without an upcaster fails with a clear typed error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.errors import (
    InvalidArgument,
    MissingUpcaster,
    SchemaError,
    SchemaVersionTooNew,
    StorageError,
    StoredStateInvalid,
    UpcasterFailed,
)
from statekeeper.schema import SchemaRegistry, TypedStates

from .apps import (
    PRIORITIES,
    SupportV1,
    SupportV2,
    support_v1,
    support_v1_dc,
    support_v2,
    support_v2_bare,
    upgraded,
)


async def _stored_v1(store: StateStore, agent_id: str = "a-1") -> None:
    await TypedStates(store, support_v1).create(
        agent_id, SupportV1(customer_name="ann", priority="high", tags=["t"])
    )


async def test_renaming_a_field_with_an_upcaster_keeps_old_records_loadable() -> None:
    async with StateStore("memory://") as store:
        await _stored_v1(store)
        before = await store.head("a-1")
        agent = await store.agent("a-1", model=support_v2)
        assert agent.state == SupportV2(customer="ann", priority=3, tags=["t"])
        assert agent.stored_version == 1 and not agent.dirty  # upcast is not a change
        assert await store.head("a-1") == before  # read without being rewritten
        assert (await store.load("a-1")).schema_version == 1
        agent.state.escalated = True
        await agent.save()  # the next write stores the current version
        stored = await store.load("a-1")
        assert stored.schema_version == 2
        assert stored.data == {
            "$model": "support", "customer": "ann", "priority": 3, "tags": ["t"],
            "escalated": True,
        }  # fmt: skip
        # and the old version of the record is still there, readable as v2
        assert await TypedStates(store, support_v2).load("a-1", at_seq=1) == SupportV2(
            customer="ann", priority=3, tags=["t"]
        )


async def test_renaming_a_field_without_an_upcaster_fails_with_a_typed_error() -> None:
    async with StateStore("memory://") as store:
        await _stored_v1(store)
        with pytest.raises(MissingUpcaster) as caught:
            await store.agent("a-1", model=support_v2_bare)
        error = caught.value
        assert isinstance(error, SchemaError) and isinstance(error, StorageError)
        assert (error.model, error.version, error.target, error.agent_id) == (
            "support",
            1,
            2,
            "a-1",
        )
        assert "upcaster" in str(error) and "'a-1'" in str(error)
        # the same rename with the version left at 1: the field is named
        same_version = SchemaRegistry().register(SupportV2, name="support", version=1)
        with pytest.raises(StoredStateInvalid) as invalid:
            await TypedStates(store, same_version).load("a-1")
        assert invalid.value.fields == ["customer", "priority"]
        assert "customer" in str(invalid.value) and "ann" not in str(invalid.value)
        assert (await store.load("a-1")).data["customer_name"] == "ann"  # nothing lost


async def test_a_chain_of_upcasters_runs_version_by_version() -> None:
    class V3(BaseModel):
        customer: dict[str, str]
        priority: int
        tags: list[str]
        escalated: bool

    registry = SchemaRegistry()
    v3 = registry.register(V3, name="support", version=3)
    v3.upcaster(1)(support_v2.upcasters[1])

    @v3.upcaster(2)
    def split(doc: dict[str, Any]) -> dict[str, Any]:
        doc["customer"] = {"name": doc["customer"]}
        return doc

    async with StateStore("memory://") as store:
        await _stored_v1(store)
        await TypedStates(store, support_v2).create("b-1", SupportV2(customer="bo"))
        states = TypedStates(store, v3)
        assert (await states.load("a-1")).customer == {"name": "ann"}
        assert (await states.load("b-1")).customer == {"name": "bo"}


async def test_snapshots_taken_under_an_old_schema_are_upcast(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, snapshot_every=2) as store:
        agent = await store.agent(
            "a-1", model=support_v1, initial_state=SupportV1(customer_name="a")
        )
        for tag in "xyz":
            agent.state.tags.append(tag)
            await agent.save()
        assert store.stats().snapshots_written >= 1
    async with StateStore(url, snapshot_every=2) as again:  # cold cache: from the snapshot
        new = await again.agent("a-1", model=support_v2)
        assert new.state.tags == ["x", "y", "z"] and new.state.customer == "a"
        new.state.tags.append("w")
        await new.save()
        await new.save()
        assert (await TypedStates(again, support_v2).load("a-1")).tags == ["x", "y", "z", "w"]


async def test_old_code_reads_new_data_through_a_downcaster_or_refuses() -> None:
    async with StateStore("memory://") as store:
        await TypedStates(store, support_v2).create("a-1", SupportV2(customer="c", priority=1))
        old = await TypedStates(store, support_v1_dc).load("a-1")
        assert old == SupportV1(customer_name="c", priority="low")
        with pytest.raises(SchemaVersionTooNew) as caught:
            await TypedStates(store, support_v1).load("a-1")
        assert (caught.value.version, caught.value.current) == (2, 1)


async def test_an_upcaster_that_fails_is_a_typed_error() -> None:
    registry = SchemaRegistry()
    broken = registry.register(SupportV2, name="support", version=2)

    @broken.upcaster(1)
    def bad(doc: dict[str, Any]) -> dict[str, Any]:
        return doc["no such field"]  # type: ignore[no-any-return]

    @broken.downcaster(2)
    def worse(doc: dict[str, Any]) -> dict[str, Any]:
        return None  # type: ignore[return-value]

    async with StateStore("memory://") as store:
        await _stored_v1(store)
        with pytest.raises(UpcasterFailed, match="the document has no key 'no such field'"):
            await TypedStates(store, broken).load("a-1")
    with pytest.raises(UpcasterFailed, match="returned a NoneType"):
        broken.convert({"customer": "x"}, 2, 1)


def test_casters_are_registered_for_versions_that_exist() -> None:
    schema = SchemaRegistry().register(SupportV2, name="s", version=2)
    with pytest.raises(InvalidArgument, match="from_version"):
        schema.upcaster(2)
    with pytest.raises(InvalidArgument):
        schema.downcaster(1)
    with pytest.raises(InvalidArgument, match="registered already"):
        registry = SchemaRegistry()
        registry.register(SupportV1, name="same")
        registry.register(SupportV2, name="same")


v1_states = st.builds(
    SupportV1,
    customer_name=st.text(max_size=20),
    priority=st.sampled_from(sorted(PRIORITIES)),
    tags=st.lists(st.text(max_size=8), max_size=5),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=v1_states)
def test_upcast_of_a_stored_v1_document_is_what_v2_code_would_have_written(old: SupportV1) -> None:
    """Property: for random v1 states, the v1 document as stored, upcast, equals the
    document v2 code writes for the same agent."""
    stored = support_v1.dump(old)
    upcast = support_v2.load(stored, 1)
    assert upcast == upgraded(old)
    assert support_v2.dump(upcast) == support_v2.dump(upgraded(old))
    # and back: the downcaster restores what v1 code wrote
    assert support_v1_dc.load(support_v2.dump(upcast), 2) == old
