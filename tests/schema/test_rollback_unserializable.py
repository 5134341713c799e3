"""A downcaster whose result the codec cannot store (NaN, a naive datetime: a
``SerializationError``) for ONE agent written since its migration. The rollback
stopped at that agent with the codec's bare error, leaving the others of its page
(and every rerun) stuck at the new version. That agent is now reported as any agent
the rollback cannot restore (``report.failed``, kind ``SerializationError``, left at
its version) and the others are rolled back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate, rollback

from . import apps

N = 5
BAD = "s-2"

nan_back = SchemaRegistry().register(apps.SupportV2, name="support", version=2)


@nan_back.upcaster(from_version=1)
def _up(doc: dict[str, Any]) -> dict[str, Any]:
    doc["customer"] = doc.pop("customer_name")
    doc["priority"] = apps.PRIORITIES[doc.get("priority", "normal")]
    return doc


@nan_back.downcaster(from_version=2)
def _down(doc: dict[str, Any]) -> dict[str, Any]:
    doc["customer_name"] = doc.pop("customer")
    doc["priority"] = float("nan") if doc["customer_name"] == BAD else "normal"
    doc.pop("escalated", None)
    return doc


@pytest.mark.parametrize("method", ["rewrite", "append"])
@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_one_unstorable_downcast_fails_that_agent_only(
    tmp_path: Path, engine: str, method: str
) -> None:
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:
        v1 = TypedStates(store, apps.support_v1)
        for i in range(N):
            await v1.create(f"s-{i}", apps.SupportV1(customer_name=f"s-{i}"))
        report = await migrate(store, nan_back, method=method)
        assert report.changed == N
        v2 = TypedStates(store, nan_back)
        for i in range(N):  # every agent written since: back through the downcaster
            state = await v2.load(f"s-{i}")
            state.escalated = True
            await v2.save(f"s-{i}", state)
        back = await rollback(store, nan_back, run_id=report.run_id)
        assert [f.agent_id for f in back.failed] == [BAD]
        assert back.failed[0].kind == "SerializationError" and back.changed == N - 1
        versions = {f"s-{i}": (await store.load(f"s-{i}")).schema_version for i in range(N)}
        assert versions == {f"s-{i}": 2 if f"s-{i}" == BAD else 1 for i in range(N)}
