"""A retention compaction changes only the stream it planned on, not a new agent of the
same id made meanwhile by another process (deleted and written again up to the same
head). ``keep_last`` folds the agent's state at the target seq (its new base snapshot),
reads the record at the listed head again (``check_unchanged``, as a purge does), then
stores that snapshot and prunes the history up to it.

- Made again while it folded: its history up to the target was removed and the old
  stream's state stored as its base — "compact done", the new agent's acknowledged
  writes gone, its chain broken (a fresh load raised ``HistoryCompacted``). The re-read
  after the fold catches it.
- Made again after that last look, before the prune's commit: the prune cut the new
  agent's history by the plan made on the stream before it. Now the engine's prune is
  conditional on the head and its event's stored checksum (``Backend.prune(..., head,
  checksum)``, one atomic step).

Either way: skipped, "deleted and written again since it was listed", nothing removed."""

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
@pytest.mark.parametrize(
    "moment", ["_full_snapshot_at", "check_unchanged"], ids=["while-folded", "after-last-look"]
)
async def test_an_agent_made_again_meanwhile_is_not_compacted(
    tmp_path: Path, engine: str, governed: bool, moment: str, monkeypatch: pytest.MonkeyPatch
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
            step = getattr(r, moment)
            made_again: list[int] = []

            async def then_made_again(*args: Any) -> Any:
                out = await step(*args)
                if not made_again:  # another process, right after that step
                    made_again.append(1)
                    await store.delete("acme/b")
                    for i in range(9):  # head 9 again
                        await store.save("acme/b", {"new": i})
                return out

            monkeypatch.setattr(r, moment, then_made_again)
            report = await apply_retention(store, RetentionPolicy.parse("acme keep_last=3\n"))
            monkeypatch.undo()
            assert made_again
            assert [(a.agent_id, a.kind, a.outcome) for a in report.actions] == [
                ("acme/b", "compact", "skipped")
            ]
        async with StateStore(url, **options) as fresh:  # (nothing cached)
            assert (await fresh.load("acme/b")).data == {"new": 8}  # acknowledged, kept
            history = [e async for e in fresh.history("acme/b")]
            assert [e.seq for e in history] == list(range(1, 10))  # none cut
            assert await fresh.backend.latest_snapshot("acme/b", 6) is None  # none left
            # the stream planned on is still compacted when nothing else happened
            report = await apply_retention(fresh, RetentionPolicy.parse("acme keep_last=3\n"))
            assert [(a.agent_id, a.outcome) for a in report.actions] == [("acme/b", "done")]
            assert (await fresh.load("acme/b")).data == {"new": 8}
