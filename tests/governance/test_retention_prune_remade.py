"""A retention compaction's prune cuts only the stream it was planned on. ``keep_last``
re-reads the record at the listed head just before its change (``check_unchanged``),
then stores the new base and prunes: an agent deleted and written again by another
process up to the same head between that re-read and the prune's commit had its
history cut by the plan made on the stream before it — "compact done", the new
agent's acknowledged events gone (a fresh load raised ``HistoryCompacted`` or read the
old stream's state as its base). Now the engine's prune is conditional on the head and
its event's stored checksum (``Backend.prune(..., head, checksum)``, one atomic step):
skipped, "deleted and written again since it was listed", nothing removed."""

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
async def test_an_agent_made_again_after_the_last_look_is_not_pruned(
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
            look = r.check_unchanged
            made_again: list[int] = []

            async def looked_then_made_again(*args: Any) -> None:
                await look(*args)  # the stream is the one planned on, here
                if not made_again:  # another process, right after the last look
                    made_again.append(1)
                    await store.delete("acme/b")
                    for i in range(9):  # head 9 again
                        await store.save("acme/b", {"new": i})

            monkeypatch.setattr(r, "check_unchanged", looked_then_made_again)
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
