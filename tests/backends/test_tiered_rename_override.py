"""A tiered key rename on a durable tier whose ``rename_keys`` override was written
before ``guard=`` (it inherits ``guards_renames``, not the argument), directly or
through the instrumented wrapper: the rename is made as before the argument (plain,
unchecked) and answers its count — never ``TypeError`` (not a statekeeper error) from
a ``guard=`` passed because the class declared ``guards_renames``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.base import Backend, takes_rename_guard
from statekeeper.backends.tiered import TieredBackend
from statekeeper.observability import instrument
from statekeeper.testing import request


class _OverrideBeforeGuard(SQLiteBackend):
    async def rename_keys(  # type: ignore[override]
        self, agent_id: str, renames: Sequence[tuple[str, str]]
    ) -> int:
        return await super().rename_keys(agent_id, renames)


def _direct(path: Path) -> Backend:
    return _OverrideBeforeGuard(path)


def _observed(path: Path) -> Backend:
    store = StateStore(_OverrideBeforeGuard(path))
    instrument(store, registry=CollectorRegistry(), tracing=False)
    return store.backend  # (the instrumented wrapper of the engine)


@pytest.mark.parametrize("make", [_direct, _observed], ids=["override", "observed-override"])
async def test_a_tiered_rename_on_an_override_before_guard(
    tmp_path: Path, make: Callable[[Path], Backend]
) -> None:
    durable = make(tmp_path / "durable.db")
    assert durable.guards_renames is (make is _direct)  # (the wrapper declares none)
    assert not takes_rename_guard(durable)
    tiered = TieredBackend(durable, cold=SQLiteBackend(tmp_path / "cold.db"), idle_after=1)
    try:
        await tiered.append(request("a", 0, key="k1"))
        assert await tiered.rename_keys("a", [("k1", "n1")]) == 1  # (before: TypeError)
        assert [k for k, _, _ in await tiered.idempotency_keys("a")] == ["n1"]
    finally:
        await tiered.close()
