"""An agent another process deletes while ``retention apply`` runs (after its page was
listed, before its turn) is passed over, outcome ``skipped``: nothing of it is left to
purge or compact. Before, the run reported it ``failed`` and exited 1 — a compaction
with "agent not found", a TTL purge with "integrity check failed ...: no record at
the head to date its last write", a damaged stream named where there was none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.store.holds import refuse_if_held

from ..backends._services import fresh_url
from ._keyring import KEYRING
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


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_an_agent_made_again_up_to_the_same_head_is_not_purged(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted and written again by another process after the purge checked its head
    record, up to the same head: the delete, conditional on the head seq alone, took
    the new agent — "done, not written for 1h", its acknowledged writes gone. Now the
    head record is read again just before the delete: skipped, "written since"."""
    clock = [T0]
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: clock[0], **options) as store:
            for i in range(2):
                await store.save("acme/b", {"old": i})
            checked = refuse_if_held
            made_again: list[int] = []

            async def held_then_made_again(store_: Any, agent_id: str, kind: str) -> None:
                await checked(store_, agent_id, kind)  # (after the head record's check)
                if not made_again:
                    made_again.append(1)
                    await store.delete("acme/b")
                    clock[0] = T0 + 7100
                    await store.save("acme/b", {"new": 1})
                    await store.save("acme/b", {"new": 2})  # head 2 again

            monkeypatch.setattr(
                "statekeeper.governance.retention.refuse_if_held", held_then_made_again
            )
            report = await apply_retention(
                store, RetentionPolicy.parse("acme ttl=1h\n"), now=T0 + 7200
            )
            monkeypatch.undo()
            assert made_again
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/b", "skipped")]
            assert (await store.load("acme/b")).data == {"new": 2}
