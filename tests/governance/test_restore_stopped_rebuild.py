"""A restore stopped after its writing pass and before it rebuilt the delta (tail)
snapshots whole (:mod:`statekeeper.governance.backup.wholesnaps`), then run again with
``skip_existing`` as its error says: every agent was there, so the rerun wrote nothing,
rebuilt nothing and said 'restored and verified' — while ``verify`` reported each such
snapshot's missing base and every cold load logged it and replayed the whole stream
(trialkill: 20 agents of 130-134 events restored, killed at the last statements). The rerun
rebuilds the snapshots of the backup's streams it finds restored but still delta; the
target's own streams stay as they are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url
from ._restore_stopped import Killed, stopped_after_writing

EVENTS = 134  # the latest snapshot a tail (delta) of the default snapshot policy


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_restore_stopped_before_its_rebuild_is_finished_by_the_rerun(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as source:
        for n in range(EVENTS):
            for agent in ("a", "b"):
                await source.save(agent, {"n": n, "who": agent})
        await backup(source, tmp_path / "full.skb", key)
    (tmp_path / "dst").mkdir()
    with fresh_url(engine, tmp_path / "dst") as url:
        async with StateStore(url) as target:
            with stopped_after_writing(monkeypatch), pytest.raises(Killed):
                await restore(target, [tmp_path / "full.skb"], key)
        async with StateStore(url) as target:
            stopped = await target.verify()
            assert not stopped.ok  # (the state the stop left: the deltas' bases missing)
            again = await restore(target, [tmp_path / "full.skb"], key, skip_existing=True)
            assert (again.agents, again.skipped) == (0, 2)
            report = await target.verify()
            assert report.ok, report
            for agent in ("a", "b"):
                assert (await target.load(agent)).data == {"n": EVENTS - 1, "who": agent}
