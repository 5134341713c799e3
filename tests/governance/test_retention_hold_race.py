"""A legal hold placed while ``retention apply`` runs stops the purges and compactions
that have not started yet (docs: "a hold is checked when a purge starts"). Retention
read the holds once a page of 500 agents, before listing it: a hold placed by another
process after that (``statekeeper hold add`` answered "legal hold placed") did not stop
the compaction of a held agent later in the page — its history was removed, and the
run said "0 on legal hold"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.holds import add_hold
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url
from ._keyring import KEYRING
from ._listing import after_first_page

T0 = 1_000_000.0
ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
@pytest.mark.parametrize("rule", ["keep_last=1", "ttl=1h"])
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_a_hold_placed_during_the_run_stops_what_has_not_started(
    tmp_path: Path, engine: str, rule: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, clock=lambda: T0, **options) as store:
            for name in ("acme/a", "acme/b"):
                for i in range(4):
                    await store.save(name, {"i": i})

            async def another_process_holds_b() -> None:
                assert await add_hold(store, "acme/b", "Smith v. Acme")

            monkeypatch.setattr(
                store, "list_agents", after_first_page(store, another_process_holds_b)
            )
            report = await apply_retention(
                store, RetentionPolicy.parse(f"acme {rule}\n"), now=T0 + 7200
            )
            monkeypatch.undo()
            # the held agent keeps all of its history
            assert [e.seq async for e in store.history("acme/b")] == [1, 2, 3, 4]
            assert report.held == 1
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/a", "done")]
            if governed:  # no entry claims a change of the held agent; the log verifies
                log = AuditLog(store.backend, KEYRING)
                entries = [(e.operation, e.agent_id) async for e in log.entries()]
                assert not [e for e in entries if e[1] == "acme/b" and e[0] not in ("save", "hold")]
                verified = await log.verify()
                assert verified.ok and not verified.unapplied, verified.problems
