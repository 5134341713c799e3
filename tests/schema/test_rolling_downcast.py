"""A rolling deploy: the old application, deployed with a downcaster, writes states the
new one stored.

v1 reads v2's states through a downcaster from 2 that renames ``customer`` back,
converts ``priority`` and deletes ``escalated`` — v1 has no such field (the downcaster
of ``tests/schema/apps.py``, which the rollout test of ``test_compat.py`` uses). v1's
next write then stored the state without ``escalated``: v2's ``escalated=True`` became
the default ``False``, no error. The keys a downcaster drops (deleted, their value moved
to no new key) are keys v1's code never saw, so its typed writes carry them back like
every other key they could not see; a model that cannot carry them (``extra="forbid"``)
is refused (``DowncastDropsFields``), nothing written.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import DowncastDropsFields
from statekeeper.schema import SchemaRegistry, SyncTypedStates, TypedStates

from . import apps
from ._stores import as_stored, store_url, stored_by_v2


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


async def _read_by_v2(url: str, agent_id: str) -> apps.SupportV2:
    async with StateStore(url) as new:
        return await TypedStates(new, apps.support_v2).load(agent_id)


async def test_an_old_agent_write_keeps_the_field_its_downcaster_dropped(url: str) -> None:
    await stored_by_v2(url, "a-1")
    async with StateStore(url) as old:
        agent = await old.agent("a-1", model=apps.support_v1_dc)
        assert agent.state == apps.SupportV1(customer_name="ann", priority="high")
        agent.state.tags.append("from-v1")
        await agent.save()
    seq, version, data = await as_stored(url, "a-1")
    assert (seq, version) == (2, 1)
    # escalated carried; customer was renamed (its value moved), not dropped: not kept
    assert data == {
        "$model": "support",
        "customer_name": "ann",
        "priority": "high",
        "tags": ["from-v1"],
        "escalated": True,
    }
    got = await _read_by_v2(url, "a-1")
    assert got == apps.SupportV2(customer="ann", priority=3, tags=["from-v1"], escalated=True)


async def test_an_old_typed_save_keeps_it_too(url: str) -> None:
    await stored_by_v2(url, "a-2")
    async with StateStore(url) as old:
        states = TypedStates(old, apps.support_v1_dc)
        state = await states.load("a-2")
        state.customer_name = "bo"
        await states.save("a-2", state)
        # a state built anew, saved over the (now v1) state: the carried key stays
        await states.save("a-2", apps.SupportV1(customer_name="cy", priority="low"))
    assert (await as_stored(url, "a-2"))[2]["escalated"] is True
    got = await _read_by_v2(url, "a-2")
    assert (got.customer, got.priority, got.escalated) == ("cy", 1, True)


async def test_a_model_that_cannot_carry_it_is_refused(url: str) -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        customer_name: str
        priority: str = "normal"
        tags: list[str] = []

    strict = SchemaRegistry().register(Strict, name="support", version=1)
    strict.downcaster(from_version=2)(apps.support_v1_dc.downcasters[2])
    await stored_by_v2(url, "a-3")
    before = await as_stored(url, "a-3")
    async with StateStore(url) as old:
        agent = await old.agent("a-3", model=strict)  # reading is fine
        assert agent.state.customer_name == "ann"
        agent.state.tags.append("x")
        with pytest.raises(DowncastDropsFields) as caught:
            await agent.save()
        assert caught.value.fields == ["escalated"]
        assert (caught.value.version, caught.value.current) == (2, 1)
        assert caught.value.agent_id == "a-3"
        await agent.refresh()  # (drop the refused change)
        with pytest.raises(DowncastDropsFields):
            await TypedStates(old, strict).save("a-3", Strict(customer_name="bo"))
    assert await as_stored(url, "a-3") == before


def test_two_processes_the_v2_worker_apart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    root = Path(__file__).resolve().parents[2]
    v2_worker = textwrap.dedent(
        f"""
        from statekeeper import SyncStateStore
        from statekeeper.schema import SyncTypedStates
        from tests.schema import apps
        with SyncStateStore({url!r}) as store:
            state = apps.SupportV2(customer="ann", escalated=True)
            SyncTypedStates(store, apps.support_v2).save("a-4", state)
        """
    )
    subprocess.run(
        [sys.executable, "-c", v2_worker],
        check=True,
        cwd=root,
        env={"PYTHONPATH": f"{root / 'src'}:{root}", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    with SyncStateStore(url) as old:
        agent = old.agent("a-4", model=apps.support_v1_dc)
        agent.state.tags.append("v1")
        agent.save()
    with SyncStateStore(url) as new:
        got = SyncTypedStates(new, apps.support_v2).load("a-4")
    assert (got.tags, got.escalated) == (["v1"], True)


async def test_a_key_renamed_and_converted_is_carried_and_the_upcaster_replaces_it(
    url: str,
) -> None:
    """(its value is not the same object under the new name: it counts as dropped, and
    its stored value rides along, stale, until the new code's upcaster sets it again
    from the renamed key, as it does for every document of the old version)"""

    class Old(BaseModel):
        priority: str = "normal"

    class New(BaseModel):
        level: int = 2

    names, levels = {1: "low", 2: "normal", 3: "high"}, {"low": 1, "normal": 2, "high": 3}
    old = SchemaRegistry().register(Old, name="ticket", version=1)
    new = SchemaRegistry().register(New, name="ticket", version=2)

    @old.downcaster(from_version=2)
    def down(doc: dict[str, Any]) -> dict[str, Any]:
        doc["priority"] = names[doc.pop("level")]
        return doc

    @new.upcaster(from_version=1)
    def up(doc: dict[str, Any]) -> dict[str, Any]:
        doc["level"] = levels[doc.pop("priority")]
        return doc

    async with StateStore(url) as store:
        await TypedStates(store, new).save("a-5", New(level=3))
        agent = await store.agent("a-5", model=old)
        agent.state.priority = "low"
        await agent.save()
        assert (await store.load("a-5")).data == {"$model": "ticket", "priority": "low", "level": 3}
    async with StateStore(url) as fresh:
        assert await TypedStates(fresh, new).load("a-5") == New(level=1)


async def test_a_model_that_cannot_carry_writes_when_nothing_was_dropped(url: str) -> None:
    """(a downcaster that only renames: the strict old model writes as before)"""

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        customer_name: str

    class Renamed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        customer: str

    strict = SchemaRegistry().register(Strict, name="person", version=1)
    renamed = SchemaRegistry().register(Renamed, name="person", version=2)

    @strict.downcaster(from_version=2)
    def down(doc: dict[str, Any]) -> dict[str, Any]:
        doc["customer_name"] = doc.pop("customer")
        return doc

    async with StateStore(url) as store:
        await TypedStates(store, renamed).save("a-6", Renamed(customer="ann"))
        agent = await store.agent("a-6", model=strict)
        agent.state.customer_name = "bo"
        await agent.save()
        await TypedStates(store, strict).save("a-6", Strict(customer_name="cy"))
        snap = await store.load("a-6")
    assert (snap.schema_version, snap.data) == (1, {"$model": "person", "customer_name": "cy"})
