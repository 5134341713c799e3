"""A TTL purge decides on a listing of the agents; an agent written between that
listing and its delete is no longer idle and must not be deleted (the write was
acknowledged: deleting it loses it without an error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url
from ._keyring import KEYRING
from ._listing import after_first_page

T0 = 1_000_000.0
POLICY = RetentionPolicy.parse("stale ttl=1h\n")
ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_purge_spares_an_agent_written_after_it_was_listed(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [T0]
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: now[0], **options) as store:
            await store.save("stale/c", {"i": 0})
            await store.save("stale/d", {"i": 0})  # idle: purged

            async def another_write() -> None:
                now[0] = T0 + 7200
                await store.save("stale/c", {"i": 1})

            monkeypatch.setattr(store, "list_agents", after_first_page(store, another_write))
            report = await apply_retention(store, POLICY, now=T0 + 7200)
            monkeypatch.undo()
            assert (await store.load("stale/c")).data == {"i": 1}  # the acknowledged write
            assert [a.agent_id for a in await store.list_agents()] == ["stale/c"]
            outcomes = {a.agent_id: a.outcome for a in report.actions}
            assert outcomes == {"stale/c": "skipped", "stale/d": "done"}
            skipped = next(a for a in report.actions if a.agent_id == "stale/c")
            assert "written since" in skipped.reason
            assert report.purged == 1
            if governed:
                log = AuditLog(store.backend, KEYRING)
                audited = [(e.operation, e.agent_id, e.outcome) async for e in log.entries()]
                assert ("purge", "stale/c", "done") not in audited
                assert ("purge", "stale/d", "done") in audited
                verified = await log.verify()
                assert verified.ok and not verified.unapplied, verified.problems


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis", "s3", "tiered"])
async def test_delete_agent_at_deletes_only_at_the_head_named(tmp_path: Path, engine: str) -> None:
    from statekeeper.errors import ConflictError

    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("a", {"i": 0})
            await store.save("a", {"i": 1})
            with pytest.raises(ConflictError) as caught:
                await store.backend.delete_agent_at("a", 1)
            assert (caught.value.expected_seq, caught.value.current_seq) == (1, 2)
            assert (await store.load("a")).data == {"i": 1}  # nothing deleted
            assert await store.backend.delete_agent_at("a", 2)
            assert await store.backend.head("a") == 0
            with pytest.raises(ConflictError):
                await store.backend.delete_agent_at("a", 2)  # gone: head 0
