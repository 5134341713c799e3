"""A restore stopped after it wrote the agents and before it renewed the target's feed
id (SIGKILL, a lost connection), then run again with ``skip_existing`` as its error
says: every agent was there, so the rerun wrote nothing and renewed nothing — a cursor
the target gave out before the restore resumed on the restored events instead of
raising ``FeedChanged``, as a restore run through at once makes it (trialkill: the
restore of 300 agents killed at its last statement, on SQLite and PostgreSQL). The id
is renewed before the first write now: a restore stopped anywhere after it has renewed
it, one stopped before renews it when run again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedChanged
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url
from ..governance._restore_stopped import Killed, stopped_after_writing


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_restore_stopped_after_its_writes_then_rerun_renews_the_feed(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 'src.db'}") as source:
        for n in range(6):
            await source.save(f"a{n % 2}", {"n": n})
        await backup(source, tmp_path / "full.skb", key)
    (tmp_path / "dst").mkdir()
    with fresh_url(engine, tmp_path / "dst") as url:
        async with StateStore(url) as target:
            await target.save("local", {"n": 0})
            sub = target.subscribe()
            await anext(sub)
            before = str(sub.cursor)  # a consumer of the target, before the restore
            with stopped_after_writing(monkeypatch), pytest.raises(Killed):
                await restore(target, [tmp_path / "full.skb"], key)
        async with StateStore(url) as target:  # the rerun, as the error message says
            again = await restore(target, [tmp_path / "full.skb"], key, skip_existing=True)
            assert (again.agents, again.skipped) == (0, 2)
            for agent in ("a0", "a1"):
                assert (await target.load(agent)).data == {"n": 4 + int(agent[1])}
            with pytest.raises(FeedChanged):
                await anext(target.subscribe(from_position=before, stop_at_head=True))
            got = [(c.agent_id, c.seq) async for c in target.subscribe(stop_at_head=True)]
            wanted = [(a, s) for a in ("a0", "a1") for s in (1, 2, 3)] + [("local", 1)]
            assert sorted(got) == wanted
