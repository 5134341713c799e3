"""An agent another process deletes while ``retention apply`` runs (after its page was
listed, before its turn) is passed over, outcome ``skipped``: nothing of it is left to
purge or compact. Before, the run reported it ``failed`` and exited 1 — a compaction
with "agent not found", a TTL purge with "integrity check failed ...: no record at
the head to date its last write", a damaged stream named where there was none."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url
from ._listing import after_first_page

T0 = 1_000_000.0
ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("rule", ["keep_last=1", "ttl=1h"])
async def test_an_agent_deleted_during_the_run_is_skipped(
    tmp_path: Path, engine: str, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: T0) as store:
            for name in ("acme/a", "acme/b"):
                for i in range(4):
                    await store.save(name, {"i": i})

            async def another_process_deletes_b() -> None:
                assert await store.delete("acme/b")

            monkeypatch.setattr(
                store, "list_agents", after_first_page(store, another_process_deletes_b)
            )
            report = await apply_retention(
                store, RetentionPolicy.parse(f"acme {rule}\n"), now=T0 + 7200
            )
            monkeypatch.undo()
            outcomes = [(a.agent_id, a.outcome) for a in report.actions]
            assert outcomes == [("acme/a", "done"), ("acme/b", "skipped")], report.actions
            assert "deleted since it was listed" in report.actions[1].reason
            assert await store.head("acme/b") == 0
