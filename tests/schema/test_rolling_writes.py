"""A rolling deploy: the old application's writes onto states the new one stored.

During a deploy, workers of app v1 and app v2 serve the same agents. v2 stores its
states at schema version 2, with fields v1 does not know (``escalated``). A v1
``TypedStates.save`` of a state it built (it cannot load the agent: no downcaster) was
made on the stored v2 state as if that were unreadable data of another tool: replaced,
at version 1 — v2's ``escalated=True`` gone and the agent back at the old version, no
error (v2 then read ``escalated=False``). It is refused now (``SchemaVersionTooNew``,
nothing written), as loading it is — and so is one v2 stored under a model name it
renamed (``SchemaMismatch``); with a downcaster the save keeps what v1 does not
declare, as before.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import SchemaMismatch, SchemaVersionTooNew
from statekeeper.schema import SchemaRegistry, SyncTypedStates, TypedStates

from . import apps
from ._stores import as_stored, store_url, stored_by_v2


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with store_url(request.param, tmp_path) as found:
        yield found


@pytest.mark.parametrize("durability", ["sync", "group", "async"])
async def test_an_old_save_over_a_newer_state_is_refused_and_writes_nothing(
    url: str, durability: str
) -> None:
    await stored_by_v2(url, "a-1")
    before = await as_stored(url, "a-1")
    async with StateStore(url, durability=durability) as old:
        states = TypedStates(old, apps.support_v1)
        with pytest.raises(SchemaVersionTooNew) as caught:
            await states.save("a-1", apps.SupportV1(customer_name="ann", tags=["v1"]))
        assert (caught.value.version, caught.value.current) == (2, 1)
        assert caught.value.agent_id == "a-1"
    assert await as_stored(url, "a-1") == before  # v2's escalated=True, at version 2
    async with StateStore(url) as new:
        assert (await TypedStates(new, apps.support_v2).load("a-1")).escalated is True


async def test_a_model_that_carries_nothing_is_refused_too(url: str) -> None:
    """(extra="forbid" at every depth: no carry was made, no check either)"""

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        customer_name: str

    old = SchemaRegistry().register(Strict, name="support", version=1)
    await stored_by_v2(url, "a-2")
    before = await as_stored(url, "a-2")
    async with StateStore(url) as store:
        with pytest.raises(SchemaVersionTooNew):
            await TypedStates(store, old).save("a-2", Strict(customer_name="ann"))
    assert await as_stored(url, "a-2") == before


async def test_a_newer_state_under_a_renamed_model_is_refused_too(url: str) -> None:
    """v2 renamed the model ("support" -> "ticket", the old name kept as an alias):
    v1 cannot read the state either, and replaced it all the same."""
    ticket = SchemaRegistry().register(
        apps.SupportV2, name="ticket", version=2, aliases=("support",)
    )
    async with StateStore(url) as new:
        state = apps.SupportV2(customer="ann", escalated=True)
        await TypedStates(new, ticket).save("a-6", state)
    before = await as_stored(url, "a-6")
    async with StateStore(url) as store:
        with pytest.raises(SchemaMismatch):
            await TypedStates(store, apps.support_v1).save("a-6", apps.SupportV1(customer_name="b"))
    assert await as_stored(url, "a-6") == before


async def test_with_a_downcaster_the_old_save_keeps_the_new_fields(url: str) -> None:
    """The way through the deploy: v1 deployed with a downcaster from 2 that leaves the
    fields v1 does not declare in the document; v1's saves carry them."""
    old_dc = SchemaRegistry().register(apps.SupportV1, name="support", version=1)

    @old_dc.downcaster(from_version=2)
    def down(doc: dict[str, object]) -> dict[str, object]:
        doc["customer_name"] = doc.pop("customer")
        doc["priority"] = {1: "low", 2: "normal", 3: "high"}[doc["priority"]]  # type: ignore[index]
        return doc  # escalated left in: carried by v1's writes

    await stored_by_v2(url, "a-3")
    async with StateStore(url) as store:
        await TypedStates(store, old_dc).save("a-3", apps.SupportV1(customer_name="ann"))
    seq, version, data = await as_stored(url, "a-3")
    assert (seq, version, data["escalated"]) == (2, 1, True)
    async with StateStore(url) as new:
        assert (await TypedStates(new, apps.support_v2).load("a-3")).escalated is True


def test_the_sync_face_refuses_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with SyncStateStore(url) as new:
        state = apps.SupportV2(customer="ann", escalated=True)
        SyncTypedStates(new, apps.support_v2).save("a-4", state)
    with SyncStateStore(url) as old:
        with pytest.raises(SchemaVersionTooNew):
            SyncTypedStates(old, apps.support_v1).save("a-4", apps.SupportV1(customer_name="b"))
        assert old.load("a-4").data["escalated"] is True


def test_two_processes_v2_writes_then_v1_is_refused(tmp_path: Path) -> None:
    """The deploy as it runs: the new application in another process."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    v2_worker = textwrap.dedent(
        f"""
        from statekeeper import SyncStateStore
        from statekeeper.schema import SyncTypedStates
        from tests.schema import apps
        with SyncStateStore({url!r}) as store:
            state = apps.SupportV2(customer="ann", escalated=True)
            SyncTypedStates(store, apps.support_v2).save("a-5", state)
        """
    )
    root = Path(__file__).resolve().parents[2]
    env_path = f"{root / 'src'}:{root}"
    subprocess.run(
        [sys.executable, "-c", v2_worker],
        check=True,
        cwd=root,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    with SyncStateStore(url) as old:
        with pytest.raises(SchemaVersionTooNew):
            SyncTypedStates(old, apps.support_v1).save("a-5", apps.SupportV1(customer_name="b"))
        snap = old.load("a-5")
        assert (snap.schema_version, snap.data["escalated"]) == (2, True)


async def test_a_retry_of_a_save_that_landed_answers_duplicate_not_refused(url: str) -> None:
    """An idempotency key keeps working across the versions: the old code's retry of a
    save that landed — before the new code wrote on top, or applied by a new worker —
    answers duplicate=True (the refusal above must not hide it), and writes nothing."""
    async with StateStore(url) as old:
        first = await TypedStates(old, apps.support_v1).save(
            "a-7", apps.SupportV1(customer_name="ann"), idempotency_key="req-1"
        )
    async with StateStore(url) as new:
        state = await TypedStates(new, apps.support_v2).load("a-7")
        state.escalated = True
        await TypedStates(new, apps.support_v2).save("a-7", state, idempotency_key="req-2")
    before = await as_stored(url, "a-7")
    async with StateStore(url) as old:
        states = TypedStates(old, apps.support_v1)
        again = await states.save(
            "a-7", apps.SupportV1(customer_name="ann"), idempotency_key="req-1"
        )
        assert (again.duplicate, again.last_seq) == (True, first.last_seq)
        other = await states.save("a-7", apps.SupportV1(customer_name="x"), idempotency_key="req-2")
        assert (other.duplicate, other.last_seq) == (True, 2)
        with pytest.raises(SchemaVersionTooNew):  # a new request: refused
            await states.save("a-7", apps.SupportV1(customer_name="x"), idempotency_key="req-3")
    assert await as_stored(url, "a-7") == before
