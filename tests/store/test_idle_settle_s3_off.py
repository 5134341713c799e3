"""``settle_after`` on a store whose engine cannot settle at the head (S3: no commit
spans the head's object and the snapshot's; an explicit settle is refused, an idle one
skipped). Was: every save queued an idle settle that then ran only to be skipped (one
``skipped`` per idle spell of each agent, a task and a head read each). Now it is
switched off at the first, as a governed store's is: later saves queue nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore

from ..backends._services import fresh_url

pytestmark = pytest.mark.slow  # moto's S3 server over HTTP


async def test_s3_switches_the_idle_settle_off(tmp_path: Path) -> None:
    with fresh_url("s3", tmp_path) as url:
        async with StateStore(url, snapshot_every=10, settle_after=0) as store:
            for agent in ("a", "b", "c", "d"):
                for n in range(1, 3):
                    await store.save(agent, {"n": n})
                await store.idle_settled()
            stats = store.stats().idle_settles
            assert stats is not None and (stats.settled, stats.failed) == (0, 0)
            assert stats.skipped == 1, stats  # was: 4 (one per agent, each idle spell)
            assert stats.pending == 0
            assert (await store.load("d")).data == {"n": 2}
