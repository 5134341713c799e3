"""Dual-version rollout (issue 14 item 5): old and new application versions against
one store. The matrix runs old-writer/new-reader and new-writer/old-reader for every
registered model; through a real store as well."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import SchemaVersionTooNew
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.compat import compatibility_matrix

from . import apps

APPS = {"v1": apps.v1, "v1+dc": apps.v1_with_downcaster, "v2": apps.v2}


def _support(customer: str, priority: str, tags: list[str]) -> Any:
    def make(app: str) -> Any:
        old = apps.SupportV1(customer_name=customer, priority=priority, tags=tags)
        return old if app.startswith("v1") else apps.upgraded(old)

    return make


SAMPLES = {
    "support": [_support("ann", "low", []), _support("bo", "high", ["x", "y"])],
}


def test_every_registered_model_is_in_the_matrix() -> None:
    models = {s.name for reg in APPS.values() for s in reg}
    assert models <= set(SAMPLES)


def test_the_compatibility_matrix_never_yields_a_wrong_value() -> None:
    cells = compatibility_matrix(APPS, SAMPLES)
    table = {(c.writer, c.reader): c.outcome for c in cells}
    assert len(cells) == 3 * 3 * 2
    assert [c for c in cells if c.outcome == "WRONG"] == []
    assert table[("v1", "v2")] == "ok"  # old writer, new reader: upcast
    assert table[("v2", "v1+dc")] == "ok"  # new writer, old reader: downcast
    assert table[("v2", "v1")] == "refused"  # no downcaster: a typed error
    assert {c.detail for c in cells if c.outcome == "refused"} == {"SchemaVersionTooNew"}


def test_a_broken_caster_shows_up_as_wrong() -> None:
    broken = SchemaRegistry()
    schema = broken.register(apps.SupportV2, name="support", version=2)
    schema.upcaster(1)(lambda doc: {**apps.support_v2.upcasters[1](doc), "priority": 1})
    cells = compatibility_matrix({"v1": apps.v1, "v2": broken}, SAMPLES)
    assert [(c.writer, c.reader) for c in cells if c.outcome == "WRONG"] == [("v1", "v2")]


async def test_old_and_new_applications_share_one_store_during_a_rollout() -> None:
    async with StateStore("memory://") as store:
        old, old_dc, new = (
            TypedStates(store, apps.support_v1),
            TypedStates(store, apps.support_v1_dc),
            TypedStates(store, apps.support_v2),
        )
        await old.create("a-1", apps.SupportV1(customer_name="ann", priority="low"))
        state = await new.load("a-1")  # new reads old
        state.escalated = True
        await new.save("a-1", state)  # new writes v2
        with pytest.raises(SchemaVersionTooNew):
            await old.load("a-1")  # old without a downcaster: refused, not misread
        back = await old_dc.load("a-1")
        assert back == apps.SupportV1(customer_name="ann", priority="low")
        back.tags.append("from-old")
        await old_dc.save("a-1", back)  # old writes v1 again
        again = await new.load("a-1")
        assert again.tags == ["from-old"] and again.customer == "ann"
        assert again.escalated is True  # dropped by the downcaster, kept by the old write
        assert (await store.load("a-1")).schema_version == 1
