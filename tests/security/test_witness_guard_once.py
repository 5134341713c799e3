"""One witness guard per event loop. A store whose first use was a schema migration
noted its rewritten heads (a flush scheduled: a guard started), then its first gated
read started a second guard over the first: the first, unreachable, was collected
pending — "Task was destroyed but it is pending! … statekeeper-witness" on stderr (seen
after `statekeeper migrate`, and in an application migrating at start-up)."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.schema import TypedStates
from statekeeper.schema.migrate import migrate
from tests.schema import apps


async def test_a_migration_as_first_use_leaves_no_guard_collected_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with StateStore(url) as store:
        await TypedStates(store, apps.support_v1).create("s", apps.SupportV1(customer_name="A"))
    caplog.set_level(logging.ERROR, logger="asyncio")
    async with StateStore(url) as store:  # its first use: the migration
        assert (await migrate(store, apps.support_v2)).changed == 1
        await store.load("s")
        gc.collect()
        destroyed = [r.getMessage() for r in caplog.records if "destroyed" in r.getMessage()]
        assert destroyed == []
