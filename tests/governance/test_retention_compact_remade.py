"""A retention compaction changes only the stream it planned on, not a new agent of the
same id made while it folded. ``keep_last`` folds the agent's state at the target seq
(its new base snapshot), then stores that snapshot and removes the history up to it.
An agent deleted and written again by another process up to the same head meanwhile
is another stream: its history up to the target was removed and the old stream's
state stored as its base — "compact done", the new agent's acknowledged writes gone and
its chain broken (a fresh load raised ``HistoryCompacted``). Now the record at the
listed head is read again after the fold (``check_unchanged``, as a purge does):
skipped, "deleted and written again since it was listed", nothing changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance import retention as r
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url
from ._keyring import KEYRING

ADMIN = parse_policy('[principals.ops]\nadmin = ["**"]\n')


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])  # (two stores: one file)
@pytest.mark.parametrize("governed", [False, True], ids=["plain", "governed"])
async def test_an_agent_made_again_while_folded_is_not_compacted(
    tmp_path: Path, engine: str, governed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = (
        {"keyring": KEYRING, "principal": "ops", "policy": ADMIN, "audit": Audit()}
        if governed
        else {}
    )
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, **options) as store:
            for i in range(9):
                await store.save("acme/b", {"old": i})
            fold = r._full_snapshot_at
            made_again: list[int] = []

            async def folded_then_made_again(*args: Any) -> Any:
                full = await fold(*args)
                if not made_again:  # another process, right after the fold
                    made_again.append(1)
                    await store.delete("acme/b")
                    for i in range(9):  # head 9 again
                        await store.save("acme/b", {"new": i})
                return full

            monkeypatch.setattr(r, "_full_snapshot_at", folded_then_made_again)
            report = await apply_retention(store, RetentionPolicy.parse("acme keep_last=3\n"))
            monkeypatch.undo()
            assert made_again
            assert [(a.agent_id, a.kind, a.outcome) for a in report.actions] == [
                ("acme/b", "compact", "skipped")
            ]
        async with StateStore(url, **options) as fresh:  # (nothing cached)
            assert (await fresh.load("acme/b")).data == {"new": 8}  # acknowledged, kept
            assert len([e async for e in fresh.history("acme/b")]) == 9
            # the stream planned on is still compacted when nothing else happened
            report = await apply_retention(fresh, RetentionPolicy.parse("acme keep_last=3\n"))
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/b", "done")]
            assert (await fresh.load("acme/b")).data == {"new": 8}
