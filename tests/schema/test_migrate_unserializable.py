"""An upcast the codec cannot store (NaN, a naive datetime, an unregistered type: a
``SerializationError``) in ONE agent's state. The dry run said every agent would
migrate; the run itself stopped at that agent with the codec's error, leaving every
agent of its page unmigrated, and so did every rerun: one agent blocked the whole
migration. It is reported as any agent that cannot be migrated (``report.failed``,
in the dry run too) and the others are migrated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.schema import SchemaRegistry, TypedStates
from statekeeper.schema.migrate import migrate

from . import apps

N = 6
BAD = "s-3"


class Scored(BaseModel):
    customer: str
    score: float = 0.0


scored = SchemaRegistry().register(Scored, name="support", version=2)


@scored.upcaster(from_version=1)
def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    name = doc.pop("customer_name")
    # (the priority and tags fields of v1 stay: kept as undeclared keys)
    return {**doc, "customer": name, "score": float("nan") if name == BAD else 1.0}


@pytest.mark.parametrize("method", ["rewrite", "append"])
@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_one_unstorable_upcast_fails_that_agent_only(
    tmp_path: Path, engine: str, method: str
) -> None:
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'a.db'}"
    async with StateStore(url) as store:
        v1 = TypedStates(store, apps.support_v1)
        for i in range(N):
            await v1.create(f"s-{i}", apps.SupportV1(customer_name=f"s-{i}"))
        dry = await migrate(store, scored, dry_run=True)
        assert [f.agent_id for f in dry.failed] == [BAD]
        assert dry.failed[0].kind == "SerializationError" and dry.changed == N - 1
        report = await migrate(store, scored, method=method)
        assert [f.agent_id for f in report.failed] == [BAD] and not report.ok
        assert report.failed[0].kind == "SerializationError"
        assert report.changed == N - 1
        versions = {f"s-{i}": (await store.load(f"s-{i}")).schema_version for i in range(N)}
        assert versions == {f"s-{i}": 1 if f"s-{i}" == BAD else 2 for i in range(N)}


@pytest.mark.parametrize("method", ["rewrite", "append"])
async def test_the_fields_removed_count_only_the_agents_migrated(
    tmp_path: Path, method: str
) -> None:
    """``report.removed`` (the fields the casters removed, with how many agents had
    them) counted the agent that then failed with ``SerializationError``: it still has
    its ``customer_name``."""
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        v1 = TypedStates(store, apps.support_v1)
        for i in range(N):
            await v1.create(f"s-{i}", apps.SupportV1(customer_name=f"s-{i}"))
        dry = await migrate(store, scored, dry_run=True)
        assert dry.removed == {"customer_name": N - 1}
        report = await migrate(store, scored, method=method)
        assert [f.agent_id for f in report.failed] == [BAD]
        assert report.removed == {"customer_name": N - 1}
